"""The turn loop's services on Ray, so the same loop runs against a cluster's actors as against plain objects.

The same calls as ``vak_context.actors.local_services.InProcessServices``, through the folder's actors:
the LedgerActor owns the folder, the PlannerActor plans each turn (and writes its packet summaries), the
AssemblerActor projects each step, the EvidenceActor stores results and closes turns, and the ProbeActor,
when given, probes the bound model between turns. ``ray_services`` wires all of them for a bound model.

Wiring only: the loop's code is the same either way. Ray's errors are translated at this edge into
``ActorError``, which says which actor failed and what to do.

A step is one pass (issue 37): the driver's ``assemble`` is its one call to the AssemblerActor, which asks the
PlannerActor only when the step policy plans, and commits in one append what the turn wrote since the last
pass, sent as the pass begins so it lands beside the plan and the projection; the plan entry (with what the
planner chained for it) comes back chained, not written (``Assembled.unwritten``), and goes first in the next
commit (the next pass's or the close's). An entry's id is a hash of its bytes, its parent, seq and time
(``vak_context.events.envelope``), and while the engine's loop holds a turn nothing else appends to the session
between the driver's calls, so the driver chains what the step writes (the assistant step, its receipt and
profile, each result's evidence body and the tool result naming it) on the head the last pass handed back
(``Assembled.tip``): it knows their ids without a call, and the next pass commits them (the writer appends
them only there, ``ChainMoved`` otherwise). The step's calls on Ray: the pass, the AssemblerActor's commit,
and the PlannerActor's when it plans (``tests/ray/test_step_crossings_ray.py`` counts them). The pass hands
back only the request's messages after those it shares with the last request (``Assembled.kept``; the
history a turn does not change crosses once). At the turn's edges (issue 37): the close is the
EvidenceActor's one call (what the turn chained since its last pass committed with the card, the card handed
back for the turn's result, with the stated items in force), the stated items the turn began with stand for
its close while nothing stating one was written, and those the last close handed back for the next turn's start
while nothing written since states one (the directive's append hands back what was); ``turn_finished``'s calls
are sent and not waited on, and the ProbeActor's answer says until when the bound model's profile stays fresh
(no probe can start before then: the next turn's start skips ``turn_starting``); the plan made ahead asks the
PlannerActor directly. The driver keeps the session's entries from where the EvidenceActor's index ended at the
last close to the head (what the ledger handed back, what it chained and a pass committed, what each pass appended
besides, ``Assembled.appended``, and the card the close chained): the close is handed them and the plan made ahead
the closed turn's, so neither reads the ledger (from a loop's third turn on; anything appended that the driver did
not see, a recall's entries or a packet written apart, makes the next close read).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Awaitable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from vak_context.actors.evidence import evidence_body, stored_answer, tool_result
from vak_context.actors.factory import (
    assembler_actor,
    evidence_actor,
    ledger_actor,
    planner_actor,
    probe_actor,
)
from vak_context.actors.ledger.client import LedgerClient
from vak_context.actors.probe import ProbeRequest, probe_request_for
from vak_context.actors.ray_errors import map_ray_errors
from vak_context.agent.endpoint import EndpointSpec
from vak_context.agent.probe import ProbeSettings
from vak_context.agent.steps import Assembled, StepRequest
from vak_context.agent.turnrules import prior_turns_of
from vak_context.context.capacity.profile import CapacityProfile, ProfileKey, from_record
from vak_context.context.history.turns import WITHDRAWN, states
from vak_context.context.request.assemble import prefix_digest
from vak_context.context.request.messages import Message
from vak_context.context.rules.drift import PriorTurn
from vak_context.context.stated.items import StatedItem
from vak_context.errors import UnknownSession
from vak_context.events.envelope import At, LedgerLimits, Mapper, StoredEntry, chained
from vak_context.events.payloads import CapacityProfileRecord
from vak_context.storage.sessionsearch import Found

T = TypeVar("T")


QUIET = "probe turn_finished"  # the answer ``_collect`` keeps: ``ProbeActor.turn_finished_quiet``'s


async def _call(what: str, ref: Awaitable[T]) -> T:
    with map_ray_errors(what):
        return await ref


class RayServices:
    """The turn loop's services as calls to the folder's actors (the Ray form of ``InProcessServices``).

    ``root``: the ledger folder; its actors are got or created by name (one writer per folder).
    ``index_at_close``: the LedgerActor catches the session's search index up in the background when a
    turn closes (False: only at a ``session_search``, docs/SEARCH.md)."""

    def __init__(self, root: str | os.PathLike[str], session: str, *, probe: Any = None,
                 probe_request: ProbeRequest | None = None, index_at_close: bool = True) -> None:
        self.session = session
        self.index_at_close = index_at_close
        handle = self.ledger_handle = ledger_actor(root)
        self.ledger = LedgerClient(os.fspath(root), handle, coalesce=False)  # appends come from one event loop
        self.evidence = evidence_actor(root, ledger=handle)
        self.planner = planner_actor(root, ledger=handle)  # the assembler's planner (also for explain)
        self.assembler = assembler_actor(root, ledger=handle)
        self.probe, self.probe_request = probe, probe_request
        # Where the AssemblerActor's view of the session ends (``Assembled.seen``), and what the ledger
        # handed back from there with this loop's last append: passed with the next ``assemble`` so the
        # assembler folds them in instead of reading the ledger on the step's path. None once another
        # actor may have appended after that append (the assembler then reads).
        self._seen: int | None = None
        self._handed: list[StoredEntry] | None = None
        # A step is one pass: while the engine's loop holds a turn, the session's head after the last pass
        # (``Assembled.tip``) is known here, and nothing else appends to the session until this object calls
        # another actor; so what the turn writes is chained here (ids known without a call, ``At``) and kept
        # in ``_written`` for the next pass, which commits it (or for ``_settle``, before any other call).
        self._tip: tuple[str | None, int] | None = None
        self._written: list[StoredEntry] = []
        self._encoder = Mapper(LedgerLimits(max_payload_bytes=sys.maxsize))  # the LedgerActor checks sizes
        self._held = False  # only while the engine's loop runs a turn (``hold``): else each call is made in line
        # What ``turn_finished`` sent and nothing waits on (the index catch-up's queueing, the probe's idle
        # start): answered while the turn's close goes on (its packet summary written ahead), collected at
        # ``release`` or, for a driver that does not hold, at the next turn's start.
        self._behind: list[tuple[str, Any]] = []
        self._card: tuple[str, dict[str, Any]] | None = None  # the card the last close_turn wrote
        # The stated items the EvidenceActor last answered, while the turn is held and no entry that states or
        # withdraws one was written since (only this loop writes the session then): the turn's close asks
        # again for what its directive states (``_extract``), and gets them without a call.
        self._stated: tuple[StatedItem, ...] | None = None
        # The stable prefix's tokens per (model, prefix digest) as the AssemblerActor sized them for a pass
        # (``Assembled.prefix_tokens``): what ``plan_ahead`` hands the PlannerActor itself.
        self._prefix: dict[tuple[str, str], int | None] = {}
        # The request the AssemblerActor handed back last (its number, its messages): the next pass hands back
        # only the messages after those the two share (``Assembled.kept``).
        self._sent: tuple[int | None, tuple[Message, ...]] = (None, ())
        # What the last ``turn_finished`` learnt from the ProbeActor: the bound model's profile record and
        # until when (the actor's clock, time.time) no probe of it can start: the next turn's start asks nothing.
        self._quiet: tuple[CapacityProfileRecord, float] | None = None
        # The stated items in force at the last close, and how many entries the index they came from held
        # (``_after_close``).
        self._closed: tuple[tuple[StatedItem, ...], int | None] | None = None
        # The session's entries from where the EvidenceActor's index ended at the last close (``_log_from``) to the
        # head, as this loop knows them: what the ledger handed back, what it chained and a pass committed, what
        # each pass appended besides (``Assembled.appended``). The turn's close is handed them, and the plan made
        # ahead the turn's (``_turn``), instead of each reading the ledger; None where something was appended that
        # this loop did not see (a recall's or presentation's entries, a packet written apart).
        self._log: list[StoredEntry] | None = None
        self._log_from = 0
        self._turn: list[StoredEntry] | None = None

    def _logged(self, entries: Sequence[StoredEntry] | None) -> None:
        """``_log`` extended with ``entries`` (the session's, in order, from anywhere up to the log's end on): an
        entry that is not the one logged at its place, a gap, or None (not known) forgets it."""
        log = self._log
        if log is None:
            return
        if entries is None:
            self._log = None
            return
        end = self._log_from + len(log)
        for e in entries:
            if e.seq < end:
                if e.seq < self._log_from or log[e.seq - self._log_from].id == e.id:
                    continue
            elif e.seq == end:
                log.append(e)
                end += 1
                continue
            self._log = None
            return

    def _log_at(self, seq: int | None) -> list[StoredEntry] | None:
        """The log where it ends at ``seq`` (where what follows it begins), else None."""
        log = self._log
        return log if log is not None and seq is not None and self._log_from + len(log) == seq else None

    def _chain(self, payloads: Sequence[Any], blobs: Sequence[bytes | None] | None = None) -> list[StoredEntry] | None:
        """While held with the head known: ``payloads`` as the entries they become, chained on it (their ids
        are the ids the ledger writes) and kept for the next pass to commit; None where not so."""
        if any(states(p) for p in payloads):
            self._stated = None  # the stated items in force may change: asked again
        if not self._held or self._tip is None:
            return None
        at = At(self._tip[0], self._tip[1], time.time_ns() // 1000)
        entries = chained(at, self.session, [self._encoder.encode_payload(p) for p in payloads], blobs)
        if entries:
            self._written += entries
            self._tip = (entries[-1].id, entries[-1].seq + 1)
        return entries

    async def append(self, payloads: Sequence[Any]) -> list[str]:
        kept = self._chain(payloads)
        if kept is not None:
            return [e.id for e in kept]
        await self._settle()
        if not payloads:
            return []
        if self._seen is None:
            self._log = None
            return await self.ledger.append_async(self.session, payloads)
        # Held (a turn's directive): written, and synced on the LedgerActor's sync thread beside the turn's first
        # pass, which commits nothing of its own (one fsync a model call, as in-process).
        ids, handed = await self.ledger.append_since_async(self.session, payloads, self._seen, behind=self._held)
        self._hand(handed)
        return ids

    # The engine's loop (``TurnLoop.run``) holds the services for a turn, as in-process (``InProcessServices.hold``):
    # nothing the turn writes is acknowledged before its card; the pass writes it before the next model call, its
    # fsync running beside that call on the LedgerActor's sync thread (``append_chain(behind=True)``, one fsync a
    # model call, as in-process), and the card's commit is durable before the turn's result. The caller's loop
    # does not hold them: its caller is handed each reply and takes each result, so every call is made in line.

    async def hold(self) -> None:
        """Until ``release``: what the turn writes is chained here and committed by the next pass."""
        self._held = True

    async def commit(self) -> None:
        """What was chained here and no pass committed is committed (none: no call); a pass's own commit is
        synced by the LedgerActor beside the model call."""
        await self._settle()

    async def release(self) -> None:
        self._held = False
        self._stated = None
        await self._settle()
        self._tip = None
        await self._collect()

    async def _collect(self) -> None:
        """The answers of the calls ``turn_finished`` sent (their errors raised here, as Ray's errors)."""
        behind, self._behind = self._behind, []
        for what, ref in behind:
            answer = await _call(what, ref)
            if what == QUIET and answer[1] is not None and answer[2] is not None:
                self._quiet = (answer[1], answer[2])

    async def _settle(self) -> None:
        """Before a call outside the step's pass (it reads what the step wrote, or writes after it): what was
        chained here is committed (one call), and handed to the assembler with its next pass."""
        if not self._written:
            return
        written, self._written = self._written, []
        try:
            await self.ledger.append_chain_async(self.session, written)
        except BaseException:
            self._log = None
            raise
        self._logged(written)
        if self._handed is not None and self._handed and self._handed[-1].seq + 1 == written[0].seq:
            self._handed = [*self._handed, *written]
        elif self._seen is not None and written[0].seq <= self._seen <= written[-1].seq + 1:
            self._handed = written[self._seen - written[0].seq:]  # the first may be the pass's, folded already

    def _hand(self, handed: list[StoredEntry] | None) -> None:
        """Keep what an append handed back (the head's entries from the assembler's view on)."""
        self._logged(handed)
        self._handed = handed
        if handed and self._held:
            self._tip = (handed[-1].id, handed[-1].seq + 1)

    def _elsewhere(self) -> None:
        """Another actor may append now: the head is not known here until the next pass says it."""
        self._handed = None
        self._tip = None
        self._stated = None
        self._log = None

    async def assemble(self, profile: CapacityProfile, step: StepRequest) -> Assembled:
        """The step's one call: the AssemblerActor folds in what the turn wrote since the last pass (chained
        here) or what the ledger handed back, plans through the PlannerActor when the step policy asks, and
        commits the turn's entries beside it; held, the plan entry comes back unwritten, kept in ``_written`` for
        the next commit (``Assembled.tip``: the head after it)."""
        written, self._written = self._written, []
        handed, self._handed = self._handed, None
        try:
            assembled: Assembled = await _call("assemble", self.assembler.assemble.remote(
                self.session, profile, step, handed, written=written, delta=True, have=self._sent[0],
                behind=self._held))
        except BaseException:
            self._tip = None  # the assembler committed what it was handed (a crashed one: the turn fails)
            self._log = None
            raise
        self._logged(written)
        self._logged(assembled.appended)
        unwritten = list(assembled.unwritten)  # the planner's entries and the plan entry: the next pass commits them
        if assembled.tip is not None and self._log_at(assembled.tip[1] - len(unwritten)) is None:
            self._log = None  # the log does not end at the head the pass left
        # the messages it shares with the last request are held here (their objects: encoded and sized by
        # identity); only the rest crossed
        assembled = assembled.whole(self._sent[1])
        tools = assembled.request.tools
        if tools is not step.tools and tools == step.tools:  # the specs sent, kept: what is computed of them is too
            assembled = replace(assembled, request=assembled.request.model_copy(update={"tools": step.tools}))
        self._sent = (assembled.sent, assembled.request.messages)
        self._seen = assembled.seen
        self._tip = assembled.tip if self._held else None
        self._written = unwritten if self._held else []
        if assembled.prefix_sized:
            self._prefix[(step.model, assembled.prefix_digest)] = assembled.prefix_tokens
        return assembled

    async def store_result(self, tool_use_id: str, tool_name: str, body: str, is_error: bool) -> dict[str, Any]:
        """While held with the head known: the evidence body and the tool result naming it chained here (the
        EvidenceActor's entries, made as it makes them), committed by the next pass; else stored in line by
        the EvidenceActor."""
        meta, blob, text = evidence_body(tool_use_id, tool_name, body, is_error=is_error)
        stored = self._chain([meta], [blob])
        if stored is not None:
            result = tool_result(meta, text, stored[0].id)
            return stored_answer(result, self._chain([result])[0].id)  # type: ignore[index]  # held: chained
        await self._settle()
        answer: dict[str, Any] = await _call("store_result", self.evidence.store_result.remote(
            self.session, tool_use_id, tool_name, body, is_error=is_error, since=self._seen))
        self._hand(answer.pop("entries", None))
        return answer

    async def recall(self, args: dict[str, Any], tool_use_id: str) -> dict[str, Any]:
        await self._settle()
        self._elsewhere()
        return await _call("recall", self.evidence.recall.remote(self.session, args, tool_use_id))

    async def session_search(self, query: str, scope: str | None = None) -> Found:
        """``session_search`` run by the LedgerActor, where the session's writer lock is."""
        await self._settle()
        return await self.ledger.session_search_async(self.session, query, scope)

    async def present(self, step_id: str) -> list[dict[str, Any]]:
        await self._settle()
        self._elsewhere()
        return await _call("present", self.evidence.present.remote(self.session, step_id))

    async def prior_turns(self) -> list[PriorTurn]:
        """The session's earlier turns as the turn rules compare against them, read through the LedgerActor
        (none for a session not written yet: the first turn reads them before its directive is appended)."""
        await self._settle()
        try:
            entries = await self.ledger.entries_async(self.session)
        except UnknownSession:
            return []
        return prior_turns_of(entries)

    async def stated(self) -> tuple[StatedItem, ...]:
        """The stated items in force now (docs/STATE.md), from the EvidenceActor's index of the session."""
        if self._stated is not None and self._held and self._tip is not None:
            return self._stated  # nothing that states or withdraws an item was written since the last answer
        closed = self._after_close()
        if closed is not None and self._held and self._tip is not None:
            self._stated = closed
            return closed
        await self._settle()
        stated = tuple(await _call("stated", self.evidence.stated.remote(self.session)))
        self._stated = stated if self._held and self._tip is not None else None
        return stated

    def _after_close(self) -> tuple[StatedItem, ...] | None:
        """The stated items the last close handed back, where what the ledger handed back since (``_handed``, up to
        the head) holds every entry from where the EvidenceActor's index ended then, and none of them states or
        withdraws an item (the model pass's items, a caller's ``work_contract``); else None (asked)."""
        closed, self._closed = self._closed, None
        handed = self._handed or []
        if closed is None or closed[1] is None or not handed or handed[0].seq > closed[1]:
            return None
        for e in handed:
            if e.seq >= closed[1] and (e.kind == "work_contract" or (e.kind == "activity" and getattr(
                    self._encoder.payload_of(e), "activity", None) == WITHDRAWN)):
                return None
        return closed[0]

    async def close_turn(self, outcome: str) -> str:
        """The EvidenceActor writes the card, committing what the turn wrote since its last pass with it (in
        one append, before the card: no call of its own here); it hands the card back as its ``card`` would,
        kept for ``closed_card`` (the public API's turn result), so reporting the turn costs no second call."""
        written, self._written = self._written, []  # committed with the card, before it, in its one append
        # what came before them, handed to the EvidenceActor's index where known to end where they begin
        log = self._log_at(written[0].seq if written else (self._tip[1] if self._tip is not None else None))
        self._elsewhere()
        card_id, card, stated, seen, entry = await _call("close_turn", self.evidence.close_turn_card_stated.remote(
            self.session, outcome, written=written, entries=log))
        self._card = (card_id, card) if card is not None else None
        self._closed = (tuple(stated), seen)  # the next turn's stated items, if nothing states one before it
        # The turn's entries for the plan made ahead, and the log from where the index ends now (the card's head).
        chained = entry is not None and written and entry.seq == written[-1].seq + 1
        self._turn = [*log, *written, entry] if log is not None and chained else None
        if chained and seen is not None and entry.seq <= seen <= entry.seq + 1:
            self._log, self._log_from = ([entry] if seen == entry.seq else []), seen
        return str(card_id)

    def closed_card(self, card_id: str) -> dict[str, Any] | None:
        """The card ``close_turn`` wrote, as ``EvidenceActor.card`` gives it, when ``card_id`` is that card."""
        return self._card[1] if self._card is not None and self._card[0] == card_id else None

    async def turn_started(self) -> CapacityProfile | None:
        """Cancel the bound model's in-flight probe; the newest profile the ProbeActor holds for it (the
        loop binds it when it is newer than its own). Without a call while a turn's ``turn_finished`` found the
        profile fresh and it still is (``ProbeActor.turn_finished_quiet``): no probe can have started since, so
        there is none to cancel, and the profile held is the one it handed back."""
        await self._collect()
        if self.probe is None or self.probe_request is None:
            return None
        if self._quiet is not None and time.time() < self._quiet[1]:
            return from_record(self._quiet[0])
        self._quiet = None
        record = await _call("probe turn_starting", self.probe.turn_starting.remote(self.probe_request.key))
        return from_record(record) if record is not None else None

    async def plan_ahead(self, profile: CapacityProfile, step: StepRequest, after: str, directive: str) -> list[str]:
        """At turn ``after``'s close: the PlannerActor, which holds the summariser, writes the packet summary
        the next request will need, handed the stable prefix's size as the AssemblerActor sized it for the
        turn's passes (asked through the AssemblerActor, which measures it, where no pass has)."""
        await self._settle()
        log, turn, self._turn = (self._log, self._log_from), self._turn, None
        self._elsewhere()
        key = (step.model, prefix_digest(step.system, step.tools))
        if key in self._prefix:  # sized by a pass already: the PlannerActor is asked without the assembler's hop
            # handed the closed turn's entries (its view ends inside them): it reads none
            written: list[str] = await _call("plan_ahead", self.planner.plan_ahead.remote(
                self.session, profile, step, after=after, directive=directive, prefix_tokens=self._prefix[key],
                entries=turn))
        else:
            written = await _call("plan_ahead", self.assembler.plan_ahead.remote(
                self.session, profile, step, after=after, directive=directive))
        if not written:  # nothing appended: the log still ends at the head
            self._log, self._log_from = log
        return written

    async def turn_finished(self) -> None:
        """The turn closed: the LedgerActor queues a catch-up of the session's search index on its store's
        background thread (the call returns at once, leaving the actor's threads to appends), and the
        probe may run in the idle time. Both are sent, not waited on: nothing here needs their answers, so
        they cross while the turn's close goes on (``release`` or the next turn's start collects them). While the
        last answer said the bound model's profile stays fresh, the probe is not asked: it would start nothing."""
        await self._settle()
        if self.index_at_close:
            self._behind.append(("ledger index_later", self.ledger_handle.index_later.remote(self.session)))
        if self.probe is not None and self.probe_request is not None:
            if self._quiet is not None and time.time() < self._quiet[1]:
                return  # fresh till then: no finished turn starts a probe of it (``turn_finished_quiet``)
            self._quiet = None
            self._behind.append((QUIET, self.probe.turn_finished_quiet.remote(self.probe_request)))


def ray_services(root: str | os.PathLike[str], session: str, endpoint: EndpointSpec, key: ProfileKey, *,
                 probe: bool = True, local: bool | None = None, settings: ProbeSettings | None = None,
                 probe_session: str = "capacity", config: Any = None,
                 index_at_close: bool = True) -> tuple[RayServices, ProbeRequest | None]:
    """The turn services for a session bound to ``endpoint`` on the Ray cluster this process is connected
    to: every role its actor (the folder's Ledger, Planner, Assembler, Evidence and, with ``probe``, Probe
    actors, got or created by name), and the probe target built from the bound model. Pass ``endpoint`` as
    the loop's ``TurnConfig.endpoint`` too: the actors build the counter and summariser from it.

    Provider keys are read from the environment inside the actors: on a connected cluster, the workers
    need the key in their environment."""
    if not probe:
        return RayServices(root, session, index_at_close=index_at_close), None
    target = probe_request_for(endpoint, key, local=local, settings=settings)
    actor = probe_actor(root, session=probe_session, config=config)
    return RayServices(root, session, probe=actor, probe_request=target, index_at_close=index_at_close), target
