"""What a request leaves the history (``vak_context.context.planner.plan``'s budget): the inputs checked, the reset
the plan starts after, the stated items' room, the current turn's reserve, and a recorded mid-turn compaction
to reuse. Pure.

    budget = min(h, window − output_reserve) − prefix − tail − handoff − contract − current_turn_reserve

``min(h, window − output_reserve)`` is ``vak_context.context.capacity.profile.request_budget``, the one budget
(the assembler checks each request against it too). ``contract`` is the tail's ``<work_contract>`` (docs/STATE.md):
what the user stated binds before any older turn is carried, so its room is taken first, all it needs where
the request holds that beside the current turn at its most compact, else all of that
(``vak_context.context.stated.render.contract_room``); the plan carries it (``Budget.contract``) and the
projection renders the contract in it, so the request is never larger than the plan.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace

from vak_context.context.capacity.profile import CapacityProfile, request_budget
from vak_context.context.capacity.tokens import estimate_tokens
from vak_context.context.history.packets import midturn_packet, render_handoff, render_stored
from vak_context.context.history.render import EvidenceInfo
from vak_context.context.history.turns import ResetMark, Turn, TurnIndex
from vak_context.context.planner.currentturn import (
    TurnCosts,
    current_reserve,
    fit,
    minimum_tokens,
    turn_costs,
    verbatim_tokens,
)
from vak_context.context.planner.records import CurrentTurnPlan, PacketPlan, PlannerState, ResetPlan
from vak_context.context.stated.render import carried, contract_room
from vak_context.errors import InvalidInput, RequestTooLarge

# Words by which a directive refers back to what was just done ("do that again", "the second one").
_ANAPHORA = re.compile(
    r"\b(again|that|those|these|same|above|previous(?:ly)?|earlier|as before|"
    r"the (?:first|second|third|fourth|fifth|last|other|next) ones?|last (?:one|answer|result|time))\b",
    re.IGNORECASE,
)


def refers_back(directive: str) -> bool:
    return _ANAPHORA.search(directive) is not None


@dataclass(frozen=True)
class Request:
    """One request's checked inputs: the model, its tokens per char, the directive, and the current
    turn (None for a new directive) with its costs; ``end`` is one past the last history turn."""

    key: str
    tpc: float
    prefix: int
    tail: int
    directive: str
    current: int | None
    turn: Turn | None
    end: int
    costs: TurnCosts | None
    directive_tokens: int
    whole: int  # the current turn as carried
    minimum: int  # its most compact form
    refers_back: bool


@dataclass(frozen=True)
class Room:
    """The budget arithmetic: ``start`` turns are behind the reset the plan starts after. ``horizon`` is
    what the prompt and the output reserve may total, ``request_budget + out``, so the plan's ``Budget``
    keeps ``budget = horizon − prefix − tail − output_reserve − current_turn_reserve``."""

    horizon: int
    out: int
    start: int
    reset: ResetPlan | None
    available: int  # for the history and the current turn
    reserve: int  # the current turn's part of it
    budget: int  # the history's part
    rescue: str  # why this model has no usable horizon, or ""
    contract: int = 0  # the stated items' room in the tail, taken before ``available``
    contract_cap: int = 0  # the most the contract could take: what the request holds beside the current turn


def request_of(index: TurnIndex, profile: CapacityProfile, directive: str, prefix_tokens: int, tail_tokens: int,
               current: int | None, infos: Mapping[str, EvidenceInfo] | None, current_costs: TurnCosts | None
               ) -> Request:
    """The inputs checked, the current turn and the history's end found, the current turn priced."""
    prefix = _check_tokens("prefix_tokens", prefix_tokens)
    tail = _check_tokens("tail_tokens", tail_tokens)
    if not isinstance(directive, str):
        raise InvalidInput(f"the directive must be text, not {type(directive).__name__}")
    tpc = profile.tokens_per_char.value
    if not (tpc > 0 and math.isfinite(tpc)):
        raise InvalidInput(f"profile {profile.key} has tokens_per_char {tpc!r}; it must be a positive number")
    cur: Turn | None = None
    costs: TurnCosts | None = None
    if current is not None:
        cur = index.turn(current)
        if cur.behind_reset:
            raise InvalidInput(f"turn {current} is behind a reset; plan a turn after the last reset")
        if directive and directive != cur.directive.text:
            raise InvalidInput(f"the directive differs from turn {current}'s own; pass its text, or current=None")
        directive, end = cur.directive.text, current - 1
        kept = current_costs is not None and current_costs.ordinal == cur.ordinal \
            and len(current_costs.verbatim) == len(cur.steps)
        costs = current_costs if kept and current_costs is not None else turn_costs(index, cur, infos)
    else:
        if not directive.strip():
            raise InvalidInput("the directive is empty: pass the user's text, or current=N for a turn in the index")
        end = len(index.turns)
    directive_tokens = estimate_tokens(len(directive), tpc)
    whole = verbatim_tokens(costs, tpc) if costs is not None else directive_tokens
    minimum = minimum_tokens(costs, tpc) if costs is not None else directive_tokens
    return Request(str(profile.key), tpc, prefix, tail, directive, current, cur, end, costs, directive_tokens, whole,
                   minimum, refers_back(directive))


def _check_tokens(name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidInput(f"{name} must be a whole number of tokens >= 0, not {value!r}; measure it first")
    return value


def room_of(index: TurnIndex, profile: CapacityProfile, req: Request, state: PlannerState,
            grown: int | None = None) -> Room:
    """The horizon (the window, for a rescue), the reset's handoff, and the reserve for the current
    turn; ``RequestTooLarge`` when even its most compact form does not fit. ``grown``: plan as a later
    step of the turn will, once the turn so far has grown to this many tokens (its reserve doubles as it
    does for a turn that outgrew its first plan)."""
    out = profile.output_reserve
    rescue = ""
    if profile.instruction_horizon.tokens <= 0 or request_budget(profile) <= 0:
        rescue = f"no usable horizon: {req.key} followed the instruction at no probed size"
    prompt = request_budget(profile, rescue=bool(rescue))  # a rescue: the current turn alone, against the window
    horizon = prompt + out  # what the prompt and the output reserve may total
    start, mark = reset_start(index, req.end, req.key)
    reset = None
    if mark is not None and mark.turns:
        reset = ResetPlan(mark.id, mark.turns, estimate_tokens(len(render_handoff(mark.turns, mark.handoff)), req.tpc))
    available = prompt - req.prefix - req.tail - (reset.tokens if reset else 0)
    if req.minimum > available:
        raise RequestTooLarge(_too_large(req, horizon, out, reset), needed=req.minimum, available=available)
    # The stated items first: the current turn at its most compact always fits beside them.
    cap = available - req.minimum
    contract = contract_room(index.stated.current(req.current), cap, req.tpc)
    available -= contract
    whole = req.whole if grown is None else max(req.whole, grown)
    reserve = current_reserve(state.current_turn_reserve, req.directive_tokens, whole, req.minimum, available)
    return Room(horizon, out, start, reset, available, reserve, available - reserve, rescue, contract, cap)


def contract_need(index: TurnIndex, req: Request, room: Room, whole: Collection[int]) -> int:
    """The contract's room once the plan carries the turns ``whole`` (ordinals) whole: what the items said in
    none of them need (``contract_room`` over ``carried``), within the same cap. Never more than
    ``room.contract``, which reserved every item in force."""
    if room.contract <= 0:
        return 0
    return contract_room(carried(index.stated.current(req.current), whole), room.contract_cap, req.tpc)


def widened(room: Room, need: int) -> Room:
    """``room`` with the contract's room cut to ``need`` and what that frees given to the history's budget
    (one source per fact: an item whose turn is carried whole is not repeated, nor charged twice). The
    current turn's reserve is unchanged; ``budget = horizon − prefix − tail − output − reserve`` still holds."""
    spare = room.contract - need
    return replace(room, contract=need, available=room.available + spare, budget=room.budget + spare)


def reset_start(index: TurnIndex, end: int, key: str) -> tuple[int, ResetMark | None]:
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


def _too_large(req: Request, horizon: int, out: int, reset: ResetPlan | None) -> str:
    handoff = f", the reset's handoff ({reset.tokens})" if reset else ""
    smallest = (
        "its directive, the evidence ids of every earlier step and the last step's results as digests"
        if req.costs is not None and req.costs.verbatim else "its directive"
    )
    return (
        f"the request for {req.key} cannot fit: its {horizon}-token horizon holds the prefix ({req.prefix}), "
        f"tail ({req.tail}), output reserve ({out}){handoff}, and the current turn needs {req.minimum} tokens even "
        f"at its most compact ({smallest}). Nothing was sent. Bind a model with a larger horizon, shorten the "
        "system prompt, tools or tail, or end this turn and carry on in a new one."
    )


def midturn_reuse(index: TurnIndex, turns: Sequence[Turn], cur: Turn, costs: TurnCosts, tpc: float, available: int
                  ) -> tuple[PacketPlan, CurrentTurnPlan] | None:
    """The recorded mid-turn compaction over every planned turn and the current turn's first steps, and
    the rest of the turn beside it, when both fit ``available`` (like a stored packet: reused when the
    turn must compact anyway)."""
    first = turns[0] if turns else cur  # a compaction inside the first planned turn covers its steps only
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
