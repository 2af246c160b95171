"""One way for an actor to reach a ledger: a LedgerStore in this process, or the LedgerActor on Ray.

The Evidence and Planner actors read and append through this, so their code is the same whether the
folder's single writer is a store they hold or the LedgerActor that owns it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from events.envelope import StoredEntry
from storage.ledger import LedgerStore


class LedgerClient:
    """``handle``: a LedgerActor handle, a LedgerStore this process already holds (the folder's
    writer, used as is), or None to open the folder here."""

    def __init__(self, root: str, handle: Any = None) -> None:
        self.handle = None if isinstance(handle, LedgerStore) else handle
        self.store: LedgerStore | None = (
            handle if isinstance(handle, LedgerStore) else LedgerStore(root) if handle is None else None
        )

    def _call(self, name: str, *args: Any) -> Any:
        if self.store is not None:
            return getattr(self.store, name)(*args)
        import ray  # only when an actor handle was given

        return ray.get(getattr(self.handle, name).remote(*args))

    def append(self, session: str, payloads: Sequence[Any], blobs: Sequence[bytes | None] | None = None) -> list[str]:
        if self.store is not None:
            return self.store.append(session, payloads, blobs=blobs)
        return list(self._call("append", session, list(payloads), None, list(blobs) if blobs else None))

    def head(self, session: str) -> str | None:
        result: str | None = self._call("head", session)
        return result

    def get(self, entry_id: str) -> StoredEntry:
        result: StoredEntry = self._call("get", entry_id)
        return result

    def entries(self, session: str, start: int) -> list[StoredEntry]:
        return list(self._call("entries", session, start, None))

    def chain_to_root(self, entry_id: str) -> list[StoredEntry]:
        return list(self._call("chain_to_root", entry_id))
