"""PlannerActor: plans a session's next request, writes what a plan needs, and makes its record (spec §4).

A plain class (``vak_context.actors.factory.planner_actor`` wraps it with ``ray.remote``), and the planning
I/O around the pure planner, in one place: ``settle_plan`` (plan; write the packet summary or this model's
reset-with-handoff the plan needs, as the pure step policy's ``needs`` says; plan again), ``summarise_ahead``
(at a turn's close, the summaries the next turn's requests will need), and the ``plan`` entry
(``plan_record``, ``record_plan``). ``explain(plan_id)`` rebuilds the view as of the recorded chain head and
plans again from the recorded inputs, so any request can be explained after the fact: equal digests mean
the same plan.

Each model's planner state (the current-turn reserve) is read back from its last recorded plan, so
a restarted actor carries on where the old one stopped. It writes through a LedgerActor handle when
given one (the folder's one writer), else through its own LedgerStore.

**A live turn's plans.** The AssemblerActor asks this actor for a plan only when the step policy says the
step needs one (the turn's first step, a turn that outgrew its frozen plan, an undercount):
``plan_step`` plans, makes what the plan needs first (the reset, or the packet summary's activity and
compaction entries), plans again, and answers with the settled plan and those entries, chained on the head
it was handed but not written (``StepPlan.chained``): the assembler commits them with the turn's entries and
the plan entry in its one append, so a step's plan writes nothing of its own (on Ray: one call here, none
from here to the LedgerActor). A packet writer of the caller's own (``summarise``) still appends for itself.
The assembler hands it the entries it folded since it last asked (``entries``), so a
step reads the ledger at most once, in the assembler (on Ray not at all: the driver hands the assembler what
its own append got back); it projects and sizes the plan, and appends its ``plan`` entry
(``plan_record``, naming this actor as its producer) itself. Until the next hand-over shows the chained
entries committed, this actor's view is not trusted with them: where they are not there, it reads again.

**The summariser** is an object this actor holds (``vak_context.agent.summarise.Summariser``): given
in-process (``vak_context.engine.binding``), else built from the step's endpoint (on Ray:
``vak_context.agent.endpoint.build_tools``, once per endpoint, on the bound model or the endpoint's cheaper
summary model). ``summarise`` (a callable writing a plan's packet) replaces it where a caller writes
packets its own way (tests, the farm's replay).

**Summaries at turn close.** When a turn closes, the turn loop asks (through the assembler, which measures
the prefix as for a step) for ``plan_ahead``: the next request's plan, made as its first step will make it,
and the packet summary it needs written then, so the summariser's call is made between turns and never
on a request's path. ``plan_step`` still writes a summary its plan finds missing (the first request
after a restart, a profile or budget that moved); both hold the session's lock, and a range with a stored
packet is never summarised again (``vak_context.agent.summarise``). Before that plan, where the session
asked for it, the summariser's model reads the closed turn's directive for stated items
(``vak_context.agent.stated_pass``, docs/STATE.md "The model pass").
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, cast

from vak_context.actors.ledger.client import LedgerClient
from vak_context.actors.session_fold import FoldedSessions, fold_unseen
from vak_context.agent.endpoint import EndpointTools, build_tools
from vak_context.agent.stated_pass import extract_with_model
from vak_context.agent.steps import StepRequest, interned
from vak_context.agent.summarise import Summariser, write_packet
from vak_context.context.capacity.profile import CapacityProfile, from_record
from vak_context.context.capacity.tokens import PRIOR_TOKENS_PER_CHAR
from vak_context.context.planner.plan import PacketPlan, Plan, PlannerState
from vak_context.context.planner.policy import (
    SETTLE_ROUNDS,
    needs,
    needs_summary_ahead,
    plan_entry,
    reset_entry,
)
from vak_context.context.planner.records import Rows
from vak_context.context.planner.view import SessionView
from vak_context.context.request.assemble import prefix_tokens, text_tokens
from vak_context.context.request.messages import ToolSpec
from vak_context.errors import InvalidInput
from vak_context.events.envelope import At, Mapper, StoredEntry, chained
from vak_context.events.payloads import CapacityProfileRecord, PlanRecord
from vak_context.storage.contract import Ledger
from vak_context.storage.ledger import LedgerStore

PRODUCER = "PlannerActor"  # what a plan entry this actor makes names as its producer

# Writes the packet summary a plan needs into the session; returns the new entry ids (activity, compaction).
Summarise = Callable[[SessionView, Plan], Awaitable[list[str]]]


@dataclass(frozen=True)
class StepPlan:
    """``plan_step``'s answer: the settled plan, and the entries written on the way (packet, reset), as
    their ids and as the entries themselves (the assembler folds them without reading them back)."""

    plan: Plan
    written: list[str] = field(default_factory=list)
    entries: list[StoredEntry] = field(default_factory=list)
    committed: bool = False  # the ``unwritten`` entries it was handed were committed (before what it wrote)
    # ``entries`` are chained on the head the planner was handed, not written: the caller commits them
    # (after the turn's entries it handed over, before the plan entry) in its one append.
    chained: bool = False


def as_profile(profile: CapacityProfile | CapacityProfileRecord | Mapping[str, Any]) -> CapacityProfile:
    """A CapacityProfile from itself, its ledger record, or the record's JSON."""
    if isinstance(profile, CapacityProfile):
        return profile
    if isinstance(profile, CapacityProfileRecord):
        return from_record(profile)
    if isinstance(profile, Mapping):
        return from_record(CapacityProfileRecord.model_validate({"kind": "capacity_profile", **profile}))
    raise InvalidInput(f"not a capacity profile: {type(profile).__name__}; pass a CapacityProfile or its record")


# ------------------------------------------------------------------ the plan record


def plan_record(p: Plan, head: str | None, producer: str | None = None,
                base: tuple[str, Rows] | None = None) -> PlanRecord:
    """The ``plan`` entry (``vak_context.context.planner.policy.plan_entry``): the plan, its inputs and both
    digests, so the request can be explained later and the plan decoded back after a restart; ``producer``
    names the actor that made it (outside both digests); ``base``: the model's plan entry before it (its id
    and rows), which its rows are written against (``vak_context.context.planner.delta``)."""
    record = plan_entry(p, head, base)
    return record if producer is None else record.model_copy(update={"producer": producer})


def record_plan(ledger: Ledger, session: str, view: SessionView, p: Plan, producer: str | None = None) -> str:
    """Append the plan to the session (and to the view, so the model's state carries to its next plan)."""
    entry_id = ledger.append(session, [plan_record(p, view.index.head, producer)])[0]
    view.add(ledger.get(entry_id))
    return entry_id


# ------------------------------------------------------------------ what a plan needs written


def write_reset(ledger: Ledger, session: str, view: SessionView, p: Plan) -> str:
    """The rescue: a reset-with-handoff entry (``reset_entry``), after which the turns before it are never planned."""
    entry_id = ledger.append(session, [reset_entry(p)])[0]
    view.add(ledger.get(entry_id))
    return entry_id


async def settle_plan(
    view: SessionView,
    profile: CapacityProfile,
    directive: str,
    *,
    ledger: Ledger,
    session: str,
    summarise: Summarise,
    system: str = "",
    tools: Sequence[ToolSpec] = (),
    tail: str = "",
    current: int | None = None,
    reading_terms: Sequence[str] = (),
    prefix: int | None = None,
) -> tuple[Plan, list[str]]:
    """Plan; write the packet summary or the reset the plan needs (the step policy's ``needs``); plan again.
    Returns the settled plan and the entries written. ``prefix``: the stable prefix as measured (the
    server's own count, when the caller has one), else estimated. A current turn that cannot fit even at
    its most compact raises ``RequestTooLarge``: nothing is sent."""
    written: list[str] = []
    pre = prefix if prefix is not None else prefix_tokens(profile, system, tools)
    # The tail as recorded: the plan adds the room of the stated items' <work_contract> (docs/STATE.md).
    tail_n = text_tokens(profile, tail)
    for _ in range(SETTLE_ROUNDS):
        p = view.plan(
            profile, directive, prefix_tokens=pre, tail_tokens=tail_n, reading_terms=reading_terms, current=current
        )
        need = needs(p)
        if need == "reset":
            written.append(write_reset(ledger, session, view, p))
        elif need == "summary":
            written += await summarise(view, p)
        else:
            return p, written
    if p.packet is not None and p.packet.needs_summary:
        raise InvalidInput("the packet's summary could not be settled in three rounds; plan again")
    return p, written


async def summarise_ahead(
    view: SessionView,
    profile: CapacityProfile,
    directive: str,
    *,
    summarise: Summarise,
    system: str = "",
    tools: Sequence[ToolSpec] = (),
    tail: str = "",
    prefix: int | None = None,
) -> list[str]:
    """At a turn's close: plan the session's next turn as its requests will be planned and write the
    summaries their packets need, so those requests find them stored. Two plans: its first step's (a new
    directive after every closed turn; ``directive`` stands in for the words not yet written, the closed
    turn's, whose length is what the budget reads), and a later step's, once the turn has grown as far as
    the session's recent turns grew (the largest current turn of its last recorded plans,
    ``SessionView.grown``: a turn whose tool results outgrow its first plan plans again with a larger
    reserve, so a smaller budget and a larger packet). A packet's range depends only on the budget
    (prefix, tail, the current turn's reserve), not on the directive's words, and ranges grow in whole
    batches of turns, so these are the ranges the turn's requests carry; a step that grows further than
    the recent turns did may still find its range missing and write it (``settle_plan``). Nothing else is
    written: a rescue's reset is the request's own to write. Returns the entries written (none when every
    packet is stored, a list or a pointer)."""
    pre = prefix if prefix is not None else prefix_tokens(profile, system, tools)
    tail_n = text_tokens(profile, tail)
    # Each plan is placed first, without its record (rows, inputs, digests: nothing here records or sends
    # it), and planned whole only where its packet's summary is due, which the summariser reads from.
    written: list[str] = []
    packet, rescue, current = view.placement(profile, directive, prefix_tokens=pre, tail_tokens=tail_n)
    if _summary_due(packet, rescue):
        first = view.plan(profile, directive, prefix_tokens=pre, tail_tokens=tail_n)
        written += await summarise(view, first) if needs_summary_ahead(first) else []
    grown = max(view.grown.get(str(profile.key), ()), default=0)
    if grown > current:
        packet, rescue, _ = view.placement(profile, directive, prefix_tokens=pre, tail_tokens=tail_n, grown=grown)
        if _summary_due(packet, rescue):  # the view holds the first's: never twice
            later = view.plan(profile, directive, prefix_tokens=pre, tail_tokens=tail_n, grown=grown)
            if needs_summary_ahead(later):
                written += await summarise(view, later)
    return written


def _summary_due(packet: PacketPlan | None, rescue: bool) -> bool:
    """``needs_summary_ahead`` of the plan so placed (``SessionView.placement``)."""
    return not rescue and packet is not None and packet.needs_summary


# ------------------------------------------------------------------ the actor


class PlannerActor:
    """``ledger``: the folder's LedgerActor handle, or a LedgerStore this process holds as its writer.
    ``summariser``: the model packet summaries are written with (None: built from each step's endpoint);
    ``summarise``: a packet writer of the caller's own in its place (see the module docstring)."""

    def __init__(self, root: str, ledger: LedgerStore | Any, tokens_per_char: float = PRIOR_TOKENS_PER_CHAR,
                 summarise: Summarise | None = None, summariser: Summariser | None = None) -> None:
        self.root = root
        self.ledger = ledger if isinstance(ledger, LedgerClient) else LedgerClient(root, ledger)
        self.tokens_per_char = tokens_per_char
        self.summariser = summariser
        self.summarise = summarise
        self.mapper = Mapper()
        self._lock = threading.RLock()
        # The packets, resets and plans this actor writes are folded into its view as it writes them.
        self._views: FoldedSessions[SessionView] = FoldedSessions(
            self.ledger, lambda chain: SessionView.build(chain, self.tokens_per_char),
            lambda view, new: fold_unseen(view, new, self._views.written), self._lock)
        self._endpoints: dict[tuple[Any, ...], EndpointTools] = {}
        self._sessions: dict[str, asyncio.Lock] = {}  # one step plan at a time per session (an async actor)
        # Per session, the entries (seq -> id) the last ``plan_step`` chained and handed back, until the
        # assembler's next hand-over shows them committed.
        self._chained: dict[str, dict[int, str]] = {}
        self._steps: dict[str, StepRequest] = {}  # the last step per session: its prompt and specs kept (``interned``)

    def views(self) -> tuple[threading.RLock, FoldedSessions[SessionView]]:
        """This actor's views of its sessions and their lock, for an assembler in the same process to project
        from (one view per session, folded once a step)."""
        return self._lock, self._views

    def view(self, session: str, entries: Sequence[StoredEntry] | None = None) -> SessionView:
        """The session's view, brought up to date with what was appended since last time: from ``entries``
        (what the assembler read since it last asked) where they continue what the view holds, else read.
        A view holding entries it chained and handed back is rebuilt unless ``entries`` show them committed."""
        chained = self._chained.pop(session, None)
        if chained:
            if entries is None:  # read from the first of them: the read ``get`` makes, begun a little earlier
                entries = self.ledger.entries(session, min(chained))
            got = {e.seq: e.id for e in entries}
            if any(got.get(seq) != entry_id for seq, entry_id in chained.items()):
                self._views.forget(session)  # not written as chained: read what was
                return self._views.get(session)
        return self._views.get(session) if entries is None else self._views.feed(session, entries)

    def forget(self, session: str) -> None:
        """Drop the session's view (it may hold entries a failed commit never wrote): the next look reads."""
        self._chained.pop(session, None)
        self._views.forget(session)

    def plan(
        self,
        session: str,
        profile: CapacityProfile | CapacityProfileRecord | Mapping[str, Any],
        directive: str = "",
        *,
        prefix_tokens: int,
        tail_tokens: int,
        reading_terms: Sequence[str] = (),
        current: int | None = None,
        record: bool = True,
    ) -> dict[str, Any]:
        """Plan the session's next request for ``profile``; record it unless ``record`` is False.

        Returns ``{"plan", "digest", "inputs_digest", "entry_id"}`` (``entry_id`` of the plan entry).
        """
        with self._lock:
            view = self.view(session)
            p = view.plan(
                as_profile(profile),
                directive,
                prefix_tokens=prefix_tokens,
                tail_tokens=tail_tokens,
                reading_terms=tuple(reading_terms),
                current=current,
            )
            entry_id = self.ledger.append(session, [plan_record(p, view.index.head)])[0] if record else None
        return {"plan": p.to_json(), "digest": p.digest, "inputs_digest": p.inputs_digest, "entry_id": entry_id}

    async def plan_step(self, session: str, profile: CapacityProfile, step: StepRequest, *, current: int,
                        prefix_tokens: int | None = None, entries: Sequence[StoredEntry] | None = None,
                        unwritten: int = 0) -> StepPlan:
        """The settled plan for the open turn's step (its ordinal ``current``), with the packet summary or
        the reset it needed written first. ``prefix_tokens``: the stable prefix as the assembler's counter
        measured it (None: estimated); ``entries``: the session's entries the assembler read since it last
        asked (None: read them here), of which the last ``unwritten`` are the turn's, chained but not yet
        committed (the assembler commits them with the plan entry). The packet or reset the plan needs is
        chained after them and handed back (``StepPlan.chained``), for the assembler to commit with the rest;
        only a packet writer of the caller's own writes them first. Not recorded: the assembler records the
        plan it sends."""
        step = self._steps[session] = interned(step, self._steps.get(session))
        lock = self._sessions.setdefault(session, asyncio.Lock())
        async with lock:
            view = self.view(session, entries)
            if self.summarise is not None:  # a packet writer of the caller's own appends for itself
                return await self._plan_writing(session, profile, step, view, current, prefix_tokens,
                                                list(entries[len(entries) - unwritten:]) if entries and unwritten
                                                else [])
            # What the plan needs written is chained on the view's head (the turn's unwritten entries
            # included) and handed back: the caller commits it with the plan entry, one append in all.
            at = At(view.index.head, self._views.seen(session) or 0, time.time_ns() // 1000)
            chain = _Chaining(self.ledger, at)
            p, written = await settle_plan(
                view, profile, "", ledger=cast(Ledger, chain), session=session,
                summarise=self._packet_writer(session, step, cast(Ledger, chain)), system=step.system,
                tools=step.tools, tail=step.tail, current=current, prefix=prefix_tokens,
            )
            if chain.entries:  # folded as written (``view.add``): the view now ends past them
                self._views.feed(session, chain.entries)
                self._chained[session] = {e.seq: e.id for e in chain.entries}
        return StepPlan(p, written, chain.entries, chained=True)

    async def _plan_writing(self, session: str, profile: CapacityProfile, step: StepRequest, view: SessionView,
                            current: int, prefix_tokens: int | None, before: list[StoredEntry]) -> StepPlan:
        """``plan_step`` where the caller's own packet writer appends: the turn's unwritten entries (``before``)
        are committed before anything the plan writes, which is written as it goes."""
        kept = cast(Ledger, _Kept(self.ledger, before))  # what is written is read back once, here, and handed on
        p, written = await settle_plan(
            view, profile, "", ledger=kept, session=session, summarise=self._packet_writer(session, step, kept),
            system=step.system, tools=step.tools, tail=step.tail, current=current, prefix=prefix_tokens,
        )
        got = cast(_Kept, kept).got
        return StepPlan(p, written, [got[i] for i in written if i in got],
                        committed=bool(before) and not cast(_Kept, kept).before)

    async def plan_ahead(self, session: str, profile: CapacityProfile, step: StepRequest, *, after: str,
                         directive: str, prefix_tokens: int | None = None,
                         entries: Sequence[StoredEntry] | None = None) -> list[str]:
        """At the close of turn ``after`` (its directive's entry id): plan the next request (not recorded) and
        write the packet summary it will need now, through the summariser this actor holds, so that
        request's ``plan_step`` finds it stored. ``directive`` stands in for the next one's words (the closed
        turn's; only its length reaches the packet's range). Nothing is planned once the session has moved
        on (a newer directive, or the turn still open): the next request then plans for itself. Returns the
        entries written (the model pass's, where the session asked for it, then the ``packet.summarise`` activity
        and the ``compaction``), none when nothing was due."""
        step = self._steps[session] = interned(step, self._steps.get(session))
        lock = self._sessions.setdefault(session, asyncio.Lock())
        async with lock:  # a step plan of the same session waits for this summary, then finds it stored
            view = self.view(session, entries)
            last = view.index.current
            if last is None or last.id != after or not last.closed:
                return []
            # The model pass first (docs/STATE.md): what it adds is in force for the plan made ahead here.
            summariser = self._summariser(step)
            stated = [] if summariser is None else await extract_with_model(
                self.ledger, session, view, profile, directive_id=after, directive=directive, summariser=summariser)
            written = await summarise_ahead(
                view, profile, directive, summarise=self._packet_writer(session, step), system=step.system,
                tools=step.tools, tail=step.tail, prefix=prefix_tokens,
            )
        return stated + written

    def _packet_writer(self, session: str, step: StepRequest, ledger: Ledger | None = None) -> Summarise:
        """What writes a plan's packet: the caller's own writer, else the summariser this actor holds (the
        one given, else the one built from the step's endpoint), else one that says none is wired."""
        if self.summarise is not None:
            return self.summarise
        summariser = self._summariser(step)
        if summariser is None:
            return _no_summariser
        return partial(write_packet, ledger or self.ledger, session, summariser=summariser)

    def _summariser(self, step: StepRequest) -> Summariser | None:
        """The summariser this actor holds: the one given, else the one built from the step's endpoint."""
        summariser = self.summariser
        if summariser is None and step.endpoint is not None:
            tools = self._endpoints.get(step.endpoint.ident)
            if tools is None:
                tools = self._endpoints[step.endpoint.ident] = build_tools(step.endpoint, lambda: self.tokens_per_char)
            summariser = tools.summariser
        return summariser

    def explain(self, plan_id: str) -> dict[str, Any]:
        """Plan again from a recorded plan's inputs, on the chain as it was; say whether it is the same."""
        entry = self.ledger.get(plan_id)
        record = self.mapper.payload_of(entry)
        if not isinstance(record, PlanRecord):
            raise InvalidInput(f"{plan_id} is a {entry.kind} entry, not a plan")
        inputs = record.inputs
        chain = self.ledger.chain_to_root(record.head) if record.head else []
        view = SessionView.build(chain, self.tokens_per_char)
        p = view.plan(
            as_profile(inputs["profile"]),
            inputs["directive"] if inputs.get("current") is None else "",
            prefix_tokens=int(inputs["prefix_tokens"]),
            tail_tokens=int(inputs["tail_tokens"]),
            state=PlannerState.from_json(inputs.get("state")),
            reading_terms=tuple(inputs.get("reading_terms", ())),
            current=inputs.get("current"),
        )
        return {
            "recorded": record.digest,
            "recomputed": p.digest,
            "matches": p.digest == record.digest and p.inputs_digest == record.inputs_digest,
            "plan": p.to_json(),
        }

    def state(self, session: str, model: str) -> dict[str, Any] | None:
        """The planner state the model's last recorded plan returned (None before its first plan)."""
        st = self.view(session).states.get(model)
        return None if st is None else {"current_turn_reserve": st.current_turn_reserve, "samples": st.samples,
                                        "observed_through": st.observed_through}


class _Kept:
    """A ledger that keeps each entry read back through it (what ``settle_plan`` wrote, read once to fold)."""

    def __init__(self, ledger: Ledger, before: Sequence[StoredEntry] = ()) -> None:
        self.ledger = ledger
        self.got: dict[str, StoredEntry] = {}
        self.before = list(before)  # the turn's entries, chained, not committed: they go first

    def append(self, session: str, payloads: Sequence[Any], **kw: Any) -> list[str]:
        if self.before:
            before, self.before = self.before, []
            cast(Any, self.ledger).append_chain(session, before)
        return self.ledger.append(session, payloads, **kw)

    def get(self, entry_id: str) -> StoredEntry:
        entry = self.got[entry_id] = self.ledger.get(entry_id)
        return entry

    def __getattr__(self, name: str) -> Any:  # the rest of the contract, as the ledger has it
        return getattr(self.ledger, name)


class _Chaining:
    """A ledger that writes nothing: each append is chained after the last (``chained``, from ``at``: the head
    the planner was handed) and kept in ``entries``, for the caller to commit; ``get`` answers them from here."""

    def __init__(self, ledger: Ledger, at: At) -> None:
        self.ledger = ledger
        self.at = at
        self.entries: list[StoredEntry] = []
        self._by_id: dict[str, StoredEntry] = {}
        self._mapper = Mapper()

    def append(self, session: str, payloads: Sequence[Any], *, parent: str | None = None,
               blobs: Sequence[bytes | None] | None = None) -> list[str]:
        if parent is not None:
            raise InvalidInput("a plan's entries are chained on the session's head, never on another parent")
        at = At(self.at.parent, self.at.seq, max(time.time_ns() // 1000, self.at.time_us))
        new = chained(at, session, [self._mapper.encode_payload(p) for p in payloads], blobs)
        if new:
            self.at = At(new[-1].id, new[-1].seq + 1, at.time_us)
        self.entries += new
        self._by_id.update((e.id, e) for e in new)
        return [e.id for e in new]

    def head(self, session: str) -> str | None:
        return self.at.parent

    def get(self, entry_id: str) -> StoredEntry:
        entry = self._by_id.get(entry_id)
        return entry if entry is not None else self.ledger.get(entry_id)

    def __getattr__(self, name: str) -> Any:  # the rest of the contract (reads), as the ledger has it
        return getattr(self.ledger, name)


async def _no_summariser(_view: SessionView, _plan: Plan) -> list[str]:
    raise InvalidInput(
        "the plan needs a packet summary and this planner has no summariser; pass summariser= "
        "(vak_context.agent.summarise.Summariser), or bind the session with an EndpointSpec "
        "(vak_context.agent.endpoint) so the PlannerActor builds one"
    )
