"""The planner (spec §4's WorkingSetPlanner): ``plan()`` picks the past turns a request carries, at what fidelity.

Pure. What it returns (``Plan`` and its parts) are records, defined in ``vak_context.context.planner.records``.

``plan(index, profile, directive, prefix_tokens=, tail_tokens=, state=)`` reads no clock and does no
I/O: the TurnIndex, the bound model's CapacityProfile, the directive, the measured prefix and tail
sizes and the planner's own state go in; a ``Plan`` comes out, carrying the next state (like an
autoscaling policy that returns its decision and its new state).

Budget::

    budget = min(horizon, window − output_reserve) − prefix − tail − handoff − contract − current_turn_reserve

a prompt may be as large as the instruction horizon, and with the output reserve beside it must fit
the verified (or declared) window (``vak_context.context.capacity.profile.request_budget``); ``handoff`` is
the reset this model's plan starts after; ``contract`` the room of the stated items' ``<work_contract>``
(``vak_context.context.planner.room``), taken before the history and the current turn's reserve and carried
as ``Budget.contract`` (``Budget.tail`` includes it). ``current_turn_reserve`` is what the history leaves for
the current turn (``vak_context.context.planner.currentturn.current_reserve``): an EWMA (α 0.3) of the sizes past turns
had while current, held to half of what is left, doubled while the current turn is larger, up to
three quarters. The current turn gets what the history's plan leaves, and compacts itself in whole
steps when it outgrows that (``vak_context.context.planner.currentturn``); when even its most compact form does not fit,
``plan`` raises ``RequestTooLarge``: a request over the budget is never sent.

Value of a closed turn: ``max(recency, relevance, anaphora)``; recency = 1 / (1 + age in closed
turns), relevance = BM25 score of the directive and reading terms over the turn's card, divided by
the best score, anaphora = 1.0 for the preceding turn when the directive refers back.

Fill (a turn is never split; every cost is turn-whole): coverage, then Full by value
(``vak_context.context.planner.fill``).

So Full is chosen by value while it fits, where "fits" means the turns not yet placed can still be
carried as cards (spec §10: a 31-turn session on a small model keeps about 2 turns Full and the
rest as cards). Reset-with-handoff is the one boundary: turns behind it are listed ``behind_reset``
and never planned; a reset that names its model applies to that model's plans only, and the plan
carries it (``Plan.reset``) so the projection renders its handoff. A profile with no usable horizon
(no rung passed, or the history cannot even be pointed at) gets a plan with ``rescue`` set: the
caller writes the reset-with-handoff for this model.

``plan`` is a composition of named steps, each a pure function of what the ones before it decided
(``request_of``, ``_apply_observations``, ``room_of``, ``_apply_history``, ``_apply_fill``,
``_apply_current_turn``, ``_apply_record``). It takes the caller's size table and scores as they are,
changes neither and keeps no reference to either; what is worth keeping between plans is the
caller's: the table's own memoised columns, and a ``PlanCache``.
"""


from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from itertools import compress, repeat
from operator import eq

from vak_context.context.capacity.profile import CapacityProfile, to_record
from vak_context.context.capacity.tokens import estimate_tokens
from vak_context.context.history.render import EvidenceInfo
from vak_context.context.history.turns import TurnIndex
from vak_context.context.planner.currentturn import TurnCosts, fit
from vak_context.context.planner.fill import PlanCache, fill, history_codes
from vak_context.context.planner.history import (
    HistoryColumns,
    apply_relevance,
    behind_tokens,
    card_scores,
    history_columns,
    in_step,
    relevance_digest,
    scores_by_id,
    shifted_relevance,
    sizes_digest_of,
    turn_ids,
)
from vak_context.context.planner.records import (
    BEHIND,
    CARD,
    CURRENT,
    FULL,
    PACKET,
    Budget,
    CurrentTurnPlan,
    Fidelity,
    PacketPlan,
    Plan,
    PlannedTurn,
    PlannerState,
    Rows,
    canonical_digest,
    flat_record,
    plan_digest,
)
from vak_context.context.planner.relevance import TurnScores
from vak_context.context.planner.room import (
    Request,
    Room,
    contract_need,
    midturn_reuse,
    refers_back,
    request_of,
    room_of,
    widened,
)
from vak_context.context.planner.sizes import TurnTable

__all__ = [
    "Budget", "Fidelity", "PacketPlan", "Plan", "PlanCache", "PlannedTurn", "PlannerState", "Rows",
    "fidelity_counts", "plan", "refers_back", "scores_by_id",
]

def plan(
    index: TurnIndex,
    profile: CapacityProfile,
    directive: str,
    *,
    prefix_tokens: int,
    tail_tokens: int,
    state: PlannerState | None = None,
    sizes: TurnTable | None = None,
    relevance: TurnScores | None = None,
    reading_terms: Sequence[str] = (),
    current: int | None = None,
    infos: Mapping[str, EvidenceInfo] | None = None,
    current_costs: TurnCosts | None = None,
    cache: PlanCache | None = None,
    grown: int | None = None,
) -> Plan:
    """Plan one request. ``current`` is the ordinal of the current turn when its directive is already
    in the index (turns after it are ignored: a replay as of that turn); None means ``directive`` is
    new. ``sizes`` is the caller's ``TurnTable`` of each turn's ``measure_turn`` result (None, or a
    table not in step with the index: sizes are estimated from the cards); ``relevance`` the raw BM25
    scores by turn position (None: computed here over the cards; ``scores_by_id`` converts scores by
    turn id). Neither is changed: the plan keeps no reference to them, and the token columns, running
    totals and sizes digest it reads are ones the table derives from its rows and memoises itself (the
    caller's cache, like ``cache``). ``infos`` digests the current turn's evidence (without them its
    steps go from as carried to the step packet); ``current_costs`` is
    ``vak_context.context.planner.currentturn.turn_costs`` of the current turn, when the caller keeps it; ``cache`` is the
    caller's ``PlanCache`` (None: nothing is kept; the plan is the same). ``grown``: plan as a later step
    of the turn will, once the turn so far has grown to this many tokens (``room_of``): a turn's close
    plans the next turn so, to summarise the packet such a step will carry ahead of it.

    Raises ``RequestTooLarge`` when even the current turn's most compact form does not fit."""
    state_in = state or PlannerState()
    req, room, w, placed, new_state = _place(index, profile, directive, prefix_tokens, tail_tokens, state_in, sizes,
                                             relevance, reading_terms, current, infos, current_costs, cache, grown)
    packet, rescue, turn_plan = placed
    return _apply_record(index, profile, req, room, w, sizes, packet, rescue, turn_plan,
                         (state_in, new_state), reading_terms, grown)


def placement(
    index: TurnIndex,
    profile: CapacityProfile,
    directive: str,
    *,
    prefix_tokens: int,
    tail_tokens: int,
    state: PlannerState | None = None,
    sizes: TurnTable | None = None,
    relevance: TurnScores | Callable[[], TurnScores] | None = None,
    grown: int | None = None,
    cache: PlanCache | None = None,
) -> tuple[PacketPlan | None, bool, int]:
    """(the packet, whether it is a rescue, the current turn's tokens: ``Plan.budget.current``) of ``plan``
    with the same arguments, without the plan's record (its rows, inputs and digests): what a turn's close
    reads of the plans it makes ahead (``vak_context.context.planner.policy.needs_summary_ahead``), which are
    never recorded or sent. The packet is placed before the Full promotion, which moves no turn in or out of
    it, so the promotion (and the relevance it ranks by: ``relevance`` may be a callable, called only then)
    runs only where the stated items' contract reads which turns it carries whole."""
    req, _, _, (packet, rescue, turn_plan), _ = _place(
        index, profile, directive, prefix_tokens, tail_tokens, state or PlannerState(), sizes, relevance, (), None,
        None, None, cache, grown, placing=True)
    return packet, bool(rescue), turn_plan.tokens if turn_plan is not None else req.directive_tokens


def _place(index: TurnIndex, profile: CapacityProfile, directive: str, prefix_tokens: int, tail_tokens: int,
           state_in: PlannerState, sizes: TurnTable | None, relevance: TurnScores | Callable[[], TurnScores] | None,
           reading_terms: Sequence[str], current: int | None, infos: Mapping[str, EvidenceInfo] | None,
           current_costs: TurnCosts | None, cache: PlanCache | None, grown: int | None, placing: bool = False,
           ) -> tuple[Request, Room, HistoryColumns, _Placed, PlannerState]:
    """Every step of ``plan`` before its record: the request, the room, the history columns, the placement
    (packet, rescue reason, current turn) and the state after the closed turns' observations. ``placing``:
    only the packet, the rescue and the current turn are read (``placement``), so the Full promotion is left
    out where nothing reads it (no contract; a new directive has no current turn to fit beside it)."""
    req = request_of(index, profile, directive, prefix_tokens, tail_tokens, current, infos, current_costs)
    new_state = _apply_observations(index, state_in, req)
    room = room_of(index, profile, req, new_state, grown)
    promote = not placing or room.contract > 0 or req.costs is not None
    if callable(relevance):
        relevance = relevance() if promote else None
    w = _apply_history(index, req, room, sizes, relevance, reading_terms, promote)
    cache = cache or PlanCache()
    packet, rescue = _apply_fill(index, w, req, room, cache, promote)
    packet, turn_plan = _apply_current_turn(index, w, req, room, packet, rescue)
    room, packet, rescue, turn_plan = _apply_contract(index, w, req, room, cache, (packet, rescue, turn_plan))
    return req, room, w, (packet, rescue, turn_plan), new_state


def _apply_observations(index: TurnIndex, state: PlannerState, req: Request) -> PlannerState:
    """Fold every closed turn not yet seen into the EWMA of the sizes turns had while current."""
    for t in index.turns[state.observed_through : req.end]:  # ordinal k sits at position k − 1
        seen = t.tokens if t.tokens_source == "receipt" else estimate_tokens(t.chars, req.tpc)
        state = state.observe(seen, t.ordinal)
    return state


def _apply_history(index: TurnIndex, req: Request, room: Room, sizes: TurnTable | None,
                   relevance: TurnScores | None, reading_terms: Sequence[str], scored: bool = True) -> HistoryColumns:
    """The planned turns as columns, with their relevance and the referred-to turn (``scored`` False: without
    them, for a placement that does not promote)."""
    w = history_columns(index, room.start, req.end, sizes, req.tpc)
    if not scored:
        return w
    if relevance is None:
        relevance = card_scores(index, w.turns, " ".join([req.directive, *reading_terms]))
    apply_relevance(w, relevance)
    if req.refers_back and w.turns:
        w.anaphora = len(w.turns) - 1
    return w


def _apply_fill(index: TurnIndex, w: HistoryColumns, req: Request, room: Room, cache: PlanCache,
                promote: bool = True) -> tuple[PacketPlan | None, str]:
    """Place the history in the budget: (the packet, the rescue reason). A rescue carries no history.
    ``promote`` False: the packet and the kept cards only, no turn raised to Full."""
    packet: PacketPlan | None = None
    rescue = room.rescue
    if not rescue and w.turns:
        packet, rescue = fill(index, w, max(room.budget, 0), req.tpc, cache, promote)
    if rescue:
        packet = None
        _carry_none(w, BEHIND)
    return packet, rescue


def _carry_none(w: HistoryColumns, code: str) -> None:
    """Every planned turn at ``code`` (behind a reset, or in a packet): the request carries none of them."""
    w.fid = [code] * len(w.turns)
    w.retrieved = set()
    w.keep_from = len(w.turns)


def _apply_current_turn(index: TurnIndex, w: HistoryColumns, req: Request, room: Room,
                        packet: PacketPlan | None, rescue: str) -> tuple[PacketPlan | None, CurrentTurnPlan | None]:
    """Fit the current turn in what the history leaves; reuse a recorded mid-turn compaction when the
    turn must compact anyway and it fits (it then covers the whole history)."""
    if req.costs is None or req.turn is None:
        return packet, None
    turn_plan = fit(req.costs, req.tpc, room.available - _history_tokens(w, packet))
    if turn_plan.compacted and not rescue:
        reuse = midturn_reuse(index, w.turns, req.turn, req.costs, req.tpc, room.available)
        if reuse is not None:
            _carry_none(w, PACKET)
            return reuse
    return packet, turn_plan


_Placed = tuple[PacketPlan | None, str, CurrentTurnPlan | None]


def _apply_contract(index: TurnIndex, w: HistoryColumns, req: Request, room: Room, cache: PlanCache,
                    placed: _Placed) -> tuple[Room, PacketPlan | None, str, CurrentTurnPlan | None]:
    """One source per fact, charged once: the room reserved for the stated items said in turns the fill
    carried whole goes to the history, and the history is placed again in the wider budget. Kept when the
    turns whose items it then leaves out of the contract still fit the contract's cut room (a wider budget
    keeps more whole, but the fill is greedy by value, so it is checked); else the first placement stands."""
    packet, rescue, turn_plan = placed
    if rescue or room.contract <= 0:
        return room, packet, rescue, turn_plan
    need = contract_need(index, req, room, _whole(w))
    if need >= room.contract:
        return room, packet, rescue, turn_plan
    first = (w.fid, w.retrieved, w.keep_from)
    w.fid, w.retrieved, w.keep_from = [PACKET] * len(w.turns), set(), 0
    wider = widened(room, need)
    packet2, rescue2 = _apply_fill(index, w, req, wider, cache)
    packet2, turn_plan2 = _apply_current_turn(index, w, req, wider, packet2, rescue2)
    if not rescue2 and contract_need(index, req, room, _whole(w)) <= need:
        return wider, packet2, rescue2, turn_plan2
    w.fid, w.retrieved, w.keep_from = first
    return room, packet, rescue, turn_plan


def _whole(w: HistoryColumns) -> set[int]:
    """The ordinals of the turns the placement carries whole (Full, retrieved ones included)."""
    shown = (*w.retrieved, *range(w.keep_from, len(w.turns)))
    return {w.turns[i].ordinal for i in shown if w.fid[i] == FULL}


def _spent(w: HistoryColumns) -> tuple[int, int]:
    """Tokens of the history the request shows: (Full, cards): the retrieved turns and the kept ones after the
    packet, the kept ones summed by their codes in C (``compress``), not a Python step per turn."""
    fid, full, card, k, n = w.fid, w.full, w.card, w.keep_from, len(w.turns)
    kept = fid[k:n]
    retrieved = sum(full[i] for i in w.retrieved if fid[i] == FULL)
    return (retrieved + sum(compress(full[k:n], map(eq, kept, repeat(FULL)))),
            sum(compress(card[k:n], map(eq, kept, repeat(CARD)))))


def _history_tokens(w: HistoryColumns, packet: PacketPlan | None) -> int:
    return (packet.tokens if packet else 0) + sum(_spent(w))


def _apply_record(index: TurnIndex, profile: CapacityProfile, req: Request, room: Room, w: HistoryColumns,
                  sizes: TurnTable | None, packet: PacketPlan | None, rescue: str,
                  turn_plan: CurrentTurnPlan | None, states: tuple[PlannerState, PlannerState],
                  reading_terms: Sequence[str], grown: int | None = None) -> Plan:
    """The plan as a frozen record: its rows, its budget, the inputs it was made from and its digests."""
    current_tokens = turn_plan.tokens if turn_plan is not None else req.directive_tokens
    full_spent, card_spent = _spent(w)
    rows = _rows(index, req, room, w, sizes, bool(rescue), current_tokens)
    spent = Budget(
        room.horizon, req.prefix, req.tail + room.contract, room.out, room.reserve, room.budget, current_tokens,
        packet=packet.tokens if packet else 0, cards=card_spent, full=full_spent, contract=room.contract,
    )
    inputs = {
        "model": req.key,
        "profile": to_record(profile).model_dump(mode="json"),
        "directive": req.directive,
        "current": req.current,
        "prefix_tokens": req.prefix,
        "tail_tokens": req.tail,
        "reading_terms": list(reading_terms),
        "state": flat_record(states[0]),
        "head": index.head,
        "turns": len(index.turns),
        "sizes": sizes_digest_of(index, sizes, rows.ids, req.end),
        "relevance": relevance_digest(w.scored, w.scores, room.start),
    }
    if grown is not None:  # only a plan made ahead at a turn's close says so (a request's plan never is)
        inputs["grown"] = grown
    result = Plan(
        model=req.key, directive=req.directive, current_ordinal=req.current, rows=rows, packet=packet,
        budget=spent, state=states[1], refers_back=req.refers_back, rescue=bool(rescue), rescue_reason=rescue,
        inputs_digest=canonical_digest(inputs), inputs=inputs, current_turn=turn_plan, reset=room.reset,
    )
    return replace(result, digest=plan_digest(result))


def _rows(index: TurnIndex, req: Request, room: Room, w: HistoryColumns, sizes: TurnTable | None,
          rescue: bool, current_tokens: int) -> Rows:
    """The plan's own columns: lent by the caller's table when it is in step (it copies a column before
    changing one of their rows, ``TurnTable.lend``), else copies: a plan copies none of a session's columns."""
    start, end = room.start, req.end
    codes = BEHIND * start + history_codes(w, rescue) + (CURRENT if req.current is not None else "")
    # the table lends what it is in step for (as ``turn_ids``, ``behind_tokens`` and ``w`` read it), else copies
    table = in_step(sizes, index, 0, len(codes)) if w.table is not None and in_step(sizes, index, 0, start) else None
    ids: Sequence[str]
    full: Sequence[int]
    card: Sequence[int]
    chars: tuple[Sequence[int], Sequence[int]] | tuple[None, None] = (None, None)
    if table is not None:
        ids, full, card, *lent = table.lent_rows(req.tpc, len(codes), end)
        chars = (lent[0], lent[1])
    else:
        behind_full, behind_card = behind_tokens(index, start, sizes, req.tpc)
        ids = tuple(turn_ids(index, len(codes), sizes))
        full, card = (*behind_full, *w.full[: len(w.turns)]), (*behind_card, *w.card[: len(w.turns)])
    return Rows(
        ids, codes, full, card, start, end,
        shifted_relevance(w, start),
        start + w.anaphora if w.anaphora is not None else None,
        frozenset(start + i for i in w.retrieved), current_tokens,
        full_chars=chars[0], card_chars=chars[1], rate=req.tpc if table is not None else None,
    )


def fidelity_counts(p: Plan) -> dict[str, int]:
    """How many turns the plan carries at each fidelity, keyed by ``Fidelity`` value (a report's counts)."""
    counts = {f.value: 0 for f in (Fidelity.FULL, Fidelity.CARD, Fidelity.PACKET, Fidelity.BEHIND_RESET)}
    codes = p.rows.codes  # counted from the codes: building every PlannedTurn costs ~1 ms a step at 1,000 turns
    behind = p.rows.history_start  # turns before the first planned one are behind a reset, whatever their code
    for code in set(codes):  # keyed by the plain value (the public Step's fidelity is a str-keyed mapping)
        n = codes.count(code, behind) if code != Fidelity.BEHIND_RESET.code else 0
        if n:
            key = str(Fidelity.of_code(code).value)
            counts[key] = counts.get(key, 0) + n
    if behind or Fidelity.BEHIND_RESET.code in codes:
        counts[str(Fidelity.BEHIND_RESET.value)] += behind + codes.count(Fidelity.BEHIND_RESET.code, behind)
    return counts
