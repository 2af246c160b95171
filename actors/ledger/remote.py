"""The ledger contract as LedgerActor calls; apart from LedgerClient so an in-process one never imports Ray.

Each call is one actor call. Used through ``vak_context.actors.ledger.client.LedgerClient``, which picks it
(importing it only then) when it is given an actor handle.
Every ``ray.get`` (and every await) on the LedgerActor runs inside ``map_ray_errors``, so a caller sees
the actor's own typed errors as if in-process, and ``ActorError`` for anything Ray itself reports.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import Any

import ray

from vak_context.actors.append_coalescer import AppendCoalescer
from vak_context.actors.ray_errors import map_ray_errors
from vak_context.events.envelope import StoredEntry
from vak_context.storage.contract import LedgerStats, Payload, VerifyReport


def _get(what: str, ref: Any) -> Any:
    with map_ray_errors(what):
        return ray.get(ref)


def _get_append(ref: Any) -> Any:
    return _get("ledger append", ref)


class RemoteLedger:
    """The contract's calls sent to the LedgerActor, each awaited with Ray's errors translated.

    ``handle``: the folder's LedgerActor. Concurrent appends from this process's threads are
    coalesced into few actor calls (``AppendCoalescer``) unless ``coalesce`` is false."""

    def __init__(self, handle: Any, *, coalesce: bool = True, max_in_flight: int = 2) -> None:
        self.handle = handle
        self.coalescer = AppendCoalescer(handle, get=_get_append, max_in_flight=max_in_flight) if coalesce else None

    def append(
        self, session: str, payloads: Sequence[Payload], *, parent: str | None = None,
        blobs: Sequence[bytes | None] | None = None,
    ) -> list[str]:
        if self.coalescer is not None and parent is None:  # a coalesced call appends at the head
            return self.coalescer.append(session, payloads, blobs)
        ref = self.handle.append.remote(session, list(payloads), parent, list(blobs) if blobs is not None else None)
        return list(_get("ledger append", ref))

    def append_since(self, session: str, payloads: Sequence[Payload],
                     since: int) -> tuple[list[str], list[StoredEntry]]:
        ids, entries = _get("ledger append", self.handle.append_since.remote(session, list(payloads), since))
        return list(ids), list(entries)

    def head(self, session: str) -> str | None:
        head: str | None = _get("ledger head", self.handle.head.remote(session))
        return head

    def get(self, entry_id: str) -> StoredEntry:
        entry: StoredEntry = _get("ledger get", self.handle.get.remote(entry_id))
        return entry

    def entries(self, session: str, start: int = 0, stop: int | None = None) -> list[StoredEntry]:
        return list(_get("ledger entries", self.handle.entries.remote(session, start, stop)))

    def chain_to_root(self, entry_id: str) -> list[StoredEntry]:
        return list(_get("ledger chain_to_root", self.handle.chain_to_root.remote(entry_id)))

    def sessions(self) -> list[str]:
        return list(_get("ledger sessions", self.handle.sessions.remote()))

    def profile_entry(self, provider: str, model: str, quantisation: str = "") -> StoredEntry | None:
        entry: StoredEntry | None = _get("ledger profile_entry",
                                         self.handle.profile_entry.remote(provider, model, quantisation))
        return entry

    def verify(self, session: str | None = None) -> VerifyReport:
        report: VerifyReport = _get("ledger verify", self.handle.verify.remote(session))
        return report

    def stats(self) -> LedgerStats:
        stats: LedgerStats = _get("ledger stats", self.handle.stats.remote())
        return stats

    def checkpoint(self) -> None:
        _get("ledger checkpoint", self.handle.checkpoint.remote())

    # ------------------------------------------------------------------ for asyncio callers (actors)

    async def append_async(self, session: str, payloads: Sequence[Payload]) -> list[str]:
        with map_ray_errors("ledger append"):
            return list(await self.handle.append.remote(session, list(payloads)))

    async def append_since_async(self, session: str, payloads: Sequence[Payload],
                                 since: int, behind: bool = False) -> tuple[list[str], list[StoredEntry]]:
        with map_ray_errors("ledger append"):
            ids, entries = await self.handle.append_since.remote(session, list(payloads), since, behind)
            return list(ids), list(entries)

    def append_chain(self, session: str, requests: list[tuple[list[Any], list[bytes | None], Any]],
                     ) -> list[list[str] | BaseException]:
        return list(_get("ledger append", self.handle.append_chain.remote(session, requests)))

    async def append_chain_async(self, session: str, requests: list[tuple[list[Any], list[bytes | None], Any]],
                                 behind: bool = False) -> list[list[str] | BaseException]:
        return await self.append_chain_sent(session, requests, behind)

    def append_chain_sent(self, session: str, requests: list[tuple[list[Any], list[bytes | None], Any]],
                          behind: bool = False) -> Awaitable[list[list[str] | BaseException]]:
        """``append_chain_async`` with the actor call submitted before this returns: awaited later."""
        with map_ray_errors("ledger append"):
            ref = self.handle.append_chain.remote(session, requests, behind)

        async def answered() -> list[list[str] | BaseException]:
            with map_ray_errors("ledger append"):
                return list(await ref)
        return answered()

    async def session_search_async(self, session: str, query: str, scope: str | None, limit: int) -> Any:
        with map_ray_errors("ledger session_search"):
            return await self.handle.session_search.remote(session, query, scope, limit)

    async def entries_async(self, session: str, start: int = 0, stop: int | None = None) -> list[StoredEntry]:
        with map_ray_errors("ledger entries"):
            return list(await self.handle.entries.remote(session, start, stop))

    async def profile_entry_async(self, provider: str, model: str, quantisation: str = "") -> StoredEntry | None:
        with map_ray_errors("ledger profile_entry"):
            entry: StoredEntry | None = await self.handle.profile_entry.remote(provider, model, quantisation)
            return entry
