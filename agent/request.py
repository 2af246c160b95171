"""The session as the planner sees it, preparing a request, and the over-length recovery (spec §4, §6).

* ``SessionView``: a session's TurnIndex kept entry by entry, with what planning needs beside it:
  each evidence body's digest (from the entry's blob), each closed turn's measured size
  (``vak_context.context.planner.plan.measure_turn``, cached: a closed record never changes), a BM25 index over the
  cards, and the last planner state of each model (read back from recorded ``plan`` entries, so a
  restarted actor resumes where it was). Pure: entries in, state out.
* The projection itself (``project``: stable prefix, handoff, retrieved turns, packet, working set,
  current turn with the tail before the directive's words) is pure and lives in ``vak_context.context.request.assemble``.
* ``prepare``: plan, write what the plan needs first (the packet's summary through
  ``vak_context.agent.summarise``, or this model's reset-with-handoff of a rescue), plan again, project. A
  current turn that cannot fit even at its most compact raises ``RequestTooLarge``: nothing is sent.
* ``complete_planned``: send; a ``ContextOverflow`` is a profile contradiction: ``verified_window``
  becomes the rejected size, the request is planned again and sent once more.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from vak_context.context.capacity.profile import CapacityProfile, Ewma, request_chars
from vak_context.context.capacity.tokens import PRIOR_TOKENS_PER_CHAR, estimate_tokens
from vak_context.context.history.render import EvidenceInfo, evidence_info
from vak_context.context.history.turns import Turn, TurnIndex
from vak_context.context.planner.currentturn import TurnCosts, turn_costs
from vak_context.context.planner.plan import Plan, PlanCache, PlannerState, plan
from vak_context.context.planner.records import Fidelity
from vak_context.context.planner.relevance import PositionBm25, TurnScores
from vak_context.context.planner.sizes import (
    TurnSize,
    TurnTable,
    measure_turn,
    turn_document,
)
from vak_context.context.request.assemble import prefix_tokens, project, text_tokens
from vak_context.context.request.messages import (
    ChatRequest,
    ChatResult,
    ToolSpec,
)
from vak_context.errors import ContextOverflow, InvalidInput, RequestTooLarge
from vak_context.events.envelope import Mapper, StoredEntry
from vak_context.events.payloads import EvidenceBody, PlanRecord, ResetWithHandoff, TurnCard
from vak_context.storage.contract import Ledger

# ------------------------------------------------------------------ the session as the planner sees it


class SessionView:
    def __init__(self, tokens_per_char: float = PRIOR_TOKENS_PER_CHAR, *, mapper: Mapper | None = None) -> None:
        self.mapper = mapper or Mapper()
        self.index = TurnIndex(tokens_per_char, mapper=self.mapper)
        self.infos: dict[str, EvidenceInfo] = {}
        self.bm25 = PositionBm25()  # by turn position (ordinal − 1)
        self.states: dict[str, PlannerState] = {}  # model -> the state its last recorded plan returned
        self.plans: dict[str, str] = {}  # model -> id of its last recorded plan
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

    def add(self, entry: StoredEntry) -> None:
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
            self.infos[entry.id] = evidence_info(entry.id, payload, entry.blob, calls.get(payload.tool_use_id))
        elif isinstance(payload, TurnCard):
            try:
                self._changed(self.index.by_id(payload.turn_id))
            except InvalidInput:
                pass  # a card for a turn not in this chain: the index names it among its problems
        elif isinstance(payload, PlanRecord):
            self.states[payload.model] = PlannerState.from_json(payload.plan.get("state"))
            self.plans[payload.model] = entry.id

    def _changed(self, turn: Turn) -> None:
        self._unsized[turn.id] = turn
        self._unindexed[turn.id] = turn

    def turn_infos(self, turn: Turn) -> dict[str, EvidenceInfo]:
        return {eid: self.infos[eid] for eid in turn.evidence if eid in self.infos}

    def sizes(self) -> TurnTable:
        """Exact sizes of every turn (``vak_context.context.planner.plan.measure_turn``), as columns in turn order: a
        closed turn is measured once (again only if its card arrives later), the open one every time."""
        for turn in self._unsized.values():
            self.table.set(turn.ordinal - 1, turn.id, measure_turn(self.index, turn, self.turn_infos(turn)))
        self._unsized.clear()
        last = self.index.current
        if last is not None and not last.closed:
            self.table.set(last.ordinal - 1, last.id, measure_turn(self.index, last, self.turn_infos(last)))
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
            sizes=self.sizes(),
            relevance=self.scores(" ".join([text, *reading_terms])),
            reading_terms=reading_terms,
            current=current,
            infos=self.turn_infos(self.index.turn(current)) if current is not None else None,
            current_costs=self.current_costs(current) if current is not None else None,
            cache=self.plan_cache,
        )

    def current_costs(self, ordinal: int) -> TurnCosts:
        """``vak_context.context.planner.currentturn.turn_costs`` of a turn, kept until the chain grows (every profile's
        plan of one request shares it)."""
        key = (ordinal, self.index.head)
        if self._costs is None or self._costs[0] != key:
            turn = self.index.turn(ordinal)
            self._costs = (key, turn_costs(self.index, turn, self.turn_infos(turn)))
        return self._costs[1]


def plan_record(p: Plan, head: str | None) -> PlanRecord:
    """The ``plan`` entry: the plan, its inputs and both digests, so the request can be explained later."""
    return PlanRecord(model=p.model, head=head, inputs=p.inputs, inputs_digest=p.inputs_digest, plan=p.to_json(),
                      digest=p.digest)


def record_plan(ledger: Ledger, session: str, view: SessionView, p: Plan) -> str:
    """Append the plan to the session (and to the view, so the model's state carries to its next plan)."""
    entry_id = ledger.append(session, [plan_record(p, view.index.head)])[0]
    view.add(ledger.get(entry_id))
    return entry_id


# ------------------------------------------------------------------ rescue and preparation


def handoff_text(p: Plan) -> str:
    omitted = [t.ordinal for t in p.turns if t.fidelity == Fidelity.BEHIND_RESET]
    span = f"turns {omitted[0]}–{omitted[-1]}" if omitted else "no turns"
    return (
        f"Context reset for {p.model}: {p.rescue_reason}. The session's {span} are behind this point and are "
        'not planned again; recall({"turn": N}) still returns any of them in full.'
    )


def write_reset(ledger: Ledger, session: str, view: SessionView, p: Plan) -> str:
    """The rescue: a reset-with-handoff entry, after which the turns before it are never planned."""
    if not p.rescue:
        raise InvalidInput("only a rescue plan (plan.rescue) writes a reset-with-handoff")
    history = [t for t in p.turns if t.fidelity == Fidelity.BEHIND_RESET]
    payload = ResetWithHandoff(
        handoff=handoff_text(p),
        last_turn_id=history[-1].turn_id if history else None,
        reason=p.rescue_reason,
        model=p.model,  # this model's rescue: other models' projections stay as they were
    )
    entry_id = ledger.append(session, [payload])[0]
    view.add(ledger.get(entry_id))
    return entry_id


Summarise = Callable[[SessionView, Plan], Awaitable[list[str]]]


@dataclass
class Prepared:
    plan: Plan
    request: ChatRequest
    written: list[str] = field(default_factory=list)  # entries written on the way (packet, reset)


async def prepare(
    view: SessionView,
    profile: CapacityProfile,
    directive: str,
    *,
    ledger: Ledger,
    session: str,
    summarise: Summarise,
    model: str,
    system: str = "",
    tools: Sequence[ToolSpec] = (),
    tail: str = "",
    current: int | None = None,
    reading_terms: Sequence[str] = (),
    max_tokens: int = 1024,
    prefix: int | None = None,
) -> Prepared:
    """Plan; write the packet summary or the reset the plan needs; plan again; project."""
    written: list[str] = []
    # The stable prefix as measured (the server's own count, when the caller has one), else estimated.
    pre = prefix if prefix is not None else prefix_tokens(profile, system, tools)
    tail_n = text_tokens(profile, tail)
    for _ in range(3):  # a summary written can change the packet's cost once; a reset empties history
        p = view.plan(
            profile, directive, prefix_tokens=pre, tail_tokens=tail_n, reading_terms=reading_terms, current=current
        )
        if p.rescue and p.rows.history_start < p.rows.history_end:  # history this model does not yet start after
            written.append(write_reset(ledger, session, view, p))
            continue
        if p.packet is not None and p.packet.needs_summary:
            written += await summarise(view, p)
            continue
        break
    if p.packet is not None and p.packet.needs_summary:
        raise InvalidInput("the packet's summary could not be settled in three rounds; plan again")
    request = project(
        view.index, p, model=model, infos=view.infos, system=system, tools=tools, tail=tail, max_tokens=max_tokens
    )
    return Prepared(p, request, written)


# ------------------------------------------------------------------ over-length


def after_overflow(
    profile: CapacityProfile, exc: ContextOverflow, *, request_chars_sent: int, now: float
) -> CapacityProfile:
    """The profile a rejection implies: ``verified_window`` is the rejected size (or the provider's
    stated limit, when smaller), and the rejected prompt's real token count, when the provider said
    it, is a tokens-per-char measurement like any other."""
    tpc = profile.tokens_per_char
    estimated = estimate_tokens(request_chars_sent, tpc.value)
    rejected = exc.prompt_tokens if exc.prompt_tokens else estimated
    if exc.prompt_tokens and request_chars_sent > 0:
        tpc = tpc.update(exc.prompt_tokens / request_chars_sent)
    window = rejected if not exc.limit_tokens else min(rejected, exc.limit_tokens)
    if profile.verified_window is not None:
        window = min(window, profile.verified_window)
    # In the plan's own units the window must shrink below what was sent, or the same plan comes back.
    window = min(window, max(0, estimate_tokens(request_chars_sent, tpc.value) - 1))
    signal = f"verified_window: {window} tokens after the provider rejected a {rejected}-token request"
    provenance = replace(
        profile.provenance,
        updated_at=now,
        signals=(*profile.provenance.signals, signal)[-32:],
    )
    return replace(profile, verified_window=window, tokens_per_char=Ewma(tpc.value, tpc.samples), provenance=provenance)


@dataclass
class Completed:
    """What a planned send came to. ``result`` is None only when the retry was over length too."""

    result: ChatResult | None
    profile: CapacityProfile  # the profile after any over-length correction: record it in the ledger
    plan: Plan
    request: ChatRequest
    overflows: list[ContextOverflow] = field(default_factory=list)


class Complete(Protocol):
    async def complete(self, request: ChatRequest) -> ChatResult: ...


async def complete_planned(
    provider: Complete,
    profile: CapacityProfile,
    build: Callable[[CapacityProfile], Awaitable[tuple[Plan, ChatRequest]]],
    *,
    clock: Callable[[], float] = time.time,
) -> Completed:
    """Send the planned request. On an over-length rejection: correct the profile, plan again, retry once.

    Over-length is never a permanent error: it never propagates. When the retry is rejected too, or
    the corrected window cannot hold even the current turn's most compact form (nothing is sent), the
    turn gets no result (``result`` None) and the corrected profile, which the next turn plans against.
    A first plan that cannot fit raises ``RequestTooLarge`` before anything is sent.
    """
    overflows: list[ContextOverflow] = []
    for attempt in range(2):
        try:
            p, request = await build(profile)
        except RequestTooLarge:
            if not attempt:
                raise  # nothing was sent: the error says what to do
            break  # the corrected window cannot hold even the current turn's most compact form
        try:
            return Completed(await provider.complete(request), profile, p, request, overflows)
        except ContextOverflow as exc:
            overflows.append(exc)
            profile = after_overflow(profile, exc, request_chars_sent=request_chars(request), now=clock())
    return Completed(None, profile, p, request, overflows)
