"""The ledger store: append-only, hash-linked, group-committed Arrow IPC segments per session.

Layout (docs/LEDGER_FORMAT.md)::

    <root>/sessions/<session>/seg-000001.arrow    sealed segments (IPC file, zstd, footer)
    <root>/sessions/<session>/_seg-000002.arrow   the tail a writer has open (uncompressed, zero-filled)
    <root>/sessions/<session>/_lock               flock held by the session's one writer
    <root>/sessions/<session>/_manifest.json      the sealed head, rewritten at each seal (storage/manifest.py)

Durability: ``append`` returns only after the entries' record batch is synced to the tail. Appends
that arrive while a commit is in flight queue up and go out together in the next batch, under one
sync (group commit: ``storage/group_commit.py``). Sealing compacts the tail into a zstd segment. On
open, a writer seals any tail a crash left open, truncating a torn write and recording it as an
``activity`` entry (``storage/recovery.py``). ``LedgerStore`` implements ``vak_context.storage.contract.Ledger``.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from vak_context.errors import LedgerClosed, LedgerCorrupt, UnknownEntry, UnknownSession
from vak_context.events.envelope import LedgerLimits, Mapper, StoredEntry
from vak_context.events.payloads import Activity
from vak_context.storage.catchup import Foreground
from vak_context.storage.contract import LedgerStats, Payload
from vak_context.storage.group_commit import GroupCommit
from vak_context.storage.index_files import IndexFiles
from vak_context.storage.ledger_index import (
    SessionIndex,
    index_stamp,
    newer,
    read_index,
    read_rest,
    write_index,
)
from vak_context.storage.ledger_paths import (
    check_ledger_path,
    list_session_names,
    session_dir,
    take_writer_lock,
)
from vak_context.storage.recovery import load_session
from vak_context.storage.segment.files import batch_offsets, open_name, read_batch_at, sealed_name
from vak_context.storage.segment.schema import from_batch
from vak_context.storage.session_state import Group, SessionState, decoded_newest, group_entries, relocate
from vak_context.storage.verify import VerifyReport, verify_session

if TYPE_CHECKING:  # whoosh is imported only by a store that indexes or searches
    from vak_context.storage.catchup import CatchUp
    from vak_context.storage.indexer import SearchIndexer
    from vak_context.storage.search import Hit

__all__ = ["DEFAULT_MAX_SEGMENT_BYTES", "LedgerStore", "Payload", "check_ledger_path"]

DEFAULT_MAX_SEGMENT_BYTES = 64 * 1024 * 1024  # a tail this big is sealed (zstd compaction: ~0.2 s)
# The decoded batches kept (least recently read go first): a session's entries are read back whole by each
# fold that rebuilds its state (the planner's and assembler's views, the evidence index: three, one after
# the other, when a session is bound after a restart), and a batch often holds one entry, so the bound is
# in bytes (payloads and blobs) as well as batches. Decoding a batch costs about 1 ms, whatever its size.
CACHE_BATCHES = 8192
CACHE_BYTES = 64 * 1024 * 1024


def _now_us() -> int:
    return time.time_ns() // 1000


class LedgerStore(GroupCommit):
    """One ledger folder on disk, where every append ends. Thread-safe; one writer per session (file lock)."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        readonly: bool = False,
        limits: LedgerLimits | None = None,
        clock: Callable[[], int] = _now_us,
        max_segment_bytes: int = DEFAULT_MAX_SEGMENT_BYTES,
        search: bool = False,
    ) -> None:
        self.root = Path(root)
        self.readonly = readonly
        self.mapper = Mapper(limits)
        self.clock = clock
        self.max_segment_bytes = max_segment_bytes
        self._sessions: dict[str, SessionState] = {}
        self._opening: dict[str, threading.RLock] = {}  # a session's own lock while it is opened (_session)
        self._where: dict[str, str] = {}  # entry id -> session
        self._lock = threading.RLock()
        self._closed = False
        self._closing = False
        self._cache: OrderedDict[tuple[str, int], tuple[list[StoredEntry], int]] = OrderedDict()  # (entries, bytes)
        self._cached_bytes = 0
        self.recoveries: list[dict[str, Any]] = []  # what opening repaired, for callers and tests
        check_ledger_path(self.root, create=not readonly)
        # The session search index (storage/indexer.py): kept by the writer, off the append's path.
        self.search_index: SearchIndexer | None = None
        if search and not readonly:
            from vak_context.storage.indexer import SearchIndexer

            self.search_index = SearchIndexer(self)
        self._catch_up: CatchUp | None = None  # background catch-ups at turn close (storage/catchup.py)
        self.index_files = IndexFiles()  # held sessions' index files, rewritten off the append (index_files.py)
        self.foreground = Foreground()  # the requests being worked on, which those catch-ups give way to
        # The index of each session this store does not hold, as last read (storage/ledger_index.py), with the
        # index file's stat when it was read: the next read starts where it stopped, and decodes the file
        # again only when it was rewritten.
        self._peeked: dict[str, tuple[SessionIndex, tuple[int, int, int] | None]] = {}

    # ------------------------------------------------------------------ sessions

    def sessions(self) -> list[str]:
        return sorted(list_session_names(self.root) | set(self._sessions))

    def _session(self, name: str, *, create: bool = False) -> SessionState:
        self._check_open()
        s = self._sessions.get(name)  # the hot path: a dict read needs no lock
        if s is not None:
            return s
        with self._lock:
            opening = self._opening.setdefault(name, threading.RLock())
        # Opened under the session's own lock, not the store's: opening reads its segments and, after a crash,
        # seals the tail it left open (a rewrite and several fsyncs). Under the store's lock, every other
        # session's reads and opens waited for it: after a restart the resumed sessions opened one at a time.
        with opening:
            s = self._sessions.get(name)
            if s is not None:
                return s
            self._check_open()
            d = session_dir(self.root, name, create=create and not self.readonly)
            if d is None:
                raise UnknownSession(name)
            s = SessionState(name=name, dir=d)
            if not self.readonly:
                s.lock_fd = take_writer_lock(d, name)
            try:
                self._load(s)
            except BaseException:
                self._release_lock(s)
                raise
            with self._lock:
                if self._closed:  # closed while this session was read: it is not this store's any more
                    self._release_lock(s)
                    raise LedgerClosed()
                for r in s.rows:
                    if r is not None:
                        self._where[r.id] = name
                self._sessions[name] = s
        return s

    @staticmethod
    def _release_lock(s: SessionState) -> None:
        if s.lock_fd is not None:
            os.close(s.lock_fd)  # closing the descriptor drops the flock
            s.lock_fd = None

    def _load(self, s: SessionState) -> None:
        read: list[tuple[int, pa.RecordBatch]] = []
        recoveries = load_session(s, readonly=self.readonly, read=lambda bi, batch: read.append((bi, batch)))
        self._keep_read(s.name, read)
        self.recoveries += recoveries
        for report in recoveries:
            if report["bytes_dropped"]:  # a torn tail was truncated: the ledger says so
                self._append_locked_session(
                    s, [Activity(activity="ledger.torn_tail_truncated", detail=report)], None, None)

    def _keep_read(self, name: str, read: list[tuple[int, pa.RecordBatch]]) -> None:
        """Cache the newest of the batches opening a session decoded (up to half the cache): what reads the
        session next (a resumed session's folds, its client history) finds them decoded, rather than reading
        each batch from the file again (the first request after a restart read every batch three times)."""
        for key, rows in decoded_newest(name, read, CACHE_BYTES // 2, CACHE_BATCHES // 2):
            self._cache_put(key, rows)

    def _cache_put(self, key: tuple[str, int], entries: list[StoredEntry]) -> None:
        size = sum(len(e.payload) + len(e.blob or b"") for e in entries)
        if size > CACHE_BYTES // 8:
            return
        with self._lock:
            if key not in self._cache:
                self._cache[key] = (entries, size)
                self._cached_bytes += size
            while len(self._cache) > CACHE_BATCHES or self._cached_bytes > CACHE_BYTES:
                self._cached_bytes -= self._cache.popitem(last=False)[1][1]

    # ------------------------------------------------------------------ reading

    def head(self, session: str) -> str | None:
        return self._session(session).head

    def count(self, session: str) -> int:
        return len(self._session(session).rows)

    def commits(self, session: str) -> int:
        """How many batches (fsyncs) this store wrote to the session since it opened."""
        return self._session(session).commits

    def _load_all(self) -> None:
        for name in self.sessions():
            self._session(name)

    def _locate(self, entry_id: str) -> tuple[SessionState, int]:
        if not isinstance(entry_id, str):
            raise UnknownEntry(repr(entry_id))
        name = self._where.get(entry_id)
        if name is None:
            self._load_all()
            name = self._where.get(entry_id)
            if name is None:
                raise UnknownEntry(entry_id)
        s = self._sessions[name]
        return s, s.ids[entry_id]

    def get(self, entry_id: str) -> StoredEntry:
        s, seq = self._locate(entry_id)
        return self._read(s, seq)

    def payload(self, entry_id: str) -> Any:
        return self.mapper.payload_of(self.get(entry_id))

    def _read(self, s: SessionState, seq: int) -> StoredEntry:
        row = s.rows[seq]
        if row is None:
            raise LedgerCorrupt(f"entry at seq {seq} of session {s.name!r} is in a damaged batch", {"seq": seq})
        return self._batch_entries(s, row.batch)[row.row]

    def _batch_entries(self, s: SessionState, bi: int) -> list[StoredEntry]:
        key = (s.name, bi)
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit[0]
        loc = s.batches[bi]
        for attempt in range(2):
            with s.cond:  # the offset and the file it is in change together when a tail is sealed
                sealed = loc.number in s.sealed
                path = s.dir / (sealed_name(loc.number) if sealed else open_name(loc.number))
                offset = loc.offset
            try:
                entries = from_batch(read_batch_at(path, offset))
                break
            except FileNotFoundError as exc:
                # The tail was sealed since: by this store (retry with the moved offset), or by
                # the writer of another process (find the batches in the sealed file).
                if attempt == 0 and not sealed:
                    with s.cond:
                        if loc.number not in s.sealed:
                            sealed_path = s.dir / sealed_name(loc.number)
                            if not sealed_path.exists():
                                raise LedgerCorrupt(f"segment {path.name} of session {s.name!r} is gone",
                                                    {"session": s.name, "segment": path.name}) from exc
                            relocate(s, loc.number, batch_offsets(sealed_path))
                            s.sealed.add(loc.number)
                    continue
                raise LedgerCorrupt(f"segment {path.name} of session {s.name!r} is gone",
                                    {"session": s.name, "segment": path.name}) from exc
            except (pa.ArrowException, OSError, ValueError) as exc:
                raise LedgerCorrupt(
                    f"batch {bi} of session {s.name!r} no longer decodes: {exc}",
                    {"session": s.name, "segment": path.name, "offset": offset},
                ) from exc
        else:  # pragma: no cover - the loop either breaks or raises
            raise AssertionError("unreachable")
        self._cache_put(key, entries)
        return entries

    def entries(self, session: str, start: int = 0, stop: int | None = None) -> list[StoredEntry]:
        """Entries with ``start <= seq < stop``, in seq order."""
        s = self._session(session)
        n = len(s.rows)
        if not isinstance(start, int) or not isinstance(stop, int | None):
            raise UnknownEntry(f"seq range {start!r}..{stop!r} of session {session!r}: seqs are integers")
        stop = n if stop is None else min(stop, n)
        if start < 0 or start > stop:
            raise UnknownEntry(f"seq range {start}..{stop} of session {session!r} (it has {n} entries)")
        # Newest first: the batches the cache holds (the newest, kept when the session opened) are taken before
        # the older ones, read from their files, evict them (a session of more batches than the cache holds).
        return [self._read(s, q) for q in range(stop - 1, start - 1, -1)][::-1]

    def entries_of(self, session: str, kinds: Collection[str], start: int = 0) -> list[StoredEntry]:
        """The entries of ``kinds`` with ``seq >= start``, in seq order. Kinds are in the session's rows (in
        memory since it was loaded): only the batches that hold such an entry are read and decoded."""
        s, wanted = self._session(session), set(kinds)
        return [self._read(s, q) for q in range(max(start, 0), len(s.rows))
                if (r := s.rows[q]) is None or r.kind in wanted]  # a damaged row: _read says so

    def iter_metadata(self, session: str) -> Iterable[tuple[int, str, str | None, str, int]]:
        """(seq, id, parent, kind, time_us) for every entry, without reading payloads."""
        s = self._session(session)
        for seq, r in enumerate(s.rows):
            if r is not None:
                yield seq, r.id, r.parent, r.kind, r.time_us

    def chain_to_root(self, entry_id: str) -> list[StoredEntry]:
        """The entries from the session root down to ``entry_id``, oldest first, following parents."""
        s, seq = self._locate(entry_id)
        seqs: list[int] = []
        cur: int | None = seq
        while cur is not None:
            seqs.append(cur)
            row = s.rows[cur]
            if row is None:
                raise LedgerCorrupt(f"chain of {entry_id} passes a damaged batch at seq {cur}", {"seq": cur})
            cur = s.ids.get(row.parent) if row.parent is not None else None
            if row.parent is not None and cur is None:
                raise LedgerCorrupt(f"entry {row.id} names parent {row.parent}, which is not in the session")
        read = [self._read(s, q) for q in seqs]  # newest first, as ``entries`` reads
        read.reverse()
        return read

    # ------------------------------------------------------------------ the index (format 2)

    def session_index(self, session: str) -> SessionIndex:
        """The session's head, entry count and newest profile entry per model key, from the ledger's index
        (storage/ledger_index.py), without reading the session's entries: this store's own, for a session it
        holds; else the session's index file and the batches after it. A copy: the caller may keep it."""
        self._check_open()
        s = self._sessions.get(session)
        if s is not None and s.index is not None:
            with s.cond:
                return s.index.copy()
        d = session_dir(self.root, session, create=False)
        if d is None:
            raise UnknownSession(session)
        with self._lock:
            known, seen = self._peeked.get(session, (None, None))
        stamp = index_stamp(d)
        on_disk = read_index(d, session) if stamp is not None and stamp != seen else None
        start = max((i for i in (known, on_disk) if i is not None), key=lambda i: i.seq,
                    default=SessionIndex(session))
        index = read_rest(d, start)
        with self._lock:
            self._peeked[session] = (index, stamp)
        return index.copy()

    def profile_entry(self, provider: str, model: str, quantisation: str = "") -> StoredEntry | None:
        """The newest ``capacity_profile`` entry recorded for the model key in any session of the ledger (by
        entry time; on a tie, the later session by name, then the later seq), read from the index."""
        key = (provider, model, quantisation)
        best: StoredEntry | None = None
        for name in self.sessions():
            try:
                entry = self.session_index(name).profiles.get(key)
            except UnknownSession:  # removed since the folder was listed
                continue
            if entry is not None and newer(entry, best):
                best = entry
        return best

    def catch_up_index(self) -> list[str]:
        """Write the index file of every session that has none or an unreadable one (a format-1 ledger's, or
        one a power cut tore), read from its entries; returns those sessions. A writer opening a session
        writes its own too; this is for the sessions nobody opens, so that a lookup across them never reads
        their entries. Costs a folder listing and a small read per session when all are indexed."""
        if self.readonly:
            return []
        done = []
        for name in self.sessions():
            d = session_dir(self.root, name, create=False)
            if d is None or read_index(d, name) is not None or not any(d.glob("*seg-*.arrow")):
                continue
            index = self.session_index(name)
            # Any index is true of the entries it covers: one written beside a live writer's is behind at worst.
            write_index(d, index, durable=True)
            done.append(name)
        return done

    # ------------------------------------------------------------------ maintenance

    def verify(self, session: str | None = None) -> VerifyReport:
        """Re-read the session(s) from disk and check every hash link. Names the first bad entry."""
        names = [session] if session is not None else self.sessions()
        report = VerifyReport()
        for name in names:
            d = session_dir(self.root, name, create=False)
            if d is None:
                raise UnknownSession(name)
            with self._lock:
                s = self._sessions.get(name)
            if s is not None:
                with s.cond:  # do not read a segment while a commit is half written
                    while s.flushing:
                        s.cond.wait()
                    verify_session(d, name, report)
            else:
                verify_session(d, name, report)
            if not report.ok:
                break
        return report

    def _index_committed(self, s: SessionState, group: Group, loc: tuple[int, int]) -> None:
        super()._index_committed(s, group, loc)
        # Kept as a read would decode it: the step's next fold reads what it just wrote (issue 37, ~0.2 ms a batch).
        self._cache_put((s.name, len(s.batches) - 1), group_entries(s.name, group))
        if self.search_index is not None:
            self.search_index.committed(s.name, group.first_seq, group.ids, group.parents, group.times,
                                        group.kinds, group.vs, group.payloads, group.blobs)

    def search(self, session: str, query: str, limit: int = 10) -> list[Hit]:
        """Full-text search of the session (its evidence windows, cards, presentations, directives)."""
        if self.search_index is not None:
            return self.search_index.search(session, query, limit)
        from vak_context.storage.search import read_index

        self._session(session)
        return read_index(self, session, query, limit)[0]

    def index_later(self, session: str, *, settle: bool = False) -> bool:
        """Catch the session's search index up in this store's background thread (``storage/catchup.py``),
        called when a turn closes; returns at once. False where this store does not: read-only, closed, or
        one opened with ``search=True`` (its indexer keeps the index current). ``settle``: queued as the store
        opens (``catch_up_behind``), it waits for the requests to settle (``CatchUp.schedule``)."""
        if self.readonly or self.search_index is not None:
            return False
        with self._lock:
            if self._closing:
                return False
            if self._catch_up is None:
                from vak_context.storage.catchup import CatchUp

                self._catch_up = CatchUp(self, self.foreground)
            catch_up = self._catch_up
        return catch_up.schedule(session, settle=settle)

    def index_idle(self) -> None:
        """Return once no background catch-up is queued or running (tests, benches, the LedgerActor)."""
        if self._catch_up is not None:
            self._catch_up.wait_idle()

    @property
    def catch_up(self) -> CatchUp | None:
        """The background catch-ups' worker (None until a turn closed), with its counts and errors."""
        return self._catch_up

    def checkpoint(self) -> None:
        """Seal every open segment so plain Arrow readers see all durable entries."""
        for s in list(self._sessions.values()):
            with s.cond:
                while s.flushing or s.open_group is not None:
                    s.cond.wait()
                if s.writer is not None:
                    self._seal_writer(s)

    def close(self) -> None:
        if self._closed:
            return
        with self._lock:
            self._closing = True  # no catch-up is scheduled from here on
            catch_up = self._catch_up
        if catch_up is not None:
            catch_up.close()  # stops a running catch-up at its next entry while entries can be read
        if self.search_index is not None:
            self.search_index.close()  # commits what it buffered while the entries can still be read
        if not self.readonly:
            self.index_files.stop()  # before the seal writes every index, durably
            self.checkpoint()
            for s in list(self._sessions.values()):
                with s.cond:
                    s.stopping = True
                    s.cond.notify_all()
                    thread = s.committer
                if thread is not None:
                    thread.join()
        with self._lock:
            self._closed = True
            for s in self._sessions.values():
                self._release_lock(s)
            self._cache.clear()
            self._cached_bytes = 0

    def __enter__(self) -> LedgerStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stats(self) -> LedgerStats:
        """Sessions, entries by kind, bytes on disk and heads: what `vak inspect` prints."""
        by_kind: dict[str, int] = {}
        heads: dict[str, str | None] = {}
        total = 0
        for name in self.sessions():
            s = self._session(name)
            heads[name] = s.head
            for r in s.rows:
                if r is not None:
                    by_kind[r.kind] = by_kind.get(r.kind, 0) + 1
                    total += 1
        disk = sum(p.stat().st_size for p in (self.root / "sessions").rglob("*seg-*.arrow"))
        return LedgerStats(sessions=len(heads), entries=total, by_kind=dict(sorted(by_kind.items())),
                           bytes=disk, heads=heads)
