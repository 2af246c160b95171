"""LedgerActor: the one writer of a ledger folder, as a plain class (wrapped by actors.factory).

It offers the calls of ``storage.contract.Ledger`` as coroutines, with the same result types
(``VerifyReport``, ``LedgerStats``); callers reach it through ``actors.ledger_client.LedgerClient``."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from typing import Any

from events.envelope import StoredEntry
from storage.contract import LedgerStats, Payload, VerifyReport
from storage.ledger import LedgerStore


class LedgerActor:
    """Owns a LedgerStore. Every method is a thin call into the store.

    Methods are coroutines, so on Ray this is an async actor: concurrent ``append`` calls are
    coroutines on one event loop that share fsyncs through the store's group commit, with no
    thread per call fighting over the GIL. Reads that touch the disk run in a worker thread so they
    never stall appends. A restarted actor reopens the folder, sealing what the dead one left open.
    """

    def __init__(self, root: str) -> None:
        self.root = root
        self.store = LedgerStore(root)

    async def append(
        self, session: str, payloads: Sequence[Payload], parent: str | None = None,
        blobs: Sequence[bytes | None] | None = None,
    ) -> list[str]:
        return await self.store.append_async(session, payloads, parent=parent, blobs=blobs)

    async def append_batch(
        self, session: str, requests: list[tuple[list[Payload], list[bytes | None] | None]],
    ) -> list[list[str] | BaseException]:
        """Appends a caller-side client coalesced (actors.ledger_client): one call, one commit;
        each request's ids, or its own error, in order."""
        return await self.store.append_many_async(session, requests)

    async def head(self, session: str) -> str | None:
        return await asyncio.to_thread(self.store.head, session)

    async def get(self, entry_id: str) -> StoredEntry:
        return await asyncio.to_thread(self.store.get, entry_id)

    async def payload(self, entry_id: str) -> Any:
        return await asyncio.to_thread(self.store.payload, entry_id)

    async def entries(self, session: str, start: int = 0, stop: int | None = None) -> list[StoredEntry]:
        return await asyncio.to_thread(self.store.entries, session, start, stop)

    async def chain_to_root(self, entry_id: str) -> list[StoredEntry]:
        return await asyncio.to_thread(self.store.chain_to_root, entry_id)

    async def sessions(self) -> list[str]:
        return self.store.sessions()

    async def verify(self, session: str | None = None) -> VerifyReport:
        return await asyncio.to_thread(self.store.verify, session)

    async def stats(self) -> LedgerStats:
        return await asyncio.to_thread(self.store.stats)

    async def recoveries(self) -> list[dict[str, Any]]:
        return list(self.store.recoveries)

    async def checkpoint(self) -> None:
        await asyncio.to_thread(self.store.checkpoint)

    async def pid(self) -> int:
        return os.getpid()

    async def close(self) -> None:
        await asyncio.to_thread(self.store.close)
