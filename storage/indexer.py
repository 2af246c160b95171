"""The writer's side of the session search index: off the append's critical path, buffered.

A ``LedgerStore(root, search=True)`` hands every committed group to ``SearchIndexer.committed`` (a queue
put, under the session's lock, after the fsync: the append never waits for whoosh). One daemon thread,
once the appends pause (``QUIET_S``, at most ``HOLD_S``: it holds the GIL while it works), turns the entries
into documents and adds them to the session's ``BufferedWriter``
(``vak_context.storage.search.WriterIndex``), and commits when a turn closes (a ``turn_card``), after
``COMMIT_DOCS`` buffered documents, or ``COMMIT_S`` after the first uncommitted one, and on ``flush`` and
``close``. A search first waits for the thread to take in everything appended before it (``sync``), then
searches the committed index and the buffer together: what the open turn saw is found before any commit.
A crash loses only the buffer; the next open catches the index up from the ledger.

The LedgerActor holds a ``LedgerStore`` like any writer, so on Ray the index is written by the same code.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Sequence
from typing import Any

from vak_context.events.envelope import StoredEntry
from vak_context.storage.search import Hit, WriterIndex

log = logging.getLogger("vak.search")

COMMIT_DOCS = 512
COMMIT_S = 1.0
QUIET_S = 0.05  # appends pause this long before the thread takes them in ...
HOLD_S = 1.0  # ... but nothing waits longer than this
HOLD_GROUPS = 256  # ... nor more groups than this


class SearchIndexer:
    """Per-session whoosh indexes kept by the folder's writer store."""

    def __init__(self, store: Any, *, commit_docs: int = COMMIT_DOCS, commit_s: float = COMMIT_S) -> None:
        self.store = store
        self.commit_docs = commit_docs
        self.commit_s = commit_s
        self._queue: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self._indexes: dict[str, WriterIndex] = {}
        self._dirty_since: dict[str, float] = {}
        self._lock = threading.Lock()  # one thread touches a WriterIndex at a time: the worker, or a search
        self._thread: threading.Thread | None = None
        self._closed = False
        self.errors: list[str] = []  # what indexing failed on (logged too): the ledger is never affected

    # ---------------------------------------------------------------- called by the store

    def committed(self, session: str, first_seq: int, ids: Sequence[str], parents: Sequence[str | None],
                  times: Sequence[int], kinds: Sequence[str], vs: Sequence[int], payloads: Sequence[bytes],
                  blobs: Sequence[bytes | None]) -> None:
        """A group just made durable (called under the session's lock: only a queue put)."""
        if self._closed:
            return
        self._queue.put(("entries", (session, first_seq, list(ids), list(parents), list(times), list(kinds),
                                     list(vs), list(payloads), list(blobs))))
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, daemon=True, name="vak-search-index")
                    self._thread.start()

    # ---------------------------------------------------------------- the thread

    def _run(self) -> None:
        # Entries wait until the appends pause for QUIET_S (at most HOLD_S, or HOLD_GROUPS groups): pure-Python
        # whoosh holds the GIL while it analyses, so indexing between back-to-back appends slows each of them
        # (bench/search.py: 5x an append's median); a sync or a search takes in what waits at once.
        pending: list[tuple[Any, ...]] = []
        first_at = 0.0
        while True:
            if pending:
                timeout: float | None = max(min(QUIET_S, first_at + HOLD_S - time.monotonic()), 0.0)
            else:
                timeout = self._next_deadline()
            try:
                what, arg = self._queue.get(timeout=timeout) if timeout is not None else self._queue.get()
            except queue.Empty:
                self._take_all(pending)
                self._commit_due()
                continue
            if what == "entries":
                if not pending:
                    first_at = time.monotonic()
                pending.append(arg)
                if len(pending) >= HOLD_GROUPS or time.monotonic() - first_at >= HOLD_S:
                    self._take_all(pending)
                    self._commit_due()
                continue
            self._take_all(pending)  # a barrier or the stop: what was appended before it, taken in first
            if what == "stop":
                arg.set()
                return
            if what == "barrier":
                arg.set()
            self._commit_due()

    def _take_all(self, pending: list[tuple[Any, ...]]) -> None:
        for item in pending:
            try:
                self._take(item)
            except Exception as exc:  # the index is a cache: log it, the next open rebuilds
                log.warning("search index: %s", exc, exc_info=True)
                self.errors.append(f"{type(exc).__name__}: {exc}")
                with self._lock:
                    broken = self._indexes.pop(item[0], None)
                    if broken is not None:
                        broken.abandon()
        pending.clear()

    def _next_deadline(self) -> float | None:
        if not self._dirty_since:
            return None
        return max(min(self._dirty_since.values()) + self.commit_s - time.monotonic(), 0.0)

    def _take(self, item: tuple[Any, ...]) -> None:
        session, first, ids, parents, times, kinds, vs, payloads, blobs = item
        entries = [StoredEntry(ids[i], parents[i], session, first + i, times[i], kinds[i], vs[i], payloads[i],
                               blobs[i]) for i in range(len(ids))]
        with self._lock:
            idx = self._open(session)
            closed = idx.add(entries)
            if closed or idx.buffered >= self.commit_docs:
                idx.commit()
                self._dirty_since.pop(session, None)
            elif idx.buffered:
                self._dirty_since.setdefault(session, time.monotonic())

    def _commit_due(self) -> None:
        now = time.monotonic()
        with self._lock:
            for session, since in list(self._dirty_since.items()):
                if now - since >= self.commit_s:
                    idx = self._indexes.get(session)
                    if idx is not None:
                        idx.commit()
                    del self._dirty_since[session]

    def _open(self, session: str) -> WriterIndex:
        idx = self._indexes.get(session)
        if idx is None:
            idx = self._indexes[session] = WriterIndex(self.store, session, buffered=True)
            if idx.rebuilt and idx.rebuilt != "no index":
                log.info("search index of %s rebuilt from the ledger: %s", session, idx.rebuilt)
        return idx

    # ---------------------------------------------------------------- callers

    def sync(self) -> None:
        """Return once the thread has taken in every group committed before this call."""
        if self._thread is None or not self._thread.is_alive():
            return
        done = threading.Event()
        self._queue.put(("barrier", done))
        done.wait()

    def index(self, session: str) -> WriterIndex:
        """The session's index, opened (caught up or rebuilt from the ledger) if it was not."""
        self.sync()
        with self._lock:
            return self._open(session)

    def search(self, session: str, query: str, limit: int = 10) -> list[Hit]:
        self.sync()
        with self._lock:
            idx = self._open(session)
            try:
                return idx.search(query, limit)
            except Exception as exc:  # a file torn under the open index: rebuild it, once
                log.warning("search index of %s failed (%s): rebuilding", session, exc, exc_info=True)
                self._indexes.pop(session, None)
                idx.abandon()
                self._drop(session)
                return self._open(session).search(query, limit)

    def _drop(self, session: str) -> None:
        import shutil

        from vak_context.storage.search import search_path

        shutil.rmtree(search_path(self.store.root, session), ignore_errors=True)

    def reindex(self, session: str) -> int:
        """Delete the session's index and rebuild it from the ledger; returns its document count."""
        self.sync()
        with self._lock:
            old = self._indexes.pop(session, None)
            self._dirty_since.pop(session, None)
            if old is not None:
                old.abandon()
            self._drop(session)
            return self._open(session).committed_docs

    def flush(self) -> None:
        """Commit every buffered document now."""
        self.sync()
        with self._lock:
            for idx in self._indexes.values():
                idx.commit()
            self._dirty_since.clear()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._thread is not None and self._thread.is_alive():
            done = threading.Event()
            self._queue.put(("stop", done))
            done.wait()
        with self._lock:
            for idx in self._indexes.values():
                try:
                    idx.close()
                except Exception as exc:
                    log.warning("search index of %s: close failed: %s", idx.session, exc)
            self._indexes.clear()
