"""LedgerActor: the one writer of a ledger folder, as a plain class (wrapped by actors.factory)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from events.envelope import StoredEntry
from storage.ledger import LedgerStore, Payload


class LedgerActor:
    """Owns a LedgerStore. Every method is a thin call into the store.

    Run as a threaded Ray actor, concurrent ``append`` calls share fsyncs through the store's
    group commit. A restarted actor reopens the folder, sealing whatever the dead one left open.
    """

    def __init__(self, root: str) -> None:
        self.root = root
        self.store = LedgerStore(root)

    def append(
        self, session: str, payloads: Sequence[Payload], parent: str | None = None,
        blobs: Sequence[bytes | None] | None = None,
    ) -> list[str]:
        return self.store.append(session, payloads, parent=parent, blobs=blobs)

    def head(self, session: str) -> str | None:
        return self.store.head(session)

    def get(self, entry_id: str) -> StoredEntry:
        return self.store.get(entry_id)

    def payload(self, entry_id: str) -> Any:
        return self.store.payload(entry_id)

    def entries(self, session: str, start: int = 0, stop: int | None = None) -> list[StoredEntry]:
        return self.store.entries(session, start, stop)

    def chain_to_root(self, entry_id: str) -> list[StoredEntry]:
        return self.store.chain_to_root(entry_id)

    def sessions(self) -> list[str]:
        return self.store.sessions()

    def verify(self, session: str | None = None) -> dict[str, Any]:
        return self.store.verify(session).as_dict()

    def stats(self) -> dict[str, Any]:
        return self.store.stats()

    def recoveries(self) -> list[dict[str, Any]]:
        return list(self.store.recoveries)

    def checkpoint(self) -> None:
        self.store.checkpoint()

    def pid(self) -> int:
        return os.getpid()

    def close(self) -> None:
        self.store.close()
