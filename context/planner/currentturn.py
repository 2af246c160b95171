"""The current turn when it outgrows its room (``docs/PLANNER.md``): fail narrow, recover wide. Pure.

A turn of many steps (a 140-step coding turn grows past 130k tokens) cannot be sent whole to a
model with a 6k horizon, and must not be sent at all over the budget. Its older steps give way in
whole steps, oldest first, so every tool_use keeps its tool_result:

1. **digest**: a step's evidence results become their digests (each ends ``[evidence:<id> …]``);
2. **step packet**: the oldest steps leave the request; one ``<context_summary turn= steps=>`` block
   after the directive names every call they ran with the evidence id it got, one line per call, with its
   arguments and what it returned (``list``) or its name alone (``ids``), and how to recall them;
3. past that, nothing is sent: the planner raises ``RequestTooLarge``.

Compaction goes in chunks: the boundaries are a fold over the steps, each new step appended as the
request carried it while the turn still fits its room; only when it does not are the boundaries moved,
far enough that the turn drops to ``COMPACT_TO`` of its room. Between two moves every request is the
previous one plus the new steps: a byte prefix, so a provider's prefix cache holds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import accumulate

from vak_context.context.capacity.tokens import estimate_tokens
from vak_context.context.history.packets import StepLevel, step_items, step_packet_chars
from vak_context.context.history.render import EvidenceInfo, step_chars
from vak_context.context.history.turns import Turn, TurnIndex
from vak_context.context.planner.records import CurrentTurnPlan

# The current turn's reserve: a prediction (the EWMA of past turns) is held to this share of what the
# prefix, tail and output reserve leave; a turn that grows doubles its reserve up to the larger share,
# past which it compacts itself instead. The history keeps the rest.
PREDICTED_SHARE = 0.5
CURRENT_TURN_SHARE = 0.75
# A compaction brings the current turn down to this share of its room, so the next ones wait.
COMPACT_TO = 0.5


@dataclass(frozen=True)
class TurnCosts:
    """The current turn's characters, per step (index k = step k + 1), as ``request_chars`` counts them."""

    ordinal: int
    directive: int
    verbatim: list[int]  # the step with its results as the request carried them, and the nudges after it
    digest: list[int]  # the step with its evidence results as their digests, and the nudges after it
    line_chars: list[int]  # its lines in a list-level step packet
    brief_chars: list[int]  # its lines in an ids-level step packet
    items: list[int]  # how many evidence ids it got
    digests: bool  # whether digests were known (else a step goes from as carried to the packet)


def turn_costs(index: TurnIndex, turn: Turn, infos: Mapping[str, EvidenceInfo] | None) -> TurnCosts:
    per_step = step_chars(turn, infos or {})
    items = step_items(index, turn)
    nudges = nudge_chars(turn)  # sent after their step, and left out with it
    verbatim = [v + n for (v, _), n in zip(per_step, nudges, strict=True)]
    return TurnCosts(
        turn.ordinal,
        len(turn.directive.text),
        verbatim,
        [d + n for (_, d), n in zip(per_step, nudges, strict=True)] if infos else verbatim,
        [sum(len(item.line) for item in it) for it in items],
        [sum(len(item.brief) for item in it) for it in items],
        [len(it) for it in items],
        bool(infos),
    )


def nudge_chars(turn: Turn) -> list[int]:
    """Per step, the characters of the runtime redo nudges ``vak_context.context.history.render.render_turn`` sends after
    it (verbatim, as a user text part). They leave with their step when a packet covers it, so a step's
    cost carries them: without them a turn with a nudge rendered longer than its plan."""
    out = [0] * len(turn.steps)
    for after, text in turn.nudges:
        if 1 <= after <= len(out):  # render_turn sends a nudge only after a step of the turn
            out[after - 1] += len(text)
    return out


def current_reserve(ewma: float, directive: int, verbatim: int, minimum: int, available: int) -> int:
    """What the history leaves for the current turn: the prediction (held to ``PREDICTED_SHARE``),
    doubled while the turn so far is larger (up to ``CURRENT_TURN_SHARE``), never below the minimum.
    Doubling, not following the turn step by step, keeps the history's plan (and the cache) steady."""
    if available <= 0:
        return minimum
    reserve = max(min(math.ceil(ewma), math.floor(available * PREDICTED_SHARE)), directive, 1)
    cap = math.floor(available * CURRENT_TURN_SHARE)
    while reserve < verbatim and reserve < cap:
        reserve *= 2
    return max(min(reserve, cap), minimum)


class _Fold:
    def __init__(self, c: TurnCosts, tpc: float, covered: int) -> None:
        self.c, self.tpc, self.covered = c, tpc, covered
        self.v = [0, *accumulate(c.verbatim)]
        self.g = [0, *accumulate(c.digest)]
        self.lc = [0, *accumulate(c.line_chars)]
        self.bc = [0, *accumulate(c.brief_chars)]
        self.n = [0, *accumulate(c.items)]

    def chars(self, p: int, d: int, m: int, level: StepLevel) -> int:
        """Directive, step packet over covered+1..p, digests p+1..d, as carried d+1..m."""
        c, a = self.c, self.covered
        packet = 0
        if p > a:
            packet = step_packet_chars(c.ordinal, a + 1, p, level=level, line_chars=self.lc[p] - self.lc[a],
                                       brief_chars=self.bc[p] - self.bc[a], items=self.n[p] - self.n[a])
        return c.directive + packet + (self.g[d] - self.g[p]) + (self.v[m] - self.v[d])

    def tokens(self, p: int, d: int, m: int, level: StepLevel) -> int:
        return estimate_tokens(self.chars(p, d, m, level), self.tpc)

    def smallest(self, m: int) -> tuple[int, int, StepLevel]:
        """The most compact form after step m: every earlier step in the ids packet, step m digested
        (or as carried, when that is smaller or no digest is known)."""
        a = self.covered
        p = max(a, m - 1)
        d = m if self.c.digests and self.c.digest[m - 1] < self.c.verbatim[m - 1] else p
        return p, d, "ids"

    def minimum(self, m: int) -> int:
        if m <= self.covered:
            return self.tokens(self.covered, self.covered, self.covered, "list")
        p, d, level = self.smallest(m)
        return self.tokens(p, d, m, level)

    def compact(self, p: int, d: int, level: StepLevel, m: int, room: int) -> tuple[int, int, StepLevel]:
        """The least compaction after step m that brings the turn to ``COMPACT_TO`` of ``room`` (else
        to ``room``): digest older steps, then packet them (list before ids). The newest step stays as
        carried; only when nothing else fits is it digested too (``smallest``)."""
        digests = self.c.digests
        for limit in (math.floor(room * COMPACT_TO), room):
            if digests:
                for d2 in range(d, m):
                    if self.tokens(p, d2, m, level) <= limit:
                        return p, d2, level
            levels: tuple[StepLevel, ...] = ("list", "ids") if level == "list" else ("ids",)
            for lv in levels:
                for p2 in range(p + 1, m):
                    lo = max(d, p2)
                    if self.tokens(p2, m - 1 if digests else lo, m, lv) > limit:
                        continue  # not even with every older step after the packet digested
                    for d2 in range(lo, m if digests else lo + 1):
                        if self.tokens(p2, d2, m, lv) <= limit:
                            return p2, d2, lv
        return self.smallest(m)


def fit(c: TurnCosts, tpc: float, room: int, covered: int = 0) -> CurrentTurnPlan:
    """Fold the steps after ``covered`` into ``room`` tokens (see the module docstring). The plan's
    ``tokens`` may exceed ``room`` only when ``minimum_tokens`` does: the caller refuses that."""
    f = _Fold(c, tpc, covered)
    steps = len(c.verbatim)
    p = d = covered
    level: StepLevel = "list"
    for m in range(covered + 1, steps + 1):
        if f.tokens(p, d, m, level) > room:
            p, d, level = f.compact(p, d, level, m, room)
    return CurrentTurnPlan(
        steps=steps,
        covered=covered,
        packet_through=p,
        digest_through=d,
        level=level if p > covered else "",
        tokens=f.tokens(p, d, steps, level),
        room=room,
        verbatim_tokens=f.tokens(covered, covered, steps, "list"),
        minimum_tokens=f.minimum(steps),
    )


def verbatim_tokens(c: TurnCosts, tpc: float) -> int:
    """The whole turn as the request carried it."""
    return estimate_tokens(c.directive + sum(c.verbatim), tpc)


def minimum_tokens(c: TurnCosts, tpc: float, covered: int = 0) -> int:
    """The current turn's most compact form (``_Fold.smallest`` after its last step)."""
    return _Fold(c, tpc, covered).minimum(len(c.verbatim))
