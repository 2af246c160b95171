"""One way for an actor to reach a ledger: a LedgerStore in this process, or the LedgerActor on Ray.

The Evidence and Planner actors read and append through this, so their code is the same whether the
folder's single writer is a store they hold or the LedgerActor that owns it.

Through the actor, appends are coalesced on the caller's side: an actor call costs about a
millisecond, more than the commit it waits for, so while one call per session is in flight the
appends of other threads queue here and go out together as the next call (``append_batch``),
which the actor commits under one sync. Each caller still gets its own ids, or its own error.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from events.envelope import StoredEntry
from storage.ledger import LedgerStore


class _Request:
    __slots__ = ("blobs", "done", "error", "ids", "lead", "payloads")

    def __init__(self, payloads: list[Any], blobs: list[bytes | None] | None) -> None:
        self.payloads = payloads
        self.blobs = blobs
        self.done = threading.Event()
        self.lead = False  # set by the previous call's sender: this request's thread sends the next call
        self.ids: list[str] = []
        self.error: BaseException | None = None

    def result(self) -> list[str]:
        if self.error is not None:
            raise self.error
        return self.ids


class AppendCoalescer:
    """Turns concurrent ``append`` calls from this process's threads into one actor call per session.

    At most one call per session is in flight. The thread whose append finds none in flight sends
    every append queued for that session so far, its own included; when the call returns it hands
    the results out and makes the oldest append that queued meanwhile the sender of the next call.
    """

    def __init__(self, handle: Any, get: Any = None) -> None:
        """``get`` waits for a call's result (``ray.get``, the default)."""
        self.handle = handle
        self._get = get
        self._lock = threading.Condition(threading.Lock())  # notified whenever an append queues
        self._queued: dict[str, list[_Request]] = {}
        self._busy: set[str] = set()
        self.calls = 0  # actor calls made: fewer than appends when they were coalesced

    def append(self, session: str, payloads: Sequence[Any], blobs: Sequence[bytes | None] | None) -> list[str]:
        req = _Request(list(payloads), list(blobs) if blobs is not None else None)
        with self._lock:
            self._queued.setdefault(session, []).append(req)
            lead = session not in self._busy
            self._busy.add(session)
            self._lock.notify_all()
        if not lead:
            req.done.wait()
            if not req.lead:
                return req.result()
        self._send(session)
        return req.result()

    def queued(self, session: str) -> int:
        """Appends waiting for the next call to ``session``."""
        with self._lock:
            return len(self._queued.get(session, ()))

    def wait_queued(self, session: str, count: int, timeout: float | None = None) -> bool:
        """Block until ``count`` appends wait for the next call to ``session`` (tests synchronise on it)."""
        with self._lock:
            return self._lock.wait_for(lambda: len(self._queued.get(session, ())) >= count, timeout)

    def _send(self, session: str) -> None:
        get = self._get
        if get is None:
            import ray  # only with an actor handle

            get = ray.get
        with self._lock:
            batch = self._queued.pop(session, [])
        try:
            self.calls += 1
            results = get(self.handle.append_batch.remote(session, [(r.payloads, r.blobs) for r in batch]))
        except BaseException as exc:  # the call itself failed: every append in it failed
            results = [exc] * len(batch)
        for r, res in zip(batch, results, strict=True):
            if isinstance(res, BaseException):
                r.error = res
            else:
                r.ids = list(res)
        with self._lock:
            waiting = self._queued.get(session)
            if waiting:
                waiting[0].lead = True
                waiting[0].done.set()
            else:
                self._busy.discard(session)
        for r in batch:
            r.done.set()


class LedgerClient:
    """``handle``: a LedgerActor handle, a LedgerStore this process already holds (the folder's
    writer, used as is), or None to open the folder here."""

    def __init__(self, root: str, handle: Any = None, *, coalesce: bool = True) -> None:
        self.handle = None if isinstance(handle, LedgerStore) else handle
        self.store: LedgerStore | None = (
            handle if isinstance(handle, LedgerStore) else LedgerStore(root) if handle is None else None
        )
        self.coalescer = AppendCoalescer(self.handle) if self.handle is not None and coalesce else None

    def _call(self, name: str, *args: Any) -> Any:
        if self.store is not None:
            return getattr(self.store, name)(*args)
        import ray  # only when an actor handle was given

        return ray.get(getattr(self.handle, name).remote(*args))

    def append(self, session: str, payloads: Sequence[Any], blobs: Sequence[bytes | None] | None = None) -> list[str]:
        if self.store is not None:
            return self.store.append(session, payloads, blobs=blobs)
        if self.coalescer is not None:
            return self.coalescer.append(session, payloads, blobs)
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
