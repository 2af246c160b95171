"""The turn loop's services in this process, so a turn runs without Ray (``vak chat``, tests, benches).

The same calls as ``vak_context.actors.turn_services.RayServices``: the loop's code is one either way.

The actor classes are used as plain classes sharing one LedgerStore, the folder's writer: the
PlannerActor plans (and holds the summariser), the AssemblerActor projects, the EvidenceActor stores
results and closes turns, and the ProbeActor, when given, probes the bound model between turns.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from vak_context.actors.assembler import AssemblerActor
from vak_context.actors.evidence import EvidenceActor, evidence_body, stored_answer, tool_result
from vak_context.actors.planner import PlannerActor
from vak_context.actors.probe import ProbeActor, ProbeRequest
from vak_context.agent.steps import Assembled, StepRequest
from vak_context.agent.turnrules import PRIOR_KINDS, prior_turns_of
from vak_context.context.capacity.profile import CapacityProfile, from_record
from vak_context.context.history.turns import states
from vak_context.context.rules.drift import PriorTurn
from vak_context.context.stated.items import StatedItem
from vak_context.errors import UnknownSession
from vak_context.events.payloads import ToolResult
from vak_context.storage.ledger import LedgerStore
from vak_context.storage.sessionsearch import Found, search_sessions


class InProcessServices:
    """The turn loop's services without Ray: the actor classes as plain objects sharing one LedgerStore.

    The store is the folder's writer; ``append`` runs it in a thread so the loop's event loop never waits
    on a sync (a held session's append, which syncs nothing, runs on the loop when no commit is in flight). ``planner`` is the assembler's planner when no assembler is given (None: a plain one).
    ``index_at_close``: catch the session's search index up in the background when a turn closes
    (False: only at a ``session_search``, docs/SEARCH.md)."""

    def __init__(self, store: LedgerStore, session: str, *, assembler: AssemblerActor | None = None,
                 evidence: EvidenceActor | None = None, probe: ProbeActor | None = None,
                 probe_request: ProbeRequest | None = None, planner: PlannerActor | None = None,
                 index_at_close: bool = True) -> None:
        root = str(store.root)
        self.store, self.session = store, session
        self.assembler = assembler or AssemblerActor(root, store, planner=planner)
        self.planner = self.assembler.planner
        self.evidence = evidence or EvidenceActor(root, store)
        self.probe, self.probe_request = probe, probe_request
        self.index_at_close = index_at_close
        self._held = False
        # The stated items the EvidenceActor last answered, while the turn is held and nothing that states or
        # withdraws one went through ``append`` since (only this loop writes such entries during a turn; the model
        # pass writes them after the close, and the release forgets them): the turn's close asks again for what
        # its directive states, and gets them without a thread hand-off (~0.25 ms a turn), as on Ray.
        self._stated: tuple[StatedItem, ...] | None = None
        self._card: tuple[str, dict[str, Any]] | None = None  # the card the last close_turn wrote

    def _writing(self, payloads: Sequence[Any]) -> None:
        if self._stated is not None and any(states(p) for p in payloads):
            self._stated = None  # the stated items in force may change: asked again

    async def append(self, payloads: Sequence[Any]) -> list[str]:
        self._writing(payloads)
        # Held (a turn: written behind, no sync), with no commit in flight: on the loop, no thread hand-off.
        held = self.store.append_held(self.session, list(payloads))
        return held if held is not None else await asyncio.to_thread(self.store.append, self.session, list(payloads))

    async def append_linked(self, payloads: Sequence[Any], then: Callable[[list[str]], Sequence[Any]]) -> list[str]:
        """``payloads`` and then ``then(their ids)`` as one chain, one append (a step and its receipt)."""
        self._writing(payloads)  # ``then``'s are the step's receipt and profile
        held = self.store.append_held(self.session, list(payloads), then)
        return held if held is not None else await asyncio.to_thread(
            lambda: self.store.append(self.session, list(payloads), then=then))

    # One durable commit per model call (the engine's loop, ``TurnLoop.run``): while a turn runs, the
    # session's appends, this object's and the actors', are written behind (``LedgerStore.hold``: on disk
    # and readable, not yet synced); ``commit`` syncs them before the turn's next model call, and the
    # card's close syncs them before the turn is acknowledged.

    async def hold(self) -> None:
        """Write the session's appends behind until ``release``."""
        if not self.store.hold_open(self.session):  # on the loop where the session is open (no disk read)
            await asyncio.to_thread(self.store.hold, self.session)
        self._held = True

    async def commit(self) -> None:
        """Make everything the turn wrote so far durable: one fsync, or nothing when nothing is behind."""
        await asyncio.to_thread(self.store.sync, self.session)

    async def release(self) -> None:
        """End the hold; what was written behind since the card (a packet summary written ahead) is made
        durable by the session's next commit, or the store's close: nothing acknowledged waits on it."""
        self._held, self._stated = False, None
        self.store.release(self.session, sync=False)

    async def assemble(self, profile: CapacityProfile, step: StepRequest) -> Assembled:
        with self.store.foreground.hold():  # the store's background catch-ups give way (storage/catchup.py)
            return await self.assembler.assemble(self.session, profile, step)

    async def store_result(self, tool_use_id: str, tool_name: str, body: str, is_error: bool) -> dict[str, Any]:
        """The evidence body and the tool result naming it, in one append: on the loop where the turn is held and
        nothing waits (``append_held``: the EvidenceActor's entries, made as it makes them), else by the
        EvidenceActor in a worker thread."""
        meta, blob, text = evidence_body(tool_use_id, tool_name, body, is_error=is_error)
        made: list[ToolResult] = []

        def naming(ids: list[str]) -> list[ToolResult]:
            made.append(tool_result(meta, text, ids[0]))
            return made

        held = self.store.append_held(self.session, [meta], naming, blobs=[blob])
        if held is not None:
            return stored_answer(made[0], held[1])
        return await asyncio.to_thread(self.evidence.store_result, self.session, tool_use_id, tool_name, body,
                                       is_error=is_error)

    async def recall(self, args: dict[str, Any], tool_use_id: str) -> dict[str, Any]:
        return await asyncio.to_thread(self.evidence.recall, self.session, args, tool_use_id)

    async def session_search(self, query: str, scope: str | None = None) -> Found:
        """``session_search`` over the store this process holds, the session's writer (in a worker thread)."""
        return await asyncio.to_thread(search_sessions, self.store, self.session, query, scope)

    async def present(self, step_id: str) -> list[dict[str, Any]]:
        return await asyncio.to_thread(self.evidence.present, self.session, step_id)

    async def prior_turns(self) -> list[PriorTurn]:
        """The session's earlier turns as the turn rules compare against them, read from the ledger (none
        for a session not written yet: the first turn reads them before its directive is appended). Only the
        batches holding a directive, presentation or card are read and decoded (``entries_of``), not every
        entry: at 1,000 turns every entry took ~1.7 s of CPU on the first request after a restart, these ~0.2 s."""
        try:
            return await asyncio.to_thread(lambda: prior_turns_of(self.store.entries_of(self.session, PRIOR_KINDS)))
        except UnknownSession:
            return []

    async def stated(self) -> tuple[StatedItem, ...]:
        """The stated items in force now (docs/STATE.md), read from the session's index in a worker thread."""
        if self._held and self._stated is not None:
            return self._stated
        stated = await asyncio.to_thread(self.evidence.stated, self.session)
        self._stated = stated if self._held else None
        return stated

    async def close_turn(self, outcome: str) -> str:
        """The turn's card, durable (with everything the turn wrote behind) before it is returned."""
        def close() -> tuple[str, dict[str, Any] | None]:
            closed = self.evidence.close_turn_card(self.session, None, outcome)  # type: ignore[arg-type]
            self.store.sync(self.session)
            return closed

        card_id, card = await asyncio.to_thread(close)
        self._card = (card_id, card) if card is not None else None
        return card_id

    def closed_card(self, card_id: str) -> dict[str, Any] | None:
        """The card ``close_turn`` wrote, as ``EvidenceActor.card`` gives it, when ``card_id`` is that card (the
        public API's turn result, without looking the card up again)."""
        return self._card[1] if self._card is not None and self._card[0] == card_id else None

    async def turn_started(self) -> CapacityProfile | None:
        """Cancel the bound model's in-flight probe; the newest profile the probe holds for it (the loop
        binds it when it is newer than its own)."""
        if self.probe is None or self.probe_request is None:
            return None
        record = await self.probe.turn_starting(self.probe_request.key)
        return from_record(record) if record is not None else None

    async def plan_ahead(self, profile: CapacityProfile, step: StepRequest, after: str, directive: str) -> list[str]:
        """At turn ``after``'s close: the planner (this process's, holding the summariser) writes the packet
        summary the next request will need (``AssemblerActor.plan_ahead``)."""
        return await self.assembler.plan_ahead(self.session, profile, step, after=after, directive=directive)

    async def turn_finished(self) -> None:
        """The turn closed: the session's search index is caught up in the store's background thread
        (``storage/catchup.py``; returns at once), and the probe may run in the idle time."""
        if self.index_at_close:
            index_later = getattr(self.store, "index_later", None)  # a LedgerStore's (not a test double's)
            if index_later is not None:
                index_later(self.session)
        if self.probe is not None and self.probe_request is not None:
            await self.probe.turn_finished(self.probe_request)
