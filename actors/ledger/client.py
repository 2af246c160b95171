"""The one way callers reach a ledger, so they read and append alike whether its writer is here or on Ray.

The writer is a LedgerStore this process holds, or the folder's LedgerActor.

``LedgerClient`` implements ``vak_context.storage.contract.Ledger`` over either, so the Evidence, Planner,
Assembler and Probe actors, the turn loop's Ray wiring and the main job read and append the same
way whether the folder's single writer is a store they hold or the LedgerActor that owns it.
Through the actor, each call is one actor call with Ray's errors translated (``vak_context.actors.ledger.remote``)
and concurrent appends are coalesced (``vak_context.actors.append_coalescer``).

There is no default: a client never opens a folder by itself, since that would make a second writer
beside the folder's LedgerActor. Being the writer is an explicit choice: pass ``LedgerStore(root)``.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Collection, Sequence
from typing import TYPE_CHECKING, Any

from vak_context.actors.ledger.actor import append_since
from vak_context.errors import InvalidInput
from vak_context.events.envelope import At, LedgerLimits, Mapper, StoredEntry, runs
from vak_context.storage.contract import Ledger, LedgerStats, Payload, VerifyReport
from vak_context.storage.ledger import LedgerStore
from vak_context.storage.sessionsearch import SEARCH_LIMIT, Found, search_sessions

if TYPE_CHECKING:
    from vak_context.actors.ledger.remote import RemoteLedger


class LedgerClient:
    """The ledger contract over a store or the LedgerActor; through the actor it encodes payloads here, once.

    ``ledger``: the folder's LedgerActor handle (``vak_context.actors.factory.ledger_actor(root)``), or a
    LedgerStore this process holds as the folder's writer (used as is; the caller closes it)."""

    def __init__(self, root: str, ledger: LedgerStore | Any, *, coalesce: bool = True, max_in_flight: int = 2,
                 preencode: bool = True) -> None:
        if ledger is None:
            raise InvalidInput(
                f"no ledger given for {root}: pass the folder's LedgerActor handle "
                "(vak_context.actors.factory.ledger_actor(root)), or LedgerStore(root) to make this process the folder's "
                "one writer (only where no LedgerActor owns it)"
            )
        self.root = root
        self.store: LedgerStore | None = ledger if isinstance(ledger, LedgerStore) else None
        self._remote: RemoteLedger | None = None
        if self.store is not None:
            self._ledger: Ledger = self.store
        else:
            # Imported here, not at the top: only a client over an actor handle needs Ray, and an
            # in-process session (`vak chat` without Ray) should not pay for importing it.
            from vak_context.actors.ledger.remote import RemoteLedger

            self._remote = RemoteLedger(ledger, coalesce=coalesce, max_in_flight=max_in_flight)
            self._ledger = self._remote
        # Through the actor, payloads are validated and encoded here, once, and travel as
        # (kind, bytes): cheaper to pickle both ways than models, and the actor's one event loop,
        # which every caller shares, no longer spends its time encoding. No size limit here:
        # the actor checks its own. ``preencode=False`` sends the models (the bench compares).
        self._encoder = Mapper(LedgerLimits(max_payload_bytes=sys.maxsize)) if preencode and self._remote else None

    def _outgoing(self, payloads: Sequence[Payload]) -> Sequence[Any]:
        """What is sent to the actor: the payloads' (kind, bytes), or the payloads as given."""
        if self._encoder is None:
            return payloads
        encode = self._encoder.encode_payload
        return [encode(p) for p in payloads]

    # ------------------------------------------------------------------ the contract

    def append(
        self, session: str, payloads: Sequence[Payload], *, parent: str | None = None,
        blobs: Sequence[bytes | None] | None = None,
    ) -> list[str]:
        return self._ledger.append(session, self._outgoing(payloads), parent=parent, blobs=blobs)

    def append_since(self, session: str, payloads: Sequence[Payload],
                     since: int) -> tuple[list[str], list[StoredEntry]]:
        """``append`` at the head, and the session's entries from ``since`` on (these included), in one call:
        what a follower whose view ends at ``since`` folds in next (``LedgerActor.append_since``)."""
        if self.store is not None:
            return self.store.append(session, payloads), self.store.entries(session, since)
        assert self._remote is not None
        return self._remote.append_since(session, self._outgoing(payloads), since)

    def head(self, session: str) -> str | None:
        return self._ledger.head(session)

    def get(self, entry_id: str) -> StoredEntry:
        return self._ledger.get(entry_id)

    def entries(self, session: str, start: int = 0, stop: int | None = None) -> list[StoredEntry]:
        return self._ledger.entries(session, start, stop)

    def chain_to_root(self, entry_id: str) -> list[StoredEntry]:
        return self._ledger.chain_to_root(entry_id)

    def entries_of(self, session: str, kinds: Collection[str], start: int = 0) -> list[StoredEntry]:
        """The entries of ``kinds`` with ``seq >= start``, in seq order: over a store, only the batches that
        hold one are read (``LedgerStore.entries_of``); through the actor, the entries are filtered here."""
        if self.store is not None:
            return self.store.entries_of(session, kinds, start)
        return [e for e in self._ledger.entries(session, start) if e.kind in kinds]

    def sessions(self) -> list[str]:
        return self._ledger.sessions()

    def profile_entry(self, provider: str, model: str, quantisation: str = "") -> StoredEntry | None:
        return self._ledger.profile_entry(provider, model, quantisation)

    def verify(self, session: str | None = None) -> VerifyReport:
        return self._ledger.verify(session)

    def stats(self) -> LedgerStats:
        return self._ledger.stats()

    def checkpoint(self) -> None:
        self._ledger.checkpoint()

    # ------------------------------------------------------------------ for asyncio callers (actors)

    async def append_async(self, session: str, payloads: Sequence[Payload]) -> list[str]:
        """``append`` without blocking the event loop: many coroutines share one commit."""
        if self.store is not None:
            return await self.store.append_async(session, payloads)
        assert self._remote is not None
        return await self._remote.append_async(session, self._outgoing(payloads))

    async def append_since_async(self, session: str, payloads: Sequence[Payload],
                                 since: int, behind: bool = False) -> tuple[list[str], list[StoredEntry]]:
        """``append_since`` without blocking the event loop; ``behind``: written, not synced before this returns
        (the LedgerActor syncs it beside the caller's next work, ``LedgerActor.append_since``; over a store, the
        session's next commit syncs it)."""
        if self.store is not None:
            if behind:
                return await asyncio.to_thread(append_since, self.store, session, payloads, since, True)
            ids = await self.store.append_async(session, payloads)
            return ids, await asyncio.to_thread(self.store.entries, session, since)
        assert self._remote is not None
        return await self._remote.append_since_async(session, self._outgoing(payloads), since, behind)

    def append_chain(self, session: str, entries: Sequence[StoredEntry]) -> None:
        """``append_chain_async`` for a thread caller."""
        requests = _chain_requests(entries)
        if not requests:
            return
        if self.store is not None:
            answers = self.store.append_many(session, requests)
        else:
            assert self._remote is not None
            answers = self._remote.append_chain(session, requests)
        _check_chained(entries, answers)

    async def append_chain_async(self, session: str, entries: Sequence[StoredEntry], behind: bool = False) -> None:
        """Append ``entries`` a caller chained itself (``vak_context.events.envelope.chained``, one run per
        time stamp) in one call and one commit, where they say the session's head is: durable once this
        returns, with the ids they carry (``ChainMoved`` when another append reached the head first).
        ``behind``: through the LedgerActor, written and synced beside the caller's next work
        (``LedgerActor.append_chain``); a store held here syncs as its holds say."""
        await self.append_chain_sent(session, entries, behind)

    def append_chain_sent(self, session: str, entries: Sequence[StoredEntry], behind: bool = False) -> Awaitable[None]:
        """``append_chain_async`` sent before this returns (through the LedgerActor: the call submitted; over a
        store: a task in a worker thread), so the caller's own work runs beside it; await the answer before
        anything else appends to the session (its errors, ``ChainMoved`` among them, are raised there)."""
        requests = _chain_requests(entries)
        if self.store is not None or not requests:
            return asyncio.ensure_future(self._append_chain_here(session, entries, requests))
        assert self._remote is not None
        sent = self._remote.append_chain_sent(session, requests, behind)

        async def answered() -> None:
            _check_chained(entries, await sent)
        return asyncio.ensure_future(answered())

    async def _append_chain_here(self, session: str, entries: Sequence[StoredEntry],
                                 requests: list[tuple[list[Any], list[bytes | None], At]]) -> None:
        if requests:
            assert self.store is not None
            _check_chained(entries, await asyncio.to_thread(self.store.append_many, session, requests))

    async def session_search_async(self, session: str, query: str, scope: str | None = None,
                                   limit: int = SEARCH_LIMIT) -> Found:
        """``session_search`` where the session's writer is: this process's store (in a worker thread), or
        the LedgerActor (``storage/sessionsearch.py``)."""
        if self.store is not None:
            return await asyncio.to_thread(search_sessions, self.store, session, query, scope, limit)
        assert self._remote is not None
        found: Found = await self._remote.session_search_async(session, query, scope, limit)
        return found

    async def entries_async(self, session: str, start: int = 0, stop: int | None = None) -> list[StoredEntry]:
        if self.store is not None:
            return await asyncio.to_thread(self.store.entries, session, start, stop)
        assert self._remote is not None
        return await self._remote.entries_async(session, start, stop)

    async def profile_entry_async(self, provider: str, model: str, quantisation: str = "") -> StoredEntry | None:
        """``profile_entry`` off the event loop: in a worker thread over a store, one actor call on Ray."""
        if self.store is not None:
            return await asyncio.to_thread(self.store.profile_entry, provider, model, quantisation)
        assert self._remote is not None
        return await self._remote.profile_entry_async(provider, model, quantisation)


def _chain_requests(entries: Sequence[StoredEntry]) -> list[tuple[list[Any], list[bytes | None], At]]:
    """Chained entries as the writer's requests: one per run of one time stamp, each at its ``At``."""
    return [([(e.kind, e.payload) for e in run], [e.blob for e in run], at) for at, run in runs(entries)]


def _check_chained(entries: Sequence[StoredEntry], answers: Sequence[list[str] | BaseException]) -> None:
    """Each run's error raised; the ids written are the ones chained (the same bytes, parent, seq and time)."""
    for (_, run), answer in zip(runs(entries), answers, strict=True):
        if isinstance(answer, BaseException):
            raise answer
        if answer != [e.id for e in run]:
            raise InvalidInput(f"the ledger wrote ids {answer} for entries chained as {[e.id for e in run]}; "
                               "the caller's and the writer's encodings differ (run one vak-context version)")
