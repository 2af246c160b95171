"""A held session's index file, rewritten in a background thread (storage/ledger_index.py).

The writer rewrites a session's ``_index.json`` after each commit that holds a ``capacity_profile`` entry (a
profile each model call) or follows ``REWRITE_BYTES`` of entries. For an append outside a hold that happens
in the append, as before. A held session (the engine's loop during a turn: appends written behind, synced
once per model call), and an append written behind outside a hold (``append_many(behind=True)``: the
LedgerActor's for a held turn on Ray, synced on its sync thread), has its rewrite done here instead: creating, writing and renaming a file cost about
0.35 ms a step, and the step waited for it though nothing in the step reads the file. Marks for one session
coalesce into one rewrite of its newest index: the thread waits ``COALESCE_S`` after the first mark before it
writes, so a loop of fast steps (a small local model, a replay, ``bench/embed.py``'s instant model: a step every
few milliseconds) has its file rewritten about ten times a second, not at every step, and a step of a hosted
model (hundreds of milliseconds and more) still has its own.

Nothing is lost by the delay: the file is a cache that is never wrong, only behind (a reader reads the
batches after it, ``read_rest``), and this process reads the in-memory index. ``flush`` writes every marked
session's index now (a store's close does, before it seals); ``stop`` flushes and ends the thread.
"""

from __future__ import annotations

import threading
import time

from vak_context.storage.ledger_index import write_index
from vak_context.storage.session_state import SessionState

COALESCE_S = 0.1  # after a session's first mark, the marks that follow within this long share its rewrite


class IndexFiles:
    """Sessions whose index file is behind their in-memory index, and the thread that rewrites them."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._marked: dict[str, SessionState] = {}  # insertion order: the oldest mark first
        self._busy = False
        self._flushing = 0  # callers waiting in ``flush``: the thread writes without coalescing
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.written = 0  # index files this thread wrote (tests)

    def mark(self, s: SessionState) -> None:
        """``s``'s index file is behind: rewrite it soon (the caller may hold ``s.cond``; this takes only
        its own lock)."""
        with self._cond:
            if self._stopping:
                return  # the store is closing: its seal writes every index
            self._marked[s.name] = s
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True, name="vak-index-files")
                self._thread.start()
            self._cond.notify_all()

    def flush(self) -> None:
        """Return once every session marked so far has had its index file rewritten."""
        with self._cond:
            self._flushing += 1
            self._cond.notify_all()
            try:
                while (self._marked or self._busy) and self._thread is not None and self._thread.is_alive():
                    self._cond.wait()
            finally:
                self._flushing -= 1

    def stop(self) -> None:
        """Flush, then end the thread (a mark after this is ignored)."""
        self.flush()
        with self._cond:
            self._stopping = True
            thread = self._thread
            self._cond.notify_all()
        if thread is not None:
            thread.join()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._marked and not self._stopping:
                    self._cond.wait()
                if not self._marked:
                    return
                until = time.monotonic() + COALESCE_S
                while not (self._flushing or self._stopping) and (left := until - time.monotonic()) > 0:
                    self._cond.wait(left)  # later marks of the session replace its entry: one rewrite
                name = next(iter(self._marked))
                s = self._marked.pop(name)
                self._busy = True
            try:
                _rewrite(s)
                self.written += 1
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()


def _rewrite(s: SessionState) -> None:
    """Write ``s``'s index as it is now (copied under its lock; the file written outside it)."""
    with s.cond:
        if s.index is None or s.broken is not None:
            return
        index = s.index.copy()
    try:
        write_index(s.dir, index, durable=False)
    except OSError:
        pass  # a cache: the next rewrite, seal or open writes it; readers read the batches after the old one
