"""AssemblerActor: the request for each step of a live turn (spec §6, §10 "what each call carries").

A plain class (``vak_context.actors.factory.assembler_actor`` applies ``ray.remote``), and the one actor the
turn loop asks for a step's request: one call in, the request out. Thin: it keeps each session's
``SessionView`` current by following the chain (``vak_context.actors.session_fold``: a branch rebuilds it from
the new head; at most one read of the ledger a step, none where the caller hands over what was appended), loads the step policy's state (memory, else the model's last
``plan`` entry), and does what the pure policy (``vak_context.context.planner.policy.decide``) says: project
the plan frozen for the turn, or ask the **PlannerActor** for a new plan (``plan_step``, handed the entries
this actor read since it last asked, so the planner does not read them again: it makes the packet summary
or the reset the plan needs, chained on that head, and holds the summariser), size the request, and append
what the planner made with the ``plan`` entry of the plan it sends (``vak_context.actors.planner.plan_record``: the entry names the PlannerActor, which made
the plan). On Ray a step is then at most: the turn loop's call here, a call to the PlannerActor when the
step policy asks for a plan, and one append (``tests/ray/test_step_crossings_ray.py`` counts them): in a
held turn, of what the driver chained since the last pass, sent as the pass begins so it lands beside the
plan and the projection, the plan entry handed back chained for the next one (``Assembled.unwritten``).
The turn loop's driver hands over with its call what the ledger appended since this actor's view ends
(its own append returned them, ``RayServices``), so the view reads the ledger only across a gap. The planner is the folder's PlannerActor handle on Ray, a ``PlannerActor`` object
in-process. At a turn's close ``plan_ahead`` has the planner write the packet summary the next request
will need (the prefix measured as for that request's first step), so that request finds it stored.

**The history is frozen within a turn.** The spec says that within a turn "nothing before the tail
changes": the older turns are planned once, at the turn's first step, and that plan is kept for every
later step, so each step's request is the previous one plus what the turn appended (a byte prefix, the
prefix cache's best case). The plan is made again mid-turn only when the frozen plan's request no
longer fits the budget (the current turn outgrew it: a compaction at a step boundary), or when the
server's count says a new plan's estimate undercounted. The frozen plan is the turn's last ``plan``
entry, so an assembler restarted mid-turn sends the same bytes the old one would have.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any

from vak_context.actors.ledger.client import LedgerClient
from vak_context.actors.planner import PRODUCER, PlannerActor, StepPlan, Summarise, plan_record
from vak_context.actors.session_fold import FoldedSessions, fold_unseen
from vak_context.agent.endpoint import EndpointTools, build_tools
from vak_context.agent.steps import Assembled, StepRequest, interned, layout
from vak_context.agent.summarise import Summariser
from vak_context.context.capacity.profile import CapacityProfile, request_chars
from vak_context.context.capacity.tokens import PRIOR_TOKENS_PER_CHAR
from vak_context.context.planner.delta import PlanRows
from vak_context.context.planner.plan import Plan, fidelity_counts
from vak_context.context.planner.policy import (
    Asked,
    Planned,
    Project,
    Projected,
    Replan,
    Send,
    StepState,
    decide,
    rows_reader,
    state_of_entry,
)
from vak_context.context.planner.view import SessionView
from vak_context.context.request.assemble import (
    cache_breakpoints,
    current_turn_messages,
    prefix_digest,
    project,
    request_tokens,
)
from vak_context.context.request.messages import ChatRequest, Message
from vak_context.errors import ChainMoved, InvalidInput
from vak_context.events.envelope import At, Mapper, StoredEntry, chained
from vak_context.events.payloads import PlanRecord
from vak_context.storage.ledger import LedgerStore

Count = Callable[[ChatRequest], Awaitable[int]]


class AssemblerActor:
    """``ledger``: the folder's LedgerActor handle, or a LedgerStore this process holds as its writer.
    ``planner``: the folder's PlannerActor handle (Ray), or a ``PlannerActor`` object; None makes one here
    over the same ledger client, holding ``summariser`` (the model plans that need a packet summary have it
    written with) or ``summarise`` (a packet writer of the caller's own); a planner given holds its own.
    ``count`` sizes a request exactly (``vak_context.providers.tokencount``: the server's own template and
    tokenizer); without it the budget check uses ``chars × tokens_per_char``. Without ``count``, on Ray, the
    counter is built from the step's endpoint (any provider, ``vak_context.agent.endpoint``)."""

    def __init__(self, root: str, ledger: LedgerStore | Any, summarise: Summarise | None = None,
                 tokens_per_char: float = PRIOR_TOKENS_PER_CHAR,
                 count: Callable[[ChatRequest], Awaitable[int]] | None = None,
                 count_prefix: Callable[[ChatRequest], Awaitable[int]] | None = None,
                 planner: PlannerActor | Any = None, summariser: Summariser | None = None) -> None:
        self.ledger = ledger if isinstance(ledger, LedgerClient) else LedgerClient(root, ledger)
        if planner is None:
            planner = PlannerActor(root, self.ledger, tokens_per_char, summarise=summarise, summariser=summariser)
        elif summarise is not None or summariser is not None:
            raise InvalidInput("summariser= goes to the planner when one is given: PlannerActor(..., summariser=)")
        self.planner = planner
        self.count = count
        # Sizes the stable prefix once per digest where no per-request counter is wired (a hosted provider):
        # ``vak_context.providers.tokencount.UsageCounter``, a usage-only request (max_tokens 1).
        self.count_prefix = count_prefix
        self.tokens_per_char = tokens_per_char
        self.mapper = Mapper()
        # One view per session, folded once a step: in-process the planner's own, which it plans on as it is
        # (``PlannerActor.views``); on Ray this actor's, what each read brings in kept for the planner
        # (``take_new``), which is handed it rather than reading it. The plan entries this actor appends are
        # folded from the records it made (``wrote``), never decoded again.
        self._views: FoldedSessions[SessionView]
        if isinstance(planner, PlannerActor):
            self._lock, self._views = planner.views()
        else:
            self._lock = threading.RLock()
            self._views = FoldedSessions(self.ledger, lambda chain: SessionView.build(chain, self.tokens_per_char),
                                         lambda view, new: fold_unseen(view, new, self._views.written), self._lock)
        self._views.keep_new()  # shared, the planner finds them folded: handed over, they are not read again
        # The step policy's state per (session, model), with the id of the plan entry it stands for: the
        # model's last plan entry in the chain is the state, this only saves decoding it at every step.
        self._states: dict[tuple[str, str], tuple[str | None, StepState]] = {}
        self._plan_rows = PlanRows()  # the rows of the plan entries it wrote or read back: the next one's base
        # (model, prefix digest) -> tokens, as its server counts them (None: an estimate, priced at each plan's rate)
        self._prefix: dict[tuple[str, str], int | None] = {}
        self._endpoints: dict[tuple[str, str], EndpointTools] = {}
        self._rate = tokens_per_char  # the bound profile's tokens per char: an endpoint counter's fallback
        # The messages of the request last handed back per session, under a number no other assembler hands out
        # (a restarted one starts elsewhere): a driver that holds them gets the next request's new ones only.
        self._sent: dict[str, tuple[int, tuple[Message, ...]]] = {}
        self._serial = int.from_bytes(os.urandom(6), "big") << 16
        # Per session, a held turn's commit of what its driver wrote since the last pass, sent as the pass
        # began and landing beside its plan and projection: awaited before anything else is committed.
        self._ahead: dict[str, tuple[Awaitable[None], StoredEntry]] = {}
        self._steps: dict[str, StepRequest] = {}  # the last step per session: its prompt and specs kept (``interned``)

    @property
    def summarise(self) -> Summarise | Summariser | None:
        """What writes the in-process planner's packets: a packet writer of the caller's own, else the
        ``Summariser`` it holds (None on Ray: the PlannerActor builds its own from the step's endpoint)."""
        if not isinstance(self.planner, PlannerActor):
            return None
        return self.planner.summarise if self.planner.summarise is not None else self.planner.summariser

    @summarise.setter
    def summarise(self, summarise: Summarise | None) -> None:
        """A packet writer of the caller's own for the in-process planner (None: its ``Summariser``)."""
        if not isinstance(self.planner, PlannerActor):
            raise InvalidInput("this assembler's planner is an actor: it builds its summariser from the step's endpoint")
        self.planner.summarise = summarise

    def _counter(self, step: StepRequest) -> Count | None:
        """The counter for this step: the one given at construction, else the one built from the step's
        endpoint (kept for every later step that names the same endpoint)."""
        if self.count is not None or step.endpoint is None:
            return self.count
        tools = self._endpoints.get(step.endpoint.ident)
        if tools is None:
            tools = self._endpoints[step.endpoint.ident] = build_tools(step.endpoint, lambda: self._rate)
        return tools.count

    async def _ask_planner(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call the planner: through Ray on a handle (its errors translated), directly on an object."""
        call = getattr(self.planner, method)
        remote = getattr(call, "remote", None)
        if remote is not None:
            from vak_context.actors.ray_errors import map_ray_errors  # Ray only where the planner is on Ray

            with map_ray_errors(f"planner {method}"):
                return await remote(*args, **kwargs)
        result = call(*args, **kwargs)
        return await result if inspect.isawaitable(result) else result

    def view(self, session: str) -> SessionView:
        """The session's view, brought up to date with what was appended since the last call."""
        return self._views.get(session)

    def state(self, session: str, model: str, view: SessionView | None = None,
              held: Sequence[StoredEntry] = ()) -> StepState:
        """The step policy's state for (session, model): the model's last plan entry in the session's
        chain, decoded once (``vak_context.context.planner.policy.state_of_entry``) and kept while it is the last.
        ``view``: the session's view as this step read it (None: read it now); ``held``: entries it folded that
        may not be written yet (a pass's ``written``, the plan entry first where the pass before handed it back)."""
        with self._lock:
            last = (view if view is not None else self.view(session)).plans.get(model)
            cached = self._states.get((session, model))
            if cached is not None and cached[0] == last:
                return cached[1]
            state = StepState()
            if last is not None:
                get = {e.id: e for e in held}.get
                record = self.mapper.payload_of(get(last) or self.ledger.get(last))
                if isinstance(record, PlanRecord):
                    # A format-2 entry's rows are what changed since the plans before it: read back as far as needed.
                    read = rows_reader(lambda entry_id: self.mapper.payload_of(get(entry_id) or self.ledger.get(entry_id)))
                    state = state_of_entry(record, self._plan_rows.rows_of(last, read) if record.base else None)
            self._states[(session, model)] = (last, state)
            return state

    async def assemble(self, session: str, profile: CapacityProfile, step: StepRequest,
                       entries: Sequence[StoredEntry] | None = None,
                       written: Sequence[StoredEntry] = (), delta: bool = False, have: int | None = None,
                       behind: bool = False) -> Assembled:
        """The request for the open turn's next step (see the module docstring for when it plans).
        ``entries``: the session's entries from where this actor's view ends (``Assembled.seen`` of the step
        before) to the head, as the caller's last append handed them back (``LedgerClient.append_since_async``):
        folded in without reading (across a gap, or None, the view reads).
        ``written``: what the turn wrote since the last pass, chained by the caller on ``Assembled.tip``
        (``vak_context.events.envelope.chained``): folded in, and committed with the plan entry when the step
        plans, else alone, before this returns (the step's one commit).
        ``delta`` (the driver on Ray): the request's messages after those it shares with the one this actor
        handed back last, where ``have`` names that one (``Assembled.sent``; ``kept``: how many it shares).
        ``behind`` (a held turn's driver on Ray): ``written`` is committed by a call sent as the pass begins, so
        it lands beside the plan and the projection, and is synced beside the model call
        (``LedgerActor.append_chain``); the plan entry comes back unwritten (``Assembled.unwritten``)."""
        step = self._steps[session] = interned(step, self._steps.get(session))
        if entries is None and written:  # what the turn wrote continues the view: nothing to read (``_take``)
            entries = ()
        view = self._views.feed(session, entries) if entries is not None else self.view(session)
        try:
            assembled = await self._assemble(session, profile, step, view, written, behind)
            return self._delta(session, assembled, have) if delta else assembled
        except BaseException:
            with contextlib.suppress(Exception):  # the pass's own error is the one raised
                await self._landed(session)
            if written and self._views.seen(session) not in (None, written[0].seq):  # folded, maybe not written
                self._views.forget(session)  # read again next time: the ledger says what was written
            raise

    def _delta(self, session: str, assembled: Assembled, have: int | None) -> Assembled:
        """``assembled`` with only the messages after those its request shares with the last one handed back
        for ``session``, where the caller holds that one (``have``); kept here for the next step's."""
        messages = assembled.request.messages
        last = self._sent.get(session)
        reused: tuple[int, ...] = ()
        kept, fresh = 0, messages
        if last is not None and have == last[0]:
            kept, reused, fresh = layout(last[1], messages)
        self._serial += 1
        self._sent[session] = (self._serial, messages)
        if not kept and not reused:
            return replace(assembled, sent=self._serial)
        request = assembled.request.model_copy(update={"messages": fresh})
        return replace(assembled, request=request, kept=kept, reused=reused, sent=self._serial)

    async def _take(self, session: str, view: SessionView, written: Sequence[StoredEntry],
                    behind: bool = False) -> list[StoredEntry]:
        """``written`` folded into ``view`` (uncommitted: returned, for the step's commit; ``behind``, a held turn
        on Ray: committed by a call sent now, landing beside the plan and the projection, nothing returned), or,
        where the view does not end where they were chained, committed now and read (nothing returned). The
        first of them may be what the last pass handed back unwritten (``Assembled.unwritten``): folded already."""
        if not written:
            return []
        seen = self._views.seen(session)
        folded = -1 if seen is None else seen - written[0].seq  # how many of them the view holds
        if not 0 <= folded <= len(written) or (folded and written[folded - 1].id != view.index.head):
            await self.ledger.append_chain_async(session, written)
            self.view(session)
            return []
        self._views.feed(session, written[folded:])
        if behind:
            self._ahead[session] = (self.ledger.append_chain_sent(session, written, True), written[-1])
            return []
        return list(written)

    async def _landed(self, session: str) -> tuple[str | None, int] | None:
        """The commit sent as the pass began (``_assemble``), awaited: the session's tip after it (None: none
        sent). Where it failed, the views it was folded into read again (this actor's and the PlannerActor's)
        and its error is raised."""
        ahead = self._ahead.pop(session, None)
        if ahead is None:
            return None
        try:
            await ahead[0]
        except BaseException as e:
            self._views.forget(session)
            await self._planner_forgets(session, e)
            raise
        return ahead[1].id, ahead[1].seq + 1

    async def _assemble(self, session: str, profile: CapacityProfile, step: StepRequest, view: SessionView,
                        written: Sequence[StoredEntry], behind: bool = False) -> Assembled:
        pending = await self._take(session, view, written, behind)  # the turn's entries, folded, not committed
        self._rate = profile.tokens_per_char.value
        count = self._counter(step)
        turn = view.index.current
        if turn is None:
            await self._commit(session, view, pending, None)
            raise InvalidInput(f"session {session!r} has no open turn; append the directive first")
        model = str(profile.key)
        decision, state = decide(Asked(turn.id, profile), self.state(session, model, view, written))
        written_ids: list[str] = []
        try:
            while not isinstance(decision, Send):  # Asked is never answered with Send; at most two plans
                if isinstance(decision, Project):
                    request = self._project(view, decision.plan, step)
                    size = await self._size(profile, request, count)
                    decision, state = decide(Projected(profile, size, request_chars(request), count is not None), state)
                elif isinstance(decision, Replan):
                    planned, pending = await self._plan(session, decision.profile, step, turn.ordinal, count,
                                                        pending)
                    written_ids += planned.written  # a packet or reset the plan wrote stays written
                    if planned.chained:  # chained on the view's head: folded, committed with the plan entry
                        pending, view = await self._take_chained(session, view, pending, planned.entries)
                    elif planned.written:  # nothing else is appended while the turn waits on this step's request
                        view = self._with_written(session, view, planned)
                    request = self._project(view, planned.plan, step)
                    size = await self._size(profile, request, count)
                    decision, state = decide(Planned(planned.plan, profile, size, request_chars(request),
                                                     count is not None), state)
                else:
                    raise InvalidInput(f"the step policy asked the assembler to {type(decision).__name__}; "
                                       "only the turn loop retries a send")
        except BaseException:  # no request (too large, the planner failed): what the turn wrote is written still
            await self._commit(session, view, pending, None)
            raise
        last = view.plans.get(model)
        record = None
        if decision.record:
            # The new plan entry is the model's last in the chain, standing for ``state``: folded in from the
            # record made here, and committed with what the turn wrote since the last pass.
            base = self._plan_rows.base_for(last)  # its rows: what changed since the model's plan before it
            record = plan_record(decision.plan, view.index.head, PRODUCER, base)
        plan_id, tip, committed, unwritten = await self._commit(session, view, pending, record, behind)
        if record is not None and plan_id is not None:
            last = plan_id
            self._plan_rows.wrote(plan_id, decision.plan.rows, record.base)
        with self._lock:
            self._states[(session, model)] = (last, state)
        digest = prefix_digest(step.system, step.tools)
        sized = (count is None and self.count_prefix is None) or (step.model, digest) in self._prefix
        return Assembled(request=request, plan_digest=decision.plan.digest, plan_id=plan_id,
                         replanned=decision.record, fidelity=fidelity_counts(decision.plan),
                         prefix_digest=digest, estimated_tokens=decision.tokens,
                         budget_tokens=decision.budget, written=written_ids, seen=self._views.seen(session), tip=tip,
                         appended=None if committed is None else _others(committed, written),
                         prefix_tokens=self._prefix.get((step.model, digest)), prefix_sized=sized,
                         unwritten=unwritten)

    async def _plan(self, session: str, profile: CapacityProfile, step: StepRequest, current: int,
                    count: Count | None, pending: list[StoredEntry]) -> tuple[StepPlan, list[StoredEntry]]:
        """The PlannerActor's plan, handed what this actor read since it last asked (the turn's ``pending``
        entries last, which it writes first if it writes a packet or reset); what is still not written."""
        handed = self._views.take_new(session)
        if pending and handed is None:  # the planner reads for itself: what it reads must be written
            await self.ledger.append_chain_async(session, pending)
            pending = []
        planned: StepPlan = await self._ask_planner(
            "plan_step", session, profile, step, current=current,
            prefix_tokens=await self._prefix_tokens(step, count), entries=handed, unwritten=len(pending))
        return planned, [] if planned.committed else pending

    async def _commit(self, session: str, view: SessionView, pending: Sequence[StoredEntry],
                      record: PlanRecord | None, behind: bool = False,
                      ) -> tuple[str | None, tuple[str | None, int] | None, list[StoredEntry] | None,
                                 tuple[StoredEntry, ...]]:
        """The step's one commit: what the turn wrote (``pending``, folded) and the plan entry (``record``),
        chained on the view's head, which is the session's (the writer checks: ``ChainMoved``). The plan
        entry's id, the session's tip after the commit (None where nothing was committed so), the entries
        committed (None where the plan entry went to the head apart) and those left unwritten: with ``behind``
        (a held turn's driver on Ray) the planner's entries and the plan entry are chained, folded and handed
        back for the driver to commit first with its next pass (``Assembled.unwritten``), not committed here."""
        landed = await self._landed(session)  # the commit sent as the pass began lands first
        if record is None and not pending:
            return None, landed, [], ()
        entries = list(pending)
        plan = None
        if record is not None:
            at = At(view.index.head, self._views.seen(session) or 0, time.time_ns() // 1000)
            plan = chained(at, session, [self.mapper.encode_payload(record)])[0]
            entries.append(plan)
        if behind:
            if plan is not None:
                self._views.wrote(plan.id, record)
                self._views.feed(session, [plan])
            return (plan.id if plan is not None else None), (entries[-1].id, entries[-1].seq + 1), [], tuple(entries)
        try:
            await self.ledger.append_chain_async(session, entries, behind)
        except BaseException as e:
            if pending:  # folded, not written: the next look reads what the ledger holds (the planner's too)
                self._views.forget(session)
                await self._planner_forgets(session, e)
            if pending or record is None or not isinstance(e, ChainMoved):
                raise
            # Another append reached the head since the view's last read (not a held turn's driver): at the head.
            plan_id = (await self.ledger.append_async(session, [record]))[0]
            self._views.wrote(plan_id, record)
            return plan_id, None, None, ()
        if plan is not None:
            self._views.wrote(plan.id, record)
            self._views.feed(session, [plan])
        return (plan.id if plan is not None else None), (entries[-1].id, entries[-1].seq + 1), entries, ()

    async def _planner_forgets(self, session: str, error: BaseException) -> None:
        """A commit failed with what the PlannerActor chained folded in its view too: it reads again (on Ray;
        in-process the view is this actor's own, forgotten already). Only on that failure's path."""
        if isinstance(self.planner, PlannerActor) or not isinstance(error, Exception):
            return
        with contextlib.suppress(Exception):  # the commit's error is the one to raise
            await self._ask_planner("forget", session)

    async def _take_chained(self, session: str, view: SessionView, pending: list[StoredEntry],
                            entries: Sequence[StoredEntry]) -> tuple[list[StoredEntry], SessionView]:
        """The planner's ``entries`` (a reset, a packet's activity and compaction), chained on the head it was
        handed, which ends this view (``pending`` included), folded in and added to what the step commits.
        In-process the view is the planner's own, already past them. Where it ends elsewhere (the planner's
        view moved on its own), what is pending is committed now and the view reads."""
        if not entries:
            return pending, view
        seen = self._views.seen(session)
        if seen == entries[0].seq:
            return [*pending, *entries], self._views.feed(session, entries)
        if seen == entries[-1].seq + 1 and view.index.head == entries[-1].id:
            return [*pending, *entries], view
        await self._commit(session, view, [*pending, *entries], None)  # ChainMoved where it cannot be so
        return [], self.view(session)

    def _with_written(self, session: str, view: SessionView, planned: StepPlan) -> SessionView:
        """The view with what the planner wrote for this step: folded from the entries it handed back, else
        (a packet writer of the caller's own, whose entries it does not hold) read."""
        if len(planned.entries) != len(planned.written):
            return self.view(session)
        with self._lock:
            fold_unseen(view, planned.entries)
        return view

    async def plan_ahead(self, session: str, profile: CapacityProfile, step: StepRequest, *, after: str,
                         directive: str) -> list[str]:
        """At the close of turn ``after``: the planner writes the packet summary the session's next request
        will need (``PlannerActor.plan_ahead``), with the stable prefix measured as that request's first step
        measures it. The entries written (none when nothing was due)."""
        self._rate = profile.tokens_per_char.value
        prefix = await self._prefix_tokens(step, self._counter(step))
        written: list[str] = await self._ask_planner("plan_ahead", session, profile, step, after=after,
                                                     directive=directive, prefix_tokens=prefix)
        return written

    @staticmethod
    async def _size(profile: CapacityProfile, request: ChatRequest, count: Count | None) -> int:
        """The request's tokens: exact when a counter is wired, else the plan's chars × tokens_per_char."""
        return await count(request) if count is not None else request_tokens(profile, request)

    async def _prefix_tokens(self, step: StepRequest, count: Count | None) -> int | None:
        """The stable prefix (system + tools) as the server counts it, measured once per prefix digest;
        None (the chars estimate) without a counter. Counted with one blank user message, the least a
        chat template renders, so the figure errs by a few tokens on the safe side."""
        counter = count or self.count_prefix
        if counter is None:
            return None
        key = (step.model, prefix_digest(step.system, step.tools))
        if key not in self._prefix:
            probe = ChatRequest(model=step.model, system=step.system, tools=step.tools,
                                messages=(Message.user(" "),), max_tokens=1)
            tokens = await counter(probe)
            # A counter that fell back to chars × tokens_per_char counted at today's rate, which each receipt
            # moves: kept, the prefix went stale (a plan 200 tokens short of its request at 32k, which then
            # outgrew its turn at every later step). None: the planner prices it at each plan's own rate.
            self._prefix[key] = tokens if _exact(counter) else None
        return self._prefix[key]

    def _project(self, view: SessionView, p: Plan, step: StepRequest) -> ChatRequest:
        request = project(view.index, p, model=step.model, infos=view.infos, system=step.system, tools=step.tools,
                          tail=step.tail, max_tokens=step.max_tokens, temperature=step.temperature)
        return self._with_cache(request, view, p, step)

    @staticmethod
    def _with_cache(request: ChatRequest, view: SessionView, p: Plan, step: StepRequest) -> ChatRequest:
        directive_index = _directive_index(request, view, p)
        hints = cache_breakpoints(len(request.messages), directive_index, step.session_key)
        return request.model_copy(update={"cache": hints, "temperature": step.temperature,
                                          "deferred_tools": step.deferred})


def _others(committed: Sequence[StoredEntry], written: Sequence[StoredEntry]) -> tuple[StoredEntry, ...]:
    """What a step's commit appended besides the driver's own ``written`` (the planner's, the plan entry)."""
    mine = {e.id for e in written}
    return tuple(e for e in committed if e.id not in mine)


def _exact(counter: Callable[[ChatRequest], Awaitable[int]]) -> bool:
    """Whether ``counter`` counts as the server does (``vak_context.providers.tokencount``: its ``exact``; a
    counter of the caller's own is taken at its word)."""
    return getattr(getattr(counter, "__self__", None), "exact", True) is not False


def _directive_index(request: ChatRequest, view: SessionView, p: Plan) -> int | None:
    """The index of the current turn's directive message: the number of messages the current turn
    does not account for. Resolved from the turn structure, never "the last user message"."""
    if p.current_ordinal is None:
        return None
    current = current_turn_messages(view.index, p, view.infos)  # as compacted: steps left out are not there
    # The current turn renders as its own messages at the end (its first message may merge into the
    # previous user message when roles repeat; then the directive is that merged message).
    at = len(request.messages) - len(current)
    return max(0, at)


