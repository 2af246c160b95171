"""The session's search index caught up in the background when a turn closes (issue 25 item 1, docs/SEARCH.md).

A writer store that does not index on append (``Engine.open``'s, the LedgerActor's) is told at each turn's
close (the services' ``turn_finished``, which both drivers and ``vak serve`` pass) to catch that session's
index up: ``LedgerStore.index_later`` hands the session to the store's ``CatchUp``, one worker thread per
store, which opens the session's ``WriterIndex`` (caught up from the seq its state names, or rebuilt), commits
the new documents as one segment (``storage/search_writer.py``) and closes it, under the session folder's lock (``index_lock``), the lock ``session_search`` takes, so the
two never race. It runs while the engine waits on the model for the next turn: the next search pays only for
what was appended since the turn closed. The append path is unchanged (no queue put, nothing per entry).

Bounded per turn: a catch-up keeps where it left each session (``Resume``: the last entry indexed and
the turn count there, for the ``RESUMED`` sessions caught up last), so the next one, when the index's state
still names that entry, reads only the entries after it instead of listing every entry of the session (what
grew with the session: ~4 ms of a turn's close at 1,000 turns). Anything else that wrote the index since (a
``session_search``, a rebuild) moves its state, and that catch-up opens the index whole as before.

Coalescing: at most one pending catch-up per session; a turn that closes while its session's catch-up runs
(or waits to) queues exactly one more run after it. The thread ends as soon as nothing is pending (the next
close starts one).
Closing the store drops what is pending, asks the running catch-up to stop at its next entry (what it
indexed so far is committed, and its state names the last entry taken), and joins the thread. A failure is
logged and the session's index deleted, so the next search rebuilds it from the ledger; nothing escapes the
thread.

Giving way (``Foreground``): the store's catch-ups and a request's own work share this process's cores (and
its GIL). ``vak serve`` marks the part of a request that is the engine's work, not the model's (routing it,
binding its session, reading a resumed session, assembling the projection: ``Engine.foreground``), and a
catch-up about to start waits until no such part has run for ``SETTLE_S`` (the engine is waiting on a model
or on its caller), at most ``SETTLE_LIMIT_S`` (so that one is never starved by a steady load; a search
meanwhile catches up what it lacks itself). Waiting on the model is not marked: that is the time a catch-up
is for. Steps or requests that follow each other closely (a model that answers at once, a steady load) are
not slowed by a catch-up beside them, and the turns that close meanwhile are caught up by one run after them:
a catch-up started in one of their short gaps ran into the work after it (after a restart every session a
kill left behind is queued at once, and their catch-ups took about a quarter of the CPU of the restarted
server while the resumed sessions' first requests ran, sampled with py-spy on bench/serve_bind.py's
sessions; a turn's close that waited 0.1 s, at most 10 s, ran beside bench/serve.py's timed requests). Those queued at open (``settle``) go after the turns' closes.

On open (``catch_up_behind``, called by ``Engine.open`` and, on Ray, by the folder's LedgerActor): a writer killed mid-catch-up can leave whoosh's
files ahead of the state file (``vak verify``: "it holds N documents where its state says M"), and one
killed before a close's catch-up ran leaves the index behind. Each session whose state names an entry other
than its head (read from the ledger's index, storage/ledger_index.py, not its entries) is queued here, so the
index agrees with the ledger again without a search or a turn, in the background as at a turn's close.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vak_context.errors import LedgerClosed
from vak_context.storage.ledger_paths import SEARCH_DIR

if TYPE_CHECKING:
    from vak_context.storage.search_state import Resume

log = logging.getLogger("vak.search")

SETTLE_S = 0.5  # a catch-up waits until no request work has run for this long
SETTLE_LIMIT_S = 30.0  # and at most this long (a steady load never starves it)
RESUMED = 64  # sessions whose resume point a store's catch-ups keep (each holds its directives' ids)

_locks: dict[tuple[str, str], threading.Lock] = {}
_locks_guard = threading.Lock()


def index_lock(root: Path, session: str) -> threading.Lock:
    """One writer of a session's index at a time per session folder in this process (a search or a
    catch-up): two WriterIndex on one folder would race."""
    key = (str(root.resolve()), session)
    with _locks_guard:
        return _locks.setdefault(key, threading.Lock())


class Foreground:
    """The requests this process is working on now (not waiting on their model): background catch-ups
    give way to them (``quiet``)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._working = 0
        self._ended = time.monotonic()  # when the last held work ended (or this was made)
        self.waits = 0  # catch-ups that found work in progress and waited (for tests and benches)

    @contextmanager
    def hold(self) -> Iterator[None]:
        """Mark a request's own work (sync, or across its awaits: a counter, never a lock)."""
        with self._cond:
            self._working += 1
        try:
            yield
        finally:
            with self._cond:
                self._working -= 1
                if not self._working:
                    self._ended = time.monotonic()
                    self._cond.notify_all()

    @property
    def working(self) -> int:
        return self._working

    def quiet(self, limit: float, stop: Callable[[], bool], settle: float = 0.0) -> bool:
        """Return once nothing has been held for ``settle`` seconds (True), ``stop()`` is true, or after
        ``limit`` seconds (False)."""
        deadline = time.monotonic() + limit
        with self._cond:
            if self._working and not stop():
                self.waits += 1
                self._cond.notify_all()  # tests wait for a catch-up to be waiting (``wait_waiting``)
            while not stop():
                now = time.monotonic()
                if not self._working and now - self._ended >= settle:
                    return True
                if now >= deadline:
                    return False
                wait = deadline - now if self._working else min(deadline - now, settle - (now - self._ended))
                self._cond.wait(wait)
            return True

    def wait_waiting(self, count: int) -> None:
        """Return once ``count`` catch-ups have waited for held work (tests synchronise on it, never on time)."""
        with self._cond:
            self._cond.wait_for(lambda: self.waits >= count)

    def wake(self) -> None:
        """Wake a waiting catch-up (the store closes: ``stop()`` is true now)."""
        with self._cond:
            self._cond.notify_all()


class CatchUp:
    """The background catch-ups of one writer store's session indexes: one thread, sessions queued once."""

    def __init__(self, store: Any, foreground: Foreground | None = None) -> None:
        self.store = store
        self.foreground = foreground  # the requests a catch-up gives way to (None: none)
        self._cond = threading.Condition()
        self._pending: deque[str] = deque()  # each session at most once
        self._settling: set[str] = set()  # of them, those queued as the store opened (``schedule(settle=True)``)
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self.running: str | None = None  # the session being caught up now
        self.runs = 0  # catch-ups finished (for tests and benches)
        self.resumed = 0  # of them, those that read only the entries after the last one's (``Resume``)
        self.errors: list[str] = []  # what failed (logged too); the index is a cache, the ledger is untouched
        self._resume: OrderedDict[str, Resume] = OrderedDict()  # session -> where it left it (worker thread only)

    def schedule(self, session: str, *, settle: bool = False) -> bool:
        """Queue a catch-up of ``session`` (unless one is already queued); False once closing. Every catch-up
        waits until no request work has run for ``SETTLE_S`` (at most ``SETTLE_LIMIT_S``); ``settle`` (the
        sessions a kill left behind, queued as the store opens) puts it after the turns' closes, and it stays
        so when a turn of it closes meanwhile."""
        with self._cond:
            if self._stopping.is_set():
                return False
            if session not in self._pending:
                self._pending.append(session)
                if settle:
                    self._settling.add(session)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="vak-search-catch-up", daemon=True)
                self._thread.start()
        return True

    def wait_idle(self) -> None:
        """Return once nothing is queued or running (the worker thread has ended)."""
        while True:
            with self._cond:
                thread = self._thread
            if thread is None:
                return
            thread.join()

    def wait_running(self, session: str) -> None:
        """Return once ``session``'s catch-up has started (tests synchronise on it, never on time)."""
        with self._cond:
            self._cond.wait_for(lambda: self.running == session)

    @property
    def pending(self) -> tuple[str, ...]:
        """The sessions queued behind the running catch-up."""
        with self._cond:
            return tuple(self._pending)

    def close(self) -> None:
        """Drop what is queued, stop the running catch-up at its next entry, join the thread."""
        with self._cond:
            self._stopping.set()
            self._pending.clear()
            self._settling.clear()
            thread = self._thread
        if self.foreground is not None:
            self.foreground.wake()
        if thread is not None:
            thread.join()

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._pending or self._stopping.is_set():  # nothing left: the thread ends, no wait
                    self.running = None
                    self._thread = None
                    return
            if self.foreground is not None:  # the requests being worked on go first
                self.foreground.quiet(SETTLE_LIMIT_S, self._stopping.is_set, settle=SETTLE_S)
            with self._cond:
                self.running = None
                if not self._pending or self._stopping.is_set():
                    self._thread = None
                    return
                # a turn's close first: those queued at open after them
                session = next((s for s in self._pending if s not in self._settling), self._pending[0])
                self._pending.remove(session)
                self._settling.discard(session)
                self.running = session
                self._cond.notify_all()
            self._catch_up(session)

    def _catch_up(self, session: str) -> None:
        store = self.store
        root = Path(store.root)
        with index_lock(root, session):
            if self._stopping.is_set():
                return
            try:
                from vak_context.storage.search import WriterIndex  # whoosh: imported once a turn closed

                if session not in store.sessions():
                    return  # a turn that ended before it wrote anything
                resume = self._resume.pop(session, None)  # taken: a failure below starts that session over
                index = WriterIndex(store, session, stop=self._stopping.is_set, commit=False, resume=resume)
                index.close()  # one commit
                self.resumed += index.resumed
                point = index.resume_point()
                if point is not None:
                    self._resume[session] = point
                    while len(self._resume) > RESUMED:
                        self._resume.popitem(last=False)
                self.runs += 1
            except LedgerClosed:
                return  # closed under it by a caller that did not close the store (nothing was half-written)
            except Exception as exc:  # the index is a cache: say so, leave it to the next search to rebuild
                why = f"{type(exc).__name__}: {str(exc)[:300]}"
                self.errors.append(why)
                log.warning("search index of %r: the catch-up at a turn's close failed (%s); the next "
                            "session_search rebuilds it", session, why)
                _discard(root / "sessions" / session / SEARCH_DIR)


def _discard(folder: Path) -> None:
    """Delete a session's index, whatever is there (a folder, or a file in its place)."""
    if folder.is_dir() and not folder.is_symlink():
        shutil.rmtree(folder, ignore_errors=True)
    else:
        try:
            folder.unlink(missing_ok=True)
        except OSError as exc:
            log.warning("search index at %s could not be deleted (%s)", folder, type(exc).__name__)


def catch_up_behind(store: Any) -> list[str]:
    """Queue a background catch-up of each session whose search index exists and whose state file does not
    name the session's head entry (behind, torn, or missing); returns those sessions. Reads one small state
    file per indexed session and the ledger's index, never a session's entries or whoosh's files."""
    import json

    from vak_context.storage.search_state import STATE_FILE

    behind: list[str] = []
    for session in store.sessions():
        state_file = Path(store.root) / "sessions" / session / SEARCH_DIR / STATE_FILE
        if not state_file.parent.exists():
            continue  # never searched nor caught up: the first turn's close or search builds it
        try:
            named = json.loads(state_file.read_text(encoding="utf-8")).get("id")
        except (OSError, ValueError, AttributeError):
            named = None
        if named != store.session_index(session).head and store.index_later(session, settle=True):
            behind.append(session)
    return behind
