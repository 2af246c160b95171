"""The session as the planner sees it (spec §4): ``SessionView``, a session's TurnIndex kept entry by
entry, with what planning needs beside it: each evidence body's digest (from the entry's blob), each closed
turn's measured size (``vak_context.context.planner.sizes.measure_turn``, cached: a closed record never
changes), a BM25 index over the cards, and the last planner state of each model (read back from recorded
``plan`` entries, so a restarted actor resumes where it was). Pure: entries in, state out.

Also the handoff text a rescue's reset-with-handoff carries (``handoff_text``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from vak_context.context.capacity.profile import CapacityProfile
from vak_context.context.capacity.tokens import PRIOR_TOKENS_PER_CHAR, estimate_tokens
from vak_context.context.history.packets import render_handoff
from vak_context.context.history.render import EvidenceInfo, evidence_info, turn_focus
from vak_context.context.history.turns import WITHDRAWN, Turn, TurnIndex
from vak_context.context.planner.currentturn import TurnCosts, turn_costs
from vak_context.context.planner.plan import PacketPlan, Plan, PlanCache, PlannerState, placement, plan
from vak_context.context.planner.records import Fidelity, plan_rate
from vak_context.context.planner.relevance import PositionBm25, TurnScores
from vak_context.context.planner.sizes import (
    TurnSize,
    TurnTable,
    measure_turn,
    turn_document,
)
from vak_context.errors import InvalidInput
from vak_context.events.envelope import Mapper, StoredEntry
from vak_context.events.payloads import Activity, EvidenceBody, PlanRecord, TurnCard

_UNMEASURED = TurnSize(0, 0, 0, 0)  # the open turn's row while a plan has it as its current turn (``sizes``)
RECENT_PLANS = 8  # the recorded plans whose current turns say how far the next turn's steps may grow


class SessionView:
    def __init__(self, tokens_per_char: float = PRIOR_TOKENS_PER_CHAR, *, mapper: Mapper | None = None) -> None:
        self.mapper = mapper or Mapper()
        self.index = TurnIndex(tokens_per_char, mapper=self.mapper)
        self.infos: dict[str, EvidenceInfo] = {}
        self.bm25 = PositionBm25()  # by turn position (ordinal − 1)
        self.states: dict[str, PlannerState] = {}  # model -> the state its last recorded plan returned
        self.plans: dict[str, str] = {}  # model -> id of its last recorded plan
        # model -> the current turn's tokens in its last RECENT_PLANS recorded plans (a step that outgrew
        # its turn's first plan records how far the turn had grown): how far the next turn may grow
        self.grown: dict[str, list[int]] = {}
        self.preamble: dict[str, Any] = {}  # payloads before the first directive (a recorded system prompt)
        # Closed turns are measured and indexed once; a turn is queued again when it closes or gets its card.
        self.table = TurnTable()  # every turn's measured size, in turn order
        self._unsized: dict[str, Turn] = {}
        self._unindexed: dict[str, Turn] = {}
        self._costs: tuple[tuple[int, str | None], TurnCosts] | None = None
        self.plan_cache = PlanCache()  # what the planner keeps between this session's plans

    @classmethod
    def build(cls, entries: Iterable[StoredEntry], tokens_per_char: float = PRIOR_TOKENS_PER_CHAR) -> SessionView:
        view = cls(tokens_per_char)
        view.add_all(entries)
        return view

    def add_all(self, entries: Iterable[StoredEntry]) -> None:
        for entry in entries:
            self.add(entry)

    def add(self, entry: StoredEntry, payload: Any = None) -> None:
        """Fold in one entry. ``payload``: the entry's payload when the caller holds it already (the model
        it was appended from), which saves decoding it again (a plan entry at 1,000 turns is ~275 KB)."""
        if payload is None:
            payload = self.mapper.payload_of(entry)
        before = len(self.index.turns)
        self.index.add((entry, payload))
        if not self.index.turns:
            self.preamble[entry.id] = payload
        elif len(self.index.turns) > before:  # a directive: the previous turn is closed, the new one open
            if before:
                self._changed(self.index.turns[before - 1])
            self._unindexed[self.index.turns[-1].id] = self.index.turns[-1]
        if isinstance(payload, EvidenceBody) and entry.blob is not None:
            turn = self.index.current
            calls = {ex.tool_use_id: ex.input for ex in turn.exchanges} if turn else {}
            self.infos[entry.id] = evidence_info(entry.id, payload, entry.blob, calls.get(payload.tool_use_id),
                                                 focus=turn_focus(turn))
        elif isinstance(payload, TurnCard):
            try:
                self._changed(self.index.by_id(payload.turn_id))
            except InvalidInput:
                pass  # a card for a turn not in this chain: the index names it among its problems
        elif isinstance(payload, PlanRecord):
            self.states[payload.model] = PlannerState.from_json(payload.plan.get("state"))
            self.plans[payload.model] = entry.id
            current = (payload.plan.get("budget") or {}).get("current")
            if isinstance(current, int):
                self.grown[payload.model] = [*self.grown.get(payload.model, [])[1 - RECENT_PLANS:], current]
        elif isinstance(payload, Activity) and payload.activity == WITHDRAWN:
            for turn in self.index.withdrawn_turns(payload):  # a closed turn that changed: measured again
                self._changed(turn)

    def _changed(self, turn: Turn) -> None:
        self._unsized[turn.id] = turn
        self._unindexed[turn.id] = turn

    def turn_infos(self, turn: Turn) -> dict[str, EvidenceInfo]:
        return {eid: self.infos[eid] for eid in turn.evidence if eid in self.infos}

    def sizes(self, current: int | None = None) -> TurnTable:
        """Exact sizes of every turn (``vak_context.context.planner.plan.measure_turn``), as columns in turn order: a
        closed turn is measured once (again only if its card arrives later), the open one every time, unless it
        is the plan's ``current`` turn: a plan reads the rows before its current turn only (the history; the
        current turn is priced from its records, ``current_costs``), so its row holds its id and no size yet."""
        for turn in self._unsized.values():
            self.table.set(turn.ordinal - 1, turn.id, measure_turn(self.index, turn, self.turn_infos(turn)))
        self._unsized.clear()
        last = self.index.current
        if last is not None and not last.closed:
            size = _UNMEASURED if last.ordinal == current else measure_turn(self.index, last, self.turn_infos(last))
            self.table.set(last.ordinal - 1, last.id, size)
        return self.table

    def size(self, turn: Turn) -> TurnSize:
        t = self.sizes()
        i = turn.ordinal - 1
        return TurnSize(t.full_chars[i], t.card_chars[i], t.evidence_chars[i], t.evidence_items[i])

    def relevance(self, query: str) -> dict[str, float]:
        """BM25 scores of every turn's card (or directive, before it has one) for ``query``, by turn id."""
        return {self.index.turns[p].id: score for p, score in self.scores(query).by_position.items()}

    def scores(self, query: str) -> TurnScores:
        """``relevance`` by turn position, as the planner takes it (it then looks no turn up)."""
        for turn in self._unindexed.values():
            self.bm25.add(turn.ordinal - 1, turn_document(turn))
        self._unindexed.clear()
        return TurnScores(*self.bm25.columns(query))

    def plan(
        self,
        profile: CapacityProfile,
        directive: str,
        *,
        prefix_tokens: int,
        tail_tokens: int,
        state: PlannerState | None = None,
        reading_terms: Sequence[str] = (),
        current: int | None = None,
        grown: int | None = None,
    ) -> Plan:
        """``vak_context.context.planner.plan.plan`` with exact sizes, BM25 relevance and this model's last state."""
        text = self.index.turn(current).directive.text if current is not None else directive
        return plan(
            self.index,
            profile,
            directive,
            prefix_tokens=prefix_tokens,
            tail_tokens=tail_tokens,
            state=state if state is not None else self.states.get(str(profile.key)),
            sizes=self.sizes(current),
            relevance=self.scores(" ".join([text, *reading_terms])),
            reading_terms=reading_terms,
            current=current,
            infos=self.turn_infos(self.index.turn(current)) if current is not None else None,
            current_costs=self.current_costs(current) if current is not None else None,
            cache=self.plan_cache,
            grown=grown,
        )

    def placement(self, profile: CapacityProfile, directive: str, *, prefix_tokens: int, tail_tokens: int,
                  grown: int | None = None) -> tuple[PacketPlan | None, bool, int]:
        """(the packet, whether a rescue, the current turn's tokens) of ``plan`` for a new directive, without the plan's record
        (``vak_context.context.planner.plan.placement``): a turn's close plans ahead twice a turn and reads
        only this, unless a summary is due."""
        return placement(
            self.index, profile, directive, prefix_tokens=prefix_tokens, tail_tokens=tail_tokens,
            state=self.states.get(str(profile.key)), sizes=self.sizes(), relevance=lambda: self.scores(directive),
            grown=grown, cache=self.plan_cache,
        )

    def current_costs(self, ordinal: int) -> TurnCosts:
        """``vak_context.context.planner.currentturn.turn_costs`` of a turn, kept until the chain grows (every profile's
        plan of one request shares it)."""
        key = (ordinal, self.index.head)
        if self._costs is None or self._costs[0] != key:
            turn = self.index.turn(ordinal)
            self._costs = (key, turn_costs(self.index, turn, self.turn_infos(turn)))
        return self._costs[1]



def handoff_text(p: Plan, tokens_per_char: float | None = None) -> str:
    """The handoff a rescue's reset carries: the richest of its forms whose ``<context_reset>`` rendering fits
    the room the rescued request had beside its current turn (``handoff_room``), so a rescue never makes a
    request larger than the one it replaces; the shortest form, naming the turns and the recall that returns
    them, when none fits. ``tokens_per_char``: the bound model's (default: the rate the plan was made at)."""
    omitted = [t.ordinal for t in p.turns if t.fidelity == Fidelity.BEHIND_RESET]
    span = f"turns {omitted[0]}–{omitted[-1]}" if omitted else "no turns"
    forms = (
        f"Context reset for {p.model}: {p.rescue_reason}. The session's {span} are behind this point and are "
        'not planned again; recall({"turn": N}) still returns any of them in full.',
        f'The session\'s {span} are behind a context reset; recall({{"turn": N}}) returns any of them in full.',
        f'recall({{"turn": N}}) returns {span}.',
    )
    tpc = tokens_per_char if tokens_per_char is not None else plan_rate(p)
    room = handoff_room(p)
    turns = omitted[-1] if omitted else 0
    for form in forms:
        if estimate_tokens(len(render_handoff(turns, form)), tpc) <= room:
            return form
    return forms[-1]


def handoff_room(p: Plan) -> int:
    """What a rescued request leaves beside its prefix, tail, output reserve and current turn: the most its
    reset's handoff may add (the rescue plan itself carries no history)."""
    b = p.budget
    return max(0, b.budget + b.current_turn_reserve - b.current)
