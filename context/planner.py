"""The WorkingSetPlanner (spec §4): which past turns a request carries, and at what fidelity. Pure.

``plan(index, profile, directive, prefix_tokens=, tail_tokens=, state=)`` reads no clock and does no
I/O: the TurnIndex, the bound model's CapacityProfile, the directive, the measured prefix and tail
sizes and the planner's own state go in; a ``Plan`` comes out, carrying the next state (like an
autoscaling policy that returns its decision and its new state).

Budget::

    budget = horizon − prefix − tail − output_reserve − handoff − current_turn_reserve

``horizon`` is the instruction horizon, never past the verified (or declared) window; ``handoff``
the reset this model's plan starts after. ``current_turn_reserve`` is what the history leaves for
the current turn (``context.currentturn.current_reserve``): an EWMA (α 0.3) of the sizes past turns
had while current, held to half of what is left, doubled while the current turn is larger, up to
three quarters. The current turn gets what the history's plan leaves, and compacts itself in whole
steps when it outgrows that (``context.currentturn``); when even its most compact form does not fit,
``plan`` raises ``RequestTooLarge``: a request over the budget is never sent.

Value of a closed turn: ``max(recency, relevance, anaphora)``; recency = 1 / (1 + age in closed
turns), relevance = BM25 score of the directive and reading terms over the turn's card, divided by
the best score, anaphora = 1.0 for the preceding turn when the directive refers back.

Fill (a turn is never split; every cost is turn-whole):

1. Coverage: from the newest turn back, each turn is carried at its cheaper form (its card, or its
   full record when that is no larger) while it fits. When the oldest ones do not, they collapse
   into one packet over the oldest contiguous range, grown in batches of ``PACKET_BATCH_TURNS``
   from the first planned turn; the packet's room is reserved first (``context.packets``).
2. Full: in descending value (ties: anaphora, then newer), each turn is raised to Full while the
   extra cost fits, skipping one that does not for a cheaper one further down. A turn inside the
   packet range is retrieved whole (before the packet) only when it is relevant or referred to.

So Full is chosen by value while it fits, where "fits" means the turns not yet placed can still be
carried as cards (spec §10: a 31-turn session on a small model keeps about 2 turns Full and the
rest as cards). Reset-with-handoff is the one boundary: turns behind it are listed ``behind_reset``
and never planned; a reset that names its model applies to that model's plans only, and the plan
carries it (``Plan.reset``) so the projection renders its handoff. A profile with no usable horizon
(no rung passed, or the history cannot even be pointed at) gets a plan with ``rescue`` set: the
caller writes the reset-with-handoff for this model.
"""

from __future__ import annotations

import math
import re
from array import array
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import repeat
from operator import add, gt, le, truediv

import blake3
import numpy as np

from context.capacity import CapacityProfile, to_record
from context.currentturn import TurnCosts, current_reserve, fit, minimum_tokens, turn_costs, verbatim_tokens
from context.packets import (
    PACKET_BATCH_TURNS,
    PACKET_SHARE,
    PacketRoom,
    midturn_packet,
    packet_room,
    render_handoff,
    render_stored,
    seed_packet,
    stored_packet,
)
from context.plan import (
    Budget,
    CurrentTurnPlan,
    Fidelity,
    PacketPlan,
    Plan,
    PlannedTurn,
    PlannerState,
    ResetPlan,
    Rows,
    canonical_digest,
    flat_record,
    plan_digest,
)
from context.relevance import (
    Floats,
    Positions,
    SparseRelevance,
    TurnScores,
    normalised_columns,
    ranked_columns,
    ranked_lists,
)
from context.render import EvidenceInfo
from context.tokens import estimate_tokens
from context.turns import ResetMark, Summary, Turn, TurnIndex
from context.turnsizes import (
    TurnSize,
    TurnTable,
    estimate_size,
    running_totals,
    size_values,
    sizes_digest,
    turn_document,
)
from vak.bm25 import Bm25Index
from vak.errors import InvalidInput, RequestTooLarge

__all__ = [
    "Budget", "Fidelity", "PacketPlan", "Plan", "PlannedTurn", "PlannerState", "Rows", "budget_line", "plan",
    "refers_back",
]

# Words by which a directive refers back to what was just done ("do that again", "the second one").
_ANAPHORA = re.compile(
    r"\b(again|that|those|these|same|above|previous(?:ly)?|earlier|as before|"
    r"the (?:first|second|third|fourth|fifth|last|other|next) ones?|last (?:one|answer|result|time))\b",
    re.IGNORECASE,
)


def refers_back(directive: str) -> bool:
    return _ANAPHORA.search(directive) is not None


def _sizes_digest(index: TurnIndex, sizes: Mapping[str, TurnSize] | TurnTable | None, ids: list[str], end: int
                  ) -> str:
    """Every turn's sizes in characters up to the last planned one, behind a reset or not
    (``context.turnsizes.sizes_digest``): kept chunk by chunk by the view's table, so a new turn adds
    its own row to hash, not the session's."""
    table = _table(sizes, index, 0, end)
    if table is not None:
        return table.digest(end)
    return sizes_digest(ids[:end], *_size_rows(index, index.turns[:end], sizes))


def _relevance_digest(scored: Positions | list[int], scores: Floats | list[float], start: int) -> str:
    """The scored turns' positions (``start`` + each, as int64; the chain head names their turns), then
    their normalised scores as float64 bytes, in turn order: no per-turn text to join."""
    h = blake3.blake3(f"{start}\n".encode())
    # numpy columns or Python lists (few scores): the same native int64 and float64 bytes
    h.update(scored.tobytes() if isinstance(scored, np.ndarray) else array("q", scored).tobytes())
    h.update(scores.tobytes() if isinstance(scores, np.ndarray) else array("d", scores).tobytes())
    return h.hexdigest()


def _check_tokens(name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidInput(f"{name} must be a whole number of tokens >= 0, not {value!r}; measure it first")
    return value


# ------------------------------------------------------------------ the plan


CHEAP, CARD, EVIDENCE_CHARS, EVIDENCE_ITEMS = range(4)  # the columns of ``_Work.totals``


@dataclass
class _Work:
    """The history being planned, as columns (position i = the i-th planned turn, oldest first)."""

    turns: list[Turn]
    full: list[int]
    card: list[int]
    cheap: list[int]
    ev_chars: list[int]
    ev_items: list[int]
    relevance: Mapping[int, float]  # sparse: only turns that share a term with the query
    anaphora: int | None  # position of the referred-to turn
    fid: list[str]  # "F" full, "c" card, "p" packet
    retrieved: set[int]
    table: TurnTable | None  # the view's size table, when it is in step with the index
    keep_from: int = 0  # the first turn after the packet range
    # ``relevance`` as columns in position order: the digest and the Full candidates walk them in order.
    # numpy columns when there are many scores, else Python lists (``context.relevance``)
    scored: Positions | list[int] = field(default_factory=list)
    scores: Floats | list[float] = field(default_factory=list)
    # Running totals of cheap, card, evidence characters and items (``TurnTable.sums``), from ``base``:
    # the sum over positions a..b is ``totals[base + b] - totals[base + a]``.
    totals: tuple[list[int], list[int], list[int], list[int]] = ([0], [0], [0], [0])
    base: int = 0

    def total(self, column: int, a: int, b: int) -> int:
        totals = self.totals[column]
        return totals[self.base + b] - totals[self.base + a]

    def suffix_start(self, room: int) -> int:
        """The first position of the longest newest-first run whose cheap forms fit ``room``."""
        cheap, base, n = self.totals[CHEAP], self.base, len(self.turns)
        # the smallest a with total(a, n) <= room: the totals never fall, so it is a binary search
        return min(n, bisect_left(cheap, cheap[base + n] - room, base, base + n + 1) - base)

    def recency(self, i: int) -> float:
        return 1.0 / (len(self.turns) - i)

    def value(self, i: int) -> float:
        return max(self.recency(i), self.relevance.get(i, 0.0), 1.0 if i == self.anaphora else 0.0)


def plan(
    index: TurnIndex,
    profile: CapacityProfile,
    directive: str,
    *,
    prefix_tokens: int,
    tail_tokens: int,
    state: PlannerState | None = None,
    sizes: Mapping[str, TurnSize] | TurnTable | None = None,
    relevance: Mapping[str, float] | TurnScores | None = None,
    reading_terms: Sequence[str] = (),
    current: int | None = None,
    infos: Mapping[str, EvidenceInfo] | None = None,
    current_costs: TurnCosts | None = None,
) -> Plan:
    """Plan one request. ``current`` is the ordinal of the current turn when its directive is already
    in the index (turns after it are ignored: a replay as of that turn); None means ``directive`` is
    new. ``sizes`` gives each turn's ``measure_turn`` result, by turn id or as a ``TurnTable`` (turns
    missing from a mapping are estimated from their cards); ``relevance`` maps turn ids to raw BM25
    scores, or is a ``TurnScores`` by turn position (None: computed here over the cards). ``infos``
    digests the current turn's evidence (without them its steps go from as carried to the step packet);
    ``current_costs`` is ``context.currentturn.turn_costs`` of the current turn, when the caller keeps it.

    Raises ``RequestTooLarge`` when even the current turn's most compact form does not fit."""
    prefix = _check_tokens("prefix_tokens", prefix_tokens)
    tail = _check_tokens("tail_tokens", tail_tokens)
    if not isinstance(directive, str):
        raise InvalidInput(f"the directive must be text, not {type(directive).__name__}")
    tpc = profile.tokens_per_char.value
    if not (tpc > 0 and math.isfinite(tpc)):
        raise InvalidInput(f"profile {profile.key} has tokens_per_char {tpc!r}; it must be a positive number")
    state_in = state or PlannerState()
    key = str(profile.key)

    # -- the current turn and the history before it
    cur: Turn | None = None
    if current is not None:
        cur = index.turn(current)
        if cur.behind_reset:
            raise InvalidInput(f"turn {current} is behind a reset; plan a turn after the last reset")
        if directive and directive != cur.directive.text:
            raise InvalidInput(f"the directive differs from turn {current}'s own; pass its text, or current=None")
        directive = cur.directive.text
        end = current - 1
    else:
        if not directive.strip():
            raise InvalidInput("the directive is empty: pass the user's text, or current=N for a turn in the index")
        end = len(index.turns)
    costs = None
    if cur is not None:
        costs = current_costs if current_costs is not None and current_costs.ordinal == cur.ordinal \
            and len(current_costs.verbatim) == len(cur.steps) else turn_costs(index, cur, infos)
    directive_tokens = estimate_tokens(len(directive), tpc)
    whole = verbatim_tokens(costs, tpc) if costs is not None else directive_tokens
    minimum = minimum_tokens(costs, tpc) if costs is not None else directive_tokens

    new_state = state_in
    for t in index.turns[new_state.observed_through : end]:  # ordinal k sits at position k − 1
        seen = t.tokens if t.tokens_source == "receipt" else estimate_tokens(t.chars, tpc)
        new_state = new_state.observe(seen, t.ordinal)

    h = profile.instruction_horizon.tokens
    window = profile.verified_window if profile.verified_window is not None else profile.declared_window
    out = profile.output_reserve
    rescue = ""
    if h <= 0 or profile.usable_window <= 0:
        rescue = f"no usable horizon: {key} followed the instruction at no probed size"
        horizon = max(0, window)  # the rescue sends the current turn alone, against the window
    else:
        horizon = max(0, min(h, window))
    start, mark = _reset_start(index, end, key)
    reset = None
    if mark is not None and mark.turns:
        reset = ResetPlan(mark.id, mark.turns, estimate_tokens(len(render_handoff(mark.turns, mark.handoff)), tpc))
    available = horizon - prefix - tail - out - (reset.tokens if reset else 0)
    if minimum > available:
        raise RequestTooLarge(_too_large(key, horizon, prefix, tail, out, reset, minimum, costs), needed=minimum,
                              available=available)
    reserve = current_reserve(new_state.current_turn_reserve, directive_tokens, whole, minimum, available)
    budget = available - reserve
    back = refers_back(directive)

    w = _work(index, start, end, sizes, tpc)
    _relevance(index, w, directive, reading_terms, relevance)
    if back and w.turns:
        w.anaphora = len(w.turns) - 1

    packet: PacketPlan | None = None
    if not rescue and w.turns:
        packet, rescue = _fill(index, w, max(budget, 0), tpc)
    if rescue:
        packet = None
        w.fid = ["x"] * len(w.turns)
        w.retrieved = set()
        w.keep_from = len(w.turns)

    shown = [i for i in (*w.retrieved, *range(w.keep_from, len(w.turns))) if w.fid[i] in "Fc"]
    full_spent = sum(w.full[i] for i in shown if w.fid[i] == "F")
    card_spent = sum(w.card[i] for i in shown if w.fid[i] == "c")
    history = (packet.tokens if packet else 0) + full_spent + card_spent
    turn_plan = fit(costs, tpc, available - history) if costs is not None else None
    if turn_plan is not None and cur is not None and costs is not None and turn_plan.compacted and not rescue:
        # A recorded mid-turn compaction over the whole history and this turn's first steps is reused
        # (like a stored packet) when the turn must compact anyway and the rest of it fits beside it.
        reuse = _midturn(index, w, cur, costs, tpc, available)
        if reuse is not None:
            packet, turn_plan = reuse
            w.fid = ["p"] * len(w.turns)
            w.retrieved = set()
            w.keep_from = len(w.turns)
            full_spent = card_spent = 0
    current_tokens = turn_plan.tokens if turn_plan is not None else directive_tokens

    behind_full, behind_card = _behind(index, start, sizes, tpc)
    codes = "x" * start + _history_codes(w, bool(rescue)) + ("*" if current is not None else "")
    ids = _ids(index, end + (1 if current is not None else 0), sizes)
    if not start and w.table is not None:  # the table's own columns (or its memoised slices): no copy
        w.table.lend()
        columns: tuple[Sequence[str], Sequence[int], Sequence[int]] = (ids, w.full, w.card)
    else:
        columns = (tuple(ids), (*behind_full, *w.full), (*behind_card, *w.card))
    rows = Rows(
        columns[0], codes, columns[1], columns[2], start, end,
        _shifted(w, start),
        start + w.anaphora if w.anaphora is not None else None,
        frozenset(start + i for i in w.retrieved), current_tokens,
    )
    spent = Budget(
        horizon, prefix, tail, out, reserve, budget, current_tokens,
        packet=packet.tokens if packet else 0, cards=card_spent, full=full_spent,
    )
    inputs = {
        "model": str(profile.key),
        "profile": to_record(profile).model_dump(mode="json"),
        "directive": directive,
        "current": current,
        "prefix_tokens": prefix,
        "tail_tokens": tail,
        "reading_terms": list(reading_terms),
        "state": flat_record(state_in),
        "head": index.head,
        "turns": len(index.turns),
        "sizes": _sizes_digest(index, sizes, ids, end),
        "relevance": _relevance_digest(w.scored, w.scores, start),
    }
    result = Plan(
        model=str(profile.key),
        directive=directive,
        current_ordinal=current,
        rows=rows,
        packet=packet,
        budget=spent,
        state=new_state,
        refers_back=back,
        rescue=bool(rescue),
        rescue_reason=rescue,
        inputs_digest=canonical_digest(inputs),
        inputs=inputs,
        current_turn=turn_plan,
        reset=reset,
    )
    return replace(result, digest=plan_digest(result))


def _reset_start(index: TurnIndex, end: int, key: str) -> tuple[int, ResetMark | None]:
    """How many leading turns are behind a reset for model ``key``, and the reset whose handoff it
    reads: the last one for every model or for this one that puts only history behind it. A reset
    another model's rescue wrote changes nothing here."""
    start = _reset_prefix(index.turns, end)
    mark = None
    for r in index.reset_marks:
        if (r.model is None or r.model == key) and r.turns <= end:
            mark = r
    if mark is not None and mark.model is not None:
        start = max(start, mark.turns)
    return start, mark


def _too_large(key: str, horizon: int, prefix: int, tail: int, out: int, reset: ResetPlan | None, minimum: int,
               costs: TurnCosts | None) -> str:
    handoff = f", the reset's handoff ({reset.tokens})" if reset else ""
    smallest = (
        "its directive, the evidence ids of every earlier step and the last step's results as digests"
        if costs is not None and costs.verbatim else "its directive"
    )
    return (
        f"the request for {key} cannot fit: its {horizon}-token horizon holds the prefix ({prefix}), tail ({tail}), "
        f"output reserve ({out}){handoff}, and the current turn needs {minimum} tokens even at its most compact "
        f"({smallest}). Nothing was sent. Bind a model with a larger horizon, shorten the system prompt, tools "
        "or tail, or end this turn and carry on in a new one."
    )


def _midturn(index: TurnIndex, w: _Work, cur: Turn, costs: TurnCosts, tpc: float, available: int
             ) -> tuple[PacketPlan, CurrentTurnPlan] | None:
    """The recorded mid-turn compaction over every planned turn and the current turn's first steps, and
    the rest of the turn beside it, when both fit ``available``."""
    first = w.turns[0] if w.turns else cur  # a compaction inside the first planned turn covers its steps only
    stored = midturn_packet(index, first.id, cur.ordinal, len(cur.steps))
    if stored is None or stored.through_step is None:
        return None
    cost = estimate_tokens(len(render_stored(index, stored)), tpc)  # not kept: its header changes as the turn grows
    if cost >= available:
        return None
    rest = fit(costs, tpc, available - cost, covered=stored.through_step)
    if rest.tokens > rest.room:
        return None
    return PacketPlan(first.ordinal, cur.ordinal, first.id, cur.id, "summary", cost, cost, 0, stored.id, None,
                      stored.through_step), rest


def budget_line(p: Plan) -> str:
    """The plan's arithmetic in one line, for logs and reports."""
    b = p.budget
    return (
        f"budget {b.horizon} − {b.prefix} prefix − {b.tail} tail − {b.output_reserve} output − "
        f"{b.current_turn_reserve} current turn = {b.budget}; history {b.history} "
        f"(full {b.full}, cards {b.cards}, packet {b.packet})"
    )


def _history_codes(w: _Work, rescue: bool) -> str:
    """``w.fid`` as text. The packet's turns are ``p`` but for the few retrieved ones, so that part is
    built from runs of ``p`` instead of joining a code per packeted turn."""
    if rescue or not w.keep_from:
        return "".join(w.fid)
    runs, at = [], 0
    for i in sorted(w.retrieved):
        runs += ["p" * (i - at), "F"]
        at = i + 1
    return "".join([*runs, "p" * (w.keep_from - at), *w.fid[w.keep_from :]])


def _reset_prefix(turns: list[Turn], end: int) -> int:
    """How many leading turns (of the first ``end``) are behind a reset: behind_reset is a prefix."""
    lo, hi = 0, end
    while lo < hi:
        mid = (lo + hi) // 2
        if turns[mid].behind_reset:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _size_rows(index: TurnIndex, turns: list[Turn], sizes: Mapping[str, TurnSize] | TurnTable | None
               ) -> tuple[list[int], list[int], list[int], list[int]]:
    """Characters of ``turns`` from the mapping (or estimated): full, card, evidence lines, evidence count."""
    lookup = sizes if isinstance(sizes, Mapping) else {}
    rows = [size_values(lookup.get(t.id) or estimate_size(index, t)) for t in turns]
    return [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], [r[3] for r in rows]


def _table(sizes: Mapping[str, TurnSize] | TurnTable | None, index: TurnIndex, start: int, stop: int
           ) -> TurnTable | None:
    """The table, when it is kept in step with the index (SessionView): its ends name the same turns."""
    if not isinstance(sizes, TurnTable):
        return None
    if start >= stop or (len(sizes.ids) >= stop and sizes.ids[start] == index.turns[start].id
                         and sizes.ids[stop - 1] == index.turns[stop - 1].id):
        return sizes
    return None


def _ids(index: TurnIndex, stop: int, sizes: Mapping[str, TurnSize] | TurnTable | None) -> list[str]:
    """The ids of turns ``1..stop``. Read only: it may be the table's own column."""
    table = _table(sizes, index, 0, stop)
    if table is not None:
        return table.ids if stop == len(table.ids) else table.ids[:stop]
    return [t.id for t in index.turns[:stop]]


def _work(
    index: TurnIndex, start: int, end: int, sizes: Mapping[str, TurnSize] | TurnTable | None, tpc: float
) -> _Work:
    turns = index.turns[start:end]
    table = _table(sizes, index, start, end)
    if table is not None:  # token columns and running totals kept by the table between plans
        full, card, cheap = table.tokens(tpc, start, end)
        w = _Work(turns, full, card, cheap, [], [], {}, None, ["p"] * len(turns), set(), table)
        w.totals, w.base = table.sums(tpc), start
        return w
    full_c, card_c, ev_chars, ev_items = _size_rows(index, turns, sizes)
    full = [estimate_tokens(c, tpc) for c in full_c]
    card = [estimate_tokens(c, tpc) for c in card_c]
    cheap = list(map(min, full, card))
    w = _Work(turns, full, card, cheap, ev_chars, ev_items, {}, None, ["p"] * len(turns), set(), None)
    w.totals = (running_totals(cheap), running_totals(card), running_totals(ev_chars), running_totals(ev_items))
    return w


def _shifted(w: _Work, start: int) -> Mapping[int, float]:
    """The plan's relevance by session position: the history's, ``start`` positions on."""
    if not start:
        return w.relevance
    if isinstance(w.scored, np.ndarray) and isinstance(w.scores, np.ndarray):
        return SparseRelevance(w.scored, w.scores, start)
    return dict(zip(map(add, w.scored, repeat(start)), w.scores, strict=True))


def _position(index: TurnIndex, turn_id: str, first: int) -> int | None:
    try:
        i = index.by_id(turn_id).ordinal - first
    except InvalidInput:  # a score for a turn of another chain: nothing to rank
        return None
    return i if i >= 0 else None


def _relevance(
    index: TurnIndex, w: _Work, directive: str, reading_terms: Sequence[str],
    relevance: Mapping[str, float] | TurnScores | None,
) -> None:
    if relevance is None:
        bm: Bm25Index[str] = Bm25Index()
        for t in w.turns:
            bm.add(t.id, turn_document(t))
        relevance = bm.scores(" ".join([directive, *reading_terms]))
    # Scores are sparse (only turns that share a term score at all): walk them, not the session.
    if not w.turns:
        return
    lo, n = w.turns[0].ordinal - 1, len(w.turns)
    if isinstance(relevance, TurnScores) and isinstance(relevance.positions, np.ndarray):
        columns = normalised_columns(relevance.positions, np.asarray(relevance.raw, dtype=np.float64), lo, n)
        if columns is not None:
            w.scored, w.scores = columns
            w.relevance = SparseRelevance(*columns)
        return
    at: list[int] = []  # positions with a score above 0, ascending, and their raw scores
    raw: list[float] = []
    if isinstance(relevance, TurnScores):  # few scores, as Python lists
        at, raw = list(relevance.positions), list(map(float, relevance.raw))
        if at and not (lo == 0 and at[0] >= 0 and at[-1] < n and all(map(gt, raw, repeat(0.0)))):
            # some fall outside the planned turns (a reset, a replay) or do not score: filter them
            kept = [(p - lo, r) for p, r in zip(at, raw, strict=True) if r > 0 and lo <= p < lo + n]
            at, raw = [p for p, _ in kept], [r for _, r in kept]
    else:
        kept = []
        for tid, r in relevance.items():
            if r > 0 and (i := _position(index, tid, lo + 1)) is not None and i < n:
                kept.append((i, float(r)))
        kept.sort()
        at, raw = [p for p, _ in kept], [r for _, r in kept]
    best = max(raw, default=0.0)
    if best > 0:
        w.scored = at
        w.scores = list(map(truediv, raw, repeat(best)))
        w.relevance = dict(zip(at, w.scores, strict=True))


def _fill(index: TurnIndex, w: _Work, budget: int, tpc: float) -> tuple[PacketPlan | None, str]:
    n = len(w.turns)
    packet: PacketPlan | None = None
    keep_from = 0
    if w.total(CHEAP, 0, n) > budget:
        share = math.floor(budget * PACKET_SHARE)
        reserved, last_pos = 0, -1
        while True:  # the packet's room and its range depend on each other: grow both to a fixed point
            need = max(w.suffix_start(budget - reserved), 1, last_pos + 1)
            last_pos = min(n, math.ceil(need / PACKET_BATCH_TURNS) * PACKET_BATCH_TURNS) - 1
            stop = last_pos + 1
            room = packet_room(
                w.turns[0].ordinal, w.turns[last_pos].ordinal, share=share, budget=budget, tokens_per_char=tpc,
                card_tokens=w.total(CARD, 0, stop), item_chars=w.total(EVIDENCE_CHARS, 0, stop),
                items=w.total(EVIDENCE_ITEMS, 0, stop),
            )
            if room is None:
                return None, (
                    f"no usable horizon: a budget of {budget} tokens cannot even point at the "
                    f"{n} earlier turn(s) it leaves out"
                )
            if room.allowance <= reserved:
                break
            reserved = room.allowance
        packet = _packet(index, w, last_pos, room, reserved, tpc)
        keep_from = w.keep_from = last_pos + 1
    w.fid[keep_from:] = map(_KEPT_CODE.__getitem__, map(le, w.full[keep_from:], w.card[keep_from:]))
    left = budget - (packet.tokens if packet else 0) - w.total(CHEAP, keep_from, n)
    if left > 0:
        _promote(w, keep_from, left)
    return packet, ""


_KEPT_CODE = {True: "F", False: "c"}  # a kept turn whose full record is no larger than its card is Full


def _promote(w: _Work, keep_from: int, left: int) -> None:
    """Raise turns to Full in descending value (ties: the referred-to, then the newer) while the extra
    cost fits ``left``. Candidates: the kept cards, and packeted turns that are relevant or referred to.

    One greedy pass over the candidates in the order of ``(-value, i != anaphora, -i)``. The
    referred-to turn comes first (its value is 1.0, the most there is). The kept cards (as many as the
    budget holds) are sorted; the packeted relevant turns (up to a share of the session) are ranked as
    numpy columns and taken only while one of them could still fit: each costs its whole record, so
    once ``left`` is below the cheapest none can, and the rest of the order is the cards'."""
    n, an, fid, full, card = len(w.turns), w.anaphora, w.fid, w.full, w.card
    if an is not None and fid[an] in "cp":
        extra = full[an] - (card[an] if fid[an] == "c" else 0)
        if extra <= left:
            _raise(w, an)
            left -= extra
    # Keys are (-value, -i), value = max(recency, relevance). The packeted relevant turns are the
    # scored positions before ``keep_from``, ranked; the kept cards' scores are the ones after.
    scored, scores = w.scored, w.scores
    if isinstance(scored, np.ndarray) and isinstance(scores, np.ndarray):
        cut = int(np.searchsorted(scored, keep_from))
        rel = dict(zip(scored[cut:].tolist(), scores[cut:].tolist(), strict=True))
        ranked, cheapest = ranked_columns(full, scored[:cut], scores[:cut], n, an, left)
    else:  # few scores, as Python lists: numpy's per-call overhead would outweigh them
        cut = bisect_left(scored, keep_from)
        rel = dict(zip(scored[cut:], scores[cut:], strict=True))
        ranked, cheapest = ranked_lists(full, list(scored[:cut]), list(scores[:cut]), n, an, left)
    kept = sorted((-max(1.0 / (n - i), rel.get(i, 0.0)), -i) for i in range(keep_from, n) if fid[i] == "c" and i != an)
    k = h = 0
    while left > 0:
        if h < len(ranked) and left >= cheapest and (k == len(kept) or ranked[h] < kept[k]):
            i = -ranked[h][1]
            h += 1
        elif k < len(kept):
            i = -kept[k][1]
            k += 1
        else:
            break  # no kept card is left and no packeted turn can fit any more
        extra = full[i] - (card[i] if fid[i] == "c" else 0)
        if extra <= left:
            _raise(w, i)
            left -= extra


def _raise(w: _Work, i: int) -> None:
    if w.fid[i] == "p":
        w.retrieved.add(i)  # shown whole before the packet
    w.fid[i] = "F"


def _packet(index: TurnIndex, w: _Work, last_pos: int, room: PacketRoom, reserved: int, tpc: float) -> PacketPlan:
    first, last = w.turns[0], w.turns[last_pos]
    span = (first.ordinal, last.ordinal, first.id, last.id)
    if room.level == "pointer":
        return PacketPlan(*span, "pointer", room.pointer_tokens, reserved, 0)
    if room.level == "list":
        return PacketPlan(*span, "list", room.list_tokens, reserved, 0)
    stored = stored_packet(index, first.id, last.id)
    if stored is not None:
        cost = estimate_tokens(_stored_chars(index, stored, w.table), tpc)  # tokens_of its rendering
        if cost <= reserved:
            return PacketPlan(*span, "summary", cost, reserved, 0, stored.id)
        # A stored summary too large for this model's room: the evidence list stands in, no new call.
        return PacketPlan(*span, "list", room.list_tokens, reserved, 0)
    seed = seed_packet(index, first.id, last.ordinal)
    return PacketPlan(*span, "summary", reserved, reserved, room.summary_tokens, None, seed.id if seed else None)


def _stored_chars(index: TurnIndex, stored: Summary, table: TurnTable | None) -> int:
    """The characters of a stored packet's rendering, kept by the view's table: a stored packet and
    the evidence it names never change, and rendering it walks every evidence line it lists."""
    if table is None:
        return len(render_stored(index, stored))
    chars = table.packet_chars.get(stored.id)
    if chars is None:
        chars = table.packet_chars[stored.id] = len(render_stored(index, stored))
    return chars


def _behind(
    index: TurnIndex, start: int, sizes: Mapping[str, TurnSize] | TurnTable | None, tpc: float
) -> tuple[list[int], list[int]]:
    table = _table(sizes, index, 0, start)
    if table is not None:
        full_c, card_c = table.full_chars[:start], table.card_chars[:start]
    else:
        full_c, card_c, _, _ = _size_rows(index, index.turns[:start], sizes)
    return [estimate_tokens(f, tpc) for f in full_c], [estimate_tokens(c, tpc) for c in card_c]
