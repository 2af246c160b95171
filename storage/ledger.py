"""The ledger store: append-only, hash-linked, group-committed Arrow IPC segments per session.

Layout (docs/LEDGER_FORMAT.md)::

    <root>/sessions/<session>/seg-000001.arrow    sealed segments (IPC file, zstd, footer)
    <root>/sessions/<session>/_seg-000002.arrow   the tail a writer has open (uncompressed, zero-filled)
    <root>/sessions/<session>/_lock               flock held by the session's one writer

Durability: ``append`` returns only after the entries' record batch is synced to the tail. Appends
that arrive while a commit is in flight queue up and go out together in the next batch, under one
sync (group commit). Sealing compacts the tail into a zstd segment. On open, a writer seals any
tail a crash left open, truncating a torn write and recording it as an ``activity`` entry.
"""

from __future__ import annotations

import _thread
import asyncio
import fcntl
import itertools
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from pydantic import BaseModel

from events.envelope import CURRENT_VERSION, LedgerLimits, Mapper, StoredEntry, blob_meta, chain_ids
from events.payloads import Activity
from storage.segments import (
    SegmentWriter,
    batch_offsets,
    encode_message,
    from_batch,
    list_segments,
    mkdir_durable,
    open_name,
    read_batch_at,
    rewrite_sealed,
    scan_segment,
    sealed_name,
    stale_tails,
    unlink_durable,
)
from storage.verify import VerifyReport, verify_session
from vak.errors import (
    LedgerClosed,
    LedgerCorrupt,
    LedgerError,
    LedgerPathError,
    SessionLocked,
    UnknownEntry,
    UnknownParent,
    UnknownSession,
)
from vak.names import check_name

Payload = BaseModel | dict[str, Any]
DEFAULT_MAX_SEGMENT_BYTES = 64 * 1024 * 1024  # a tail this big is sealed (zstd compaction: ~0.2 s)
_INLINE = object()  # _enqueue's answer to a writer that commits its own group
INLINE_MAX_WRITE_S = 0.0002  # a sync this fast does not block long enough to cost the writer its CPU
COMMIT_GATHER_S = 0.002  # the longest a commit waits for writers that were recently active
PEAK_DECAY = 0.9  # per commit: a writer that left stops being waited for within a few dozen commits


def _now_us() -> int:
    return time.time_ns() // 1000


@dataclass(slots=True)
class _Row:
    id: str
    parent: str | None
    kind: str
    time_us: int
    batch: int  # index into _Session.batches
    row: int


@dataclass(slots=True)
class _BatchLoc:
    number: int  # segment number
    offset: int
    first_seq: int
    rows: int


class _Group:
    """Entries that go to disk together: one record batch, one fsync.

    Held as columns, the shape the batch is written in: no per-entry object is made on the way
    to disk (ids, parents and seqs are all the index needs afterwards).
    """

    __slots__ = ("appends", "blobs", "error", "first_seq", "futures", "ids", "kinds", "parents", "payloads",
                 "times", "vs", "waiters")

    def __init__(self, first_seq: int) -> None:
        self.first_seq = first_seq
        self.ids: list[str] = []
        self.parents: list[str | None] = []
        self.times: list[int] = []
        self.kinds: list[str] = []
        self.vs: list[int] = []
        self.payloads: list[bytes] = []
        self.blobs: list[bytes | None] = []
        self.error: BaseException | None = None
        self.appends = 0  # how many append calls share this group
        # A held lock per blocked thread, released by finish(): each waiter wakes on its own lock
        # instead of all of them re-acquiring one condition's lock in turn.
        self.waiters: list[Any] = []
        self.futures: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = {}

    def add_waiter(self, fut: asyncio.Future[None] | None) -> Any:
        """Register the caller (under the session lock, before the committer can take the group)."""
        if fut is not None:
            self.futures.setdefault(fut.get_loop(), []).append(fut)
            return None
        lock = _thread.allocate_lock()
        lock.acquire()
        self.waiters.append(lock)
        return lock

    def finish(self, error: BaseException | None = None) -> None:
        self.error = error
        for lock in self.waiters:
            lock.release()
        for loop, futs in self.futures.items():  # one wake-up per event loop, not per waiter
            try:
                loop.call_soon_threadsafe(_settle, futs, error)
            except RuntimeError:  # that loop was closed: nobody waits there, and the committer must go on
                pass


def _settle(futs: list[asyncio.Future[None]], error: BaseException | None) -> None:
    for fut in futs:
        if not fut.done():
            if error is None:
                fut.set_result(None)
            else:
                fut.set_exception(error)


@dataclass
class _Session:
    name: str
    dir: Path
    rows: list[_Row | None] = field(default_factory=list)  # index = seq; None = in a damaged batch
    ids: dict[str, int] = field(default_factory=dict)
    batches: list[_BatchLoc] = field(default_factory=list)
    damaged: list[dict[str, Any]] = field(default_factory=list)
    sealed: set[int] = field(default_factory=set)  # segment numbers already sealed
    next_segment: int = 1
    # writer state
    lock_fd: int | None = None
    writer: SegmentWriter | None = None
    cond: threading.Condition = field(default_factory=threading.Condition)
    open_group: _Group | None = None  # appends waiting for the next commit
    pending_ids: set[str] = field(default_factory=set)
    committer: threading.Thread | None = None
    stopping: bool = False
    inflight: int = 0  # append calls queued or being written
    peak_inflight: float = 0.0  # recent peak of inflight: how many writers are really concurrent
    next_seq: int = 0
    head: str | None = None
    durable_seq: int = -1
    flushing: bool = False
    broken: BaseException | None = None
    commits: int = 0
    committer_idle: bool = False  # waiting for a first append, with no deadline
    last_write_s: float = float("inf")  # wall time of the last commit's write and sync


def _batch_intact(batch: pa.RecordBatch | None) -> bool:
    return batch is not None and all(e.compute_id() == e.id for e in from_batch(batch))


def check_ledger_path(root: Path, *, create: bool) -> None:
    """Raise a one-line typed error unless ``root`` is a usable ledger folder.

    With ``create``, a missing ledger is made (each new folder synced into its parent). Checked
    before any work, so `vak` commands can call it on their ``--ledger`` argument first.
    """
    sessions = root / "sessions"
    need = os.R_OK | os.X_OK | (os.W_OK if create else 0)
    try:
        for path in (root, sessions):  # the ledger folder first, so an error names the folder at fault
            if not path.exists():
                if not create:
                    raise LedgerPathError(root, "is not a ledger: it has no sessions/ folder", "Check the path.")
                mkdir_durable(sessions)
                return
            if not path.is_dir():
                whose = "a ledger's folder" if path == root else "a ledger's sessions/"
                raise LedgerPathError(path, f"is a file; {whose} must be a folder",
                                      "Pass the ledger's folder (the one holding sessions/), or a new path.")
            # Checked up front: without read permission on sessions/ a stat still works, and the
            # error would come later, as a traceback from whatever first lists the folder.
            if not os.access(path, need):
                mode = "readable and writable" if create else "readable"
                raise LedgerPathError(path, f"is not {mode} by this user", "Check the folder's permissions.")
    except OSError as exc:
        raise LedgerPathError(exc.filename or root, f"cannot be used as a ledger ({exc.strerror})",
                              "Check the path and its permissions.") from exc


class LedgerStore:
    """One ledger folder. Thread-safe; one writer per session, enforced with a file lock."""

    # A writer alone may commit its own group in its own thread, saving two thread hand-offs (20-35%
    # of a one-entry commit when the sync is cheap). But when the sync blocks, on a loaded machine the
    # busy writer thread waits far longer for the CPU after its fsync returns than the committer
    # thread, which mostly sleeps and so is scheduled at once (measured here: fsync 5-8 ms from the
    # writer, 0.5-1.4 ms from the committer; docs/PERFORMANCE.md). None: inline while the last
    # commit's write and sync took under INLINE_MAX_WRITE_S; True: always; False: never.
    inline_commits: bool | None = None

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        readonly: bool = False,
        limits: LedgerLimits | None = None,
        clock: Callable[[], int] = _now_us,
        max_segment_bytes: int = DEFAULT_MAX_SEGMENT_BYTES,
    ) -> None:
        self.root = Path(root)
        self.readonly = readonly
        self.mapper = Mapper(limits)
        self.clock = clock
        self.max_segment_bytes = max_segment_bytes
        self._sessions: dict[str, _Session] = {}
        self._where: dict[str, str] = {}  # entry id -> session
        self._lock = threading.RLock()
        self._closed = False
        self._cache: OrderedDict[tuple[str, int], list[StoredEntry]] = OrderedDict()
        self.recoveries: list[dict[str, Any]] = []  # what opening repaired, for callers and tests
        check_ledger_path(self.root, create=not readonly)

    # ------------------------------------------------------------------ sessions

    def sessions(self) -> list[str]:
        base = self.root / "sessions"
        try:  # a symlinked session folder is listed, so that opening it refuses it by name
            names = {p.name for p in base.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))}
        except OSError as exc:
            raise LedgerPathError(base, f"cannot be listed ({exc.strerror})",
                                  "Check the folder's permissions for this user.") from exc
        return sorted(names | set(self._sessions))

    def _session_dir(self, name: str, *, create: bool) -> Path | None:
        """The session's folder; None when it does not exist and ``create`` is false."""
        d = self.root / "sessions" / check_name(name, "session name")
        try:
            if d.is_symlink():
                raise LedgerPathError(d, "is a symlink; a session folder must be a real folder inside the ledger",
                                      "Move the session's folder into sessions/ instead of linking it.")
            if d.exists() and not d.is_dir():
                raise LedgerPathError(d, "is a file, not a session folder", "Move it out of sessions/.")
            if not d.exists():
                if not create:
                    return None
                mkdir_durable(d)
            elif not os.access(d, os.R_OK | os.X_OK):
                raise LedgerPathError(d, "is not readable by this user", "Check the folder's permissions.")
        except OSError as exc:
            raise LedgerPathError(d, f"cannot be used ({exc.strerror})", "Check the folder's permissions.") from exc
        return d

    def _session(self, name: str, *, create: bool = False) -> _Session:
        self._check_open()
        s = self._sessions.get(name)  # the hot path: a dict read needs no lock
        if s is not None:
            return s
        with self._lock:
            s = self._sessions.get(name)
            if s is not None:
                return s
            d = self._session_dir(name, create=create and not self.readonly)
            if d is None:
                raise UnknownSession(name)
            s = _Session(name=name, dir=d)
            if not self.readonly:
                self._take_lock(s)
            try:
                self._load(s)
            except BaseException:
                self._release_lock(s)
                raise
            self._sessions[name] = s
            for r in s.rows:
                if r is not None:
                    self._where[r.id] = name
        return s

    def _take_lock(self, s: _Session) -> None:
        path = s.dir / "_lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            os.close(fd)
            raise SessionLocked(s.name, str(path)) from exc
        s.lock_fd = fd

    @staticmethod
    def _release_lock(s: _Session) -> None:
        if s.lock_fd is not None:
            os.close(s.lock_fd)  # closing the descriptor drops the flock
            s.lock_fd = None

    def _load(self, s: _Session) -> None:
        torn_reports: list[dict[str, Any]] = []
        if not self.readonly:
            for tail in stale_tails(s.dir):  # an interrupted seal: the sealed copy is complete
                unlink_durable(tail)
        for number, path, sealed in list_segments(s.dir):
            scanned = scan_segment(path, number, sealed)
            if not sealed and not self.readonly:
                report = self._seal_leftover(s, scanned)
                if report is not None:
                    self.recoveries.append(report)
                    if report["bytes_dropped"]:
                        torn_reports.append(report)
                    scanned = scan_segment(s.dir / sealed_name(number), number, True)
                    sealed = True
            if sealed:
                s.sealed.add(number)
            s.next_segment = max(s.next_segment, number + 1)
            for bi, sb in enumerate(scanned.batches):
                if sb.batch is None:
                    s.damaged.append({"segment": path.name, "batch": bi, "offset": sb.offset, "error": sb.error})
                    continue
                self._index_batch(s, number, sb.offset, sb.batch)
        last = next((r for r in reversed(s.rows) if r is not None), None)
        s.head = last.id if last else None
        s.next_seq = len(s.rows)
        s.durable_seq = s.next_seq - 1
        for report in torn_reports:
            self._append_locked_session(s, [Activity(activity="ledger.torn_tail_truncated", detail=report)], None, None)

    def _seal_leftover(self, s: _Session, scanned: Any) -> dict[str, Any] | None:
        """Seal a segment a crashed writer left open, dropping an incomplete tail."""
        if scanned.bad_header and not scanned.torn:
            s.damaged.append({"segment": scanned.path.name, "error": scanned.bad_header})
            return None
        batches = list(scanned.batches)
        dropped = scanned.dropped  # zero fill not counted
        reason = scanned.torn
        if batches and not _batch_intact(batches[-1].batch):
            # The last message is there but its rows do not decode or hash: its marker reached the
            # disk before the rest of it (a power cut inside the zero fill). Its sync never
            # returned, so it was never acknowledged: a torn write, like a cut-off message.
            last = batches.pop()
            dropped += last.end - last.offset
            reason = reason or f"the last record batch, at byte {last.offset}, was not completely written"
        if any(b.batch is None for b in batches):
            # A complete but undecodable batch is damage, not a torn write: keep the bytes for inspection.
            return None
        rewrite_sealed(s.dir, scanned.number, [b.batch for b in batches])
        unlink_durable(scanned.path)
        return {
            "session": s.name,
            "segment": sealed_name(scanned.number),
            "bytes_dropped": dropped,
            "batches_kept": len(batches),
            "reason": reason or "segment left open by a crash",
        }

    def _index_batch(self, s: _Session, number: int, offset: int, batch: pa.RecordBatch) -> None:
        seqs = batch.column("seq").to_pylist()
        ids = batch.column("id").to_pylist()
        parents = batch.column("parent").to_pylist()
        kinds = batch.column("kind").to_pylist()
        times = batch.column("time").cast(pa.int64()).to_pylist()
        bi = len(s.batches)
        s.batches.append(_BatchLoc(number, offset, seqs[0] if seqs else len(s.rows), len(seqs)))
        for i, seq in enumerate(seqs):
            while len(s.rows) < seq:
                s.rows.append(None)
            row = _Row(ids[i], parents[i], kinds[i], times[i], bi, i)
            if seq == len(s.rows):
                s.rows.append(row)
            else:  # out of order seq: keep the first, verify() reports the rest
                continue
            s.ids[ids[i]] = seq

    # ------------------------------------------------------------------ appending

    def append(
        self,
        session: str,
        payloads: Sequence[Payload],
        *,
        parent: str | None = None,
        blobs: Sequence[bytes | None] | None = None,
    ) -> list[str]:
        """Append entries as one chain (each the parent of the next); return their ids once durable.

        ``parent`` defaults to the session head. ``blobs[i]`` is the raw body of entry ``i``.
        """
        if self.readonly:
            raise LedgerError("this LedgerStore is read-only; open it with readonly=False to append")
        if blobs is not None and len(blobs) != len(payloads):
            raise ValueError("blobs must have one item per payload")
        s = self._session(session, create=True)
        return self._append_locked_session(s, payloads, parent, blobs)

    async def append_async(
        self,
        session: str,
        payloads: Sequence[Payload],
        *,
        parent: str | None = None,
        blobs: Sequence[bytes | None] | None = None,
    ) -> list[str]:
        """``append`` for asyncio callers: many coroutines share commits without a thread each."""
        if self.readonly:
            raise LedgerError("this LedgerStore is read-only; open it with readonly=False to append")
        if blobs is not None and len(blobs) != len(payloads):
            raise ValueError("blobs must have one item per payload")
        s = self._session(session, create=True)
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        group, new, _ = self._enqueue(s, payloads, parent, blobs, fut)
        if not new:
            return []
        try:
            await fut
        except BaseException:
            if group.error is None:
                raise
            raise LedgerError(f"append to {s.name!r} was not made durable: {group.error}") from group.error
        return new

    async def append_many_async(
        self, session: str, requests: Sequence[tuple[Sequence[Payload], Sequence[bytes | None] | None]],
    ) -> list[list[str] | BaseException]:
        """Several appends to one session's head, in order, under one commit: what a caller-side
        client coalesced into one call. Each request is its own chain link run, as if appended
        alone; a request that fails (an invalid payload) gets its error and the others go on."""
        if self.readonly:
            raise LedgerError("this LedgerStore is read-only; open it with readonly=False to append")
        s = self._session(session, create=True)
        loop = asyncio.get_running_loop()
        queued: list[tuple[asyncio.Future[None], _Group, list[str]] | BaseException] = []
        with s.cond:  # reentrant: the committer takes all of them or none
            for payloads, blobs in requests:
                try:
                    if blobs is not None and len(blobs) != len(payloads):
                        raise ValueError("blobs must have one item per payload")
                    fut: asyncio.Future[None] = loop.create_future()
                    group, new, _ = self._enqueue(s, payloads, None, blobs, fut)
                    if not new:
                        fut.set_result(None)
                    queued.append((fut, group, new))
                except Exception as exc:  # handed back to that request's caller
                    queued.append(exc)
        results: list[list[str] | BaseException] = []
        for item in queued:
            if isinstance(item, BaseException):
                results.append(item)
                continue
            fut, group, new = item
            try:
                await fut
                results.append(new)
            except Exception as exc:
                results.append(LedgerError(f"append to {s.name!r} was not made durable: {group.error}")
                               if group.error is not None else exc)
        return results

    def append_one(self, session: str, payload: Payload, *, parent: str | None = None, blob: bytes | None = None) -> str:
        return self.append(session, [payload], parent=parent, blobs=[blob])[0]

    def _append_locked_session(
        self, s: _Session, payloads: Sequence[Payload], parent: str | None, blobs: Sequence[bytes | None] | None
    ) -> list[str]:
        group, new, lock = self._enqueue(s, payloads, parent, blobs, None)
        if not new:
            return []
        if lock is _INLINE:
            self._commit(s, group, inline=True)
        else:
            lock.acquire()  # released by the committer once the group is durable (or failed)
        if group.error is not None:
            raise LedgerError(f"append to {s.name!r} was not made durable: {group.error}") from group.error
        return new

    def _enqueue(
        self, s: _Session, payloads: Sequence[Payload], parent: str | None, blobs: Sequence[bytes | None] | None,
        fut: asyncio.Future[None] | None,
    ) -> tuple[_Group, list[str], Any]:
        """Give the entries their seq, parent and id, and queue them for the next commit.

        Returns the group, the new ids, and (for a thread caller, ``fut`` None) the lock the
        caller blocks on until the group is durable.
        """
        # Validation, encoding and blob hashing happen outside the lock; only seq, parent and the
        # id are serial.
        n = len(payloads)
        kinds: list[str] = []
        datas: list[bytes] = []
        encode = self.mapper.encode_payload
        for p in payloads:
            kind, data = encode(p)
            kinds.append(kind)
            datas.append(data)
        vs = [CURRENT_VERSION.get(k, 1) for k in kinds]
        if blobs is None:
            blob_list: list[bytes | None] = [None] * n
            metas: list[dict[str, Any] | None] = blob_list  # type: ignore[assignment]  # all None
        else:
            blob_list = list(blobs)
            for b in blob_list:
                self.mapper.check_blob(b)
            metas = [blob_meta(b) for b in blob_list]
        with s.cond:
            self._check_open()
            if s.broken is not None:
                raise LedgerError(f"session {s.name!r} writer failed earlier ({s.broken}); reopen the ledger")
            prev = parent if parent is not None else s.head
            if parent is not None and parent not in s.ids and parent not in s.pending_ids:
                raise UnknownParent(parent, s.name)
            if not n:
                return _Group(s.next_seq), [], None
            now = self.clock()
            new = chain_ids(prev, s.name, s.next_seq, now, kinds, vs, datas, metas)
            group = s.open_group
            if group is None:
                group = s.open_group = _Group(s.next_seq)
            s.next_seq += n
            group.ids += new
            group.parents.append(prev)
            group.parents += new[:-1]
            group.times += [now] * n
            group.kinds += kinds
            group.vs += vs
            group.payloads += datas
            group.blobs += blob_list
            group.appends += 1
            s.inflight += 1
            if s.inflight > s.peak_inflight:
                s.peak_inflight = float(s.inflight)
            s.pending_ids.update(new)
            s.head = new[-1]
            inline = self.inline_commits
            if inline is None:
                inline = s.last_write_s < INLINE_MAX_WRITE_S
            if (fut is None and inline and group.appends == 1 and not s.flushing and s.peak_inflight < 2
                    and (s.committer is None or s.committer_idle)):
                # A writer alone (no commit in flight, none recently concurrent) commits its own
                # group in its own thread: two thread hand-offs (to the committer and back) cost
                # about as much as a small commit. Marked flushing, so the committer waits for it.
                s.open_group = None
                s.flushing = True
                return group, new, _INLINE
            if s.committer is None:
                s.committer = threading.Thread(target=self._commit_loop, args=(s,), daemon=True,
                                               name=f"vak-commit-{s.name}")
                s.committer.start()
            lock = group.add_waiter(fut)
            # Wake the committer only when it has something to decide: a full group, or a first
            # append while it sleeps without a deadline (right after a commit it waits for the
            # returning writers with one, and needs no wake-up for the first of them).
            if group.appends >= int(s.peak_inflight) or (group.appends == 1 and s.committer_idle):
                s.cond.notify_all()
        return group, new, lock

    def _commit_loop(self, s: _Session) -> None:
        """The session's committer: whatever queued while the last fsync ran goes out as the next batch.

        One thread per session, so waiters are woken once per commit and never contend to lead.
        When more writers have recently been active than have queued yet, it waits a moment (at
        most COMMIT_GATHER_S) for them, so all concurrent writers share one fsync instead of
        splitting into two half-size groups that alternate.
        """
        while True:
            with s.cond:
                if s.open_group is None and not s.stopping and s.peak_inflight >= 2:
                    s.cond.wait(COMMIT_GATHER_S)  # concurrent writers were just acknowledged: they come back
                while s.open_group is None and not s.stopping:
                    s.committer_idle = True
                    s.cond.wait()
                    s.committer_idle = False
                if s.open_group is not None and not s.stopping:
                    deadline = time.monotonic() + COMMIT_GATHER_S
                    while (s.open_group.appends < int(s.peak_inflight) and not s.stopping
                           and (left := deadline - time.monotonic()) > 0):
                        s.cond.wait(left)
                while s.flushing:  # a writer committing its own group inline: batches go out in order
                    s.cond.wait()
                group = s.open_group
                if group is None:  # stopping, nothing queued
                    s.committer = None
                    s.cond.notify_all()
                    return
                s.open_group = None
                s.flushing = True
            if not self._commit(s, group, inline=False):
                return

    def _commit(self, s: _Session, group: _Group, *, inline: bool) -> bool:
        """Write and sync a group taken from the queue (``s.flushing`` set), index it, wake its
        waiters. False when it failed: the session is then broken, and every queued append fails."""
        error: BaseException | None = None
        loc: tuple[int, int] | None = None
        try:
            writer = self._writer(s)
            message = encode_message(group.ids, group.parents, s.name, group.first_seq, group.times, group.kinds,
                                     group.vs, group.payloads, group.blobs)
            t0 = time.perf_counter()
            offset = writer.write_message(message)
            s.last_write_s = time.perf_counter() - t0
            loc = (writer.number, offset)
        except BaseException as exc:  # an I/O error poisons the session: what is on disk is unknown
            error = exc
        with s.cond:
            if error is None and loc is not None:
                self._index_committed(s, group, loc)
                if s.writer is not None and s.writer.size >= self.max_segment_bytes:
                    try:  # roll over; appends queued meanwhile wait for the seal
                        self._seal_writer(s)
                    except BaseException as exc:
                        error = exc
            s.flushing = False
            if error is not None or loc is None:
                s.broken = error or LedgerError("commit failed")
                if s.writer is not None:
                    s.writer.abandon()
                    s.writer = None
                for g in (group, s.open_group):
                    if g is not None:
                        g.finish(s.broken)
                s.open_group = None
                if not inline:  # the committer thread ends
                    s.committer = None
                s.cond.notify_all()
                return False
            s.inflight -= group.appends
            # decay the peak so a writer that left stops being waited for
            s.peak_inflight = max(float(s.inflight), s.peak_inflight * PEAK_DECAY)
            s.cond.notify_all()
        group.finish()
        return True

    def _index_committed(self, s: _Session, group: _Group, loc: tuple[int, int]) -> None:
        bi = len(s.batches)
        n = len(group.ids)
        first = group.first_seq
        s.batches.append(_BatchLoc(loc[0], loc[1], first, n))
        s.rows += map(_Row, group.ids, group.parents, group.kinds, group.times, itertools.repeat(bi, n), range(n))
        s.ids.update(zip(group.ids, range(first, first + n), strict=True))
        s.pending_ids.difference_update(group.ids)
        self._where.update(dict.fromkeys(group.ids, s.name))
        s.durable_seq = first + n - 1
        s.commits += 1

    def _seal_writer(self, s: _Session) -> None:
        """Compact the session's tail into its sealed segment and point the index at it.

        Called with ``s.cond`` held. The tail is removed last, so a reader that picked a tail
        offset before the index moved still finds the file (or retries, see _batch_entries).
        """
        writer = s.writer
        assert writer is not None
        offsets = writer.seal()
        self._relocate(s, writer.number, offsets)
        s.sealed.add(writer.number)
        s.writer = None
        writer.remove_tail()

    def _relocate(self, s: _Session, number: int, offsets: list[int]) -> None:
        locs = [b for b in s.batches if b.number == number]
        if len(locs) != len(offsets):
            raise LedgerCorrupt(
                f"sealed segment {sealed_name(number)} of session {s.name!r} has {len(offsets)} record "
                f"batches where its tail had {len(locs)}; run verify() on the ledger",
                {"session": s.name, "segment": sealed_name(number)},
            )
        for loc, offset in zip(locs, offsets, strict=True):
            loc.offset = offset

    def _writer(self, s: _Session) -> SegmentWriter:
        if s.writer is None:
            s.writer = SegmentWriter(s.dir, s.next_segment)
            s.next_segment += 1
        return s.writer

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

    def _locate(self, entry_id: str) -> tuple[_Session, int]:
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

    def _read(self, s: _Session, seq: int) -> StoredEntry:
        row = s.rows[seq]
        if row is None:
            raise LedgerCorrupt(f"entry at seq {seq} of session {s.name!r} is in a damaged batch", {"seq": seq})
        return self._batch_entries(s, row.batch)[row.row]

    def _batch_entries(self, s: _Session, bi: int) -> list[StoredEntry]:
        key = (s.name, bi)
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit
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
                            self._relocate(s, loc.number, batch_offsets(sealed_path))
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
        if sum(len(e.blob or b"") for e in entries) <= 8 * 1024 * 1024:
            with self._lock:
                self._cache[key] = entries
                while len(self._cache) > 64:
                    self._cache.popitem(last=False)
        return entries

    def entries(self, session: str, start: int = 0, stop: int | None = None) -> list[StoredEntry]:
        """Entries with ``start <= seq < stop``, in seq order."""
        s = self._session(session)
        n = len(s.rows)
        stop = n if stop is None else min(stop, n)
        if start < 0 or start > stop:
            raise UnknownEntry(f"seq range {start}..{stop} of session {session!r} (it has {n} entries)")
        return [self._read(s, q) for q in range(start, stop)]

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
        return [self._read(s, q) for q in reversed(seqs)]

    # ------------------------------------------------------------------ maintenance

    def verify(self, session: str | None = None) -> VerifyReport:
        """Re-read the session(s) from disk and check every hash link. Names the first bad entry."""
        names = [session] if session is not None else self.sessions()
        report = VerifyReport()
        for name in names:
            d = self._session_dir(name, create=False)
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
        if not self.readonly:
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

    def _check_open(self) -> None:
        if self._closed:
            raise LedgerClosed()

    def __enter__(self) -> LedgerStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stats(self) -> dict[str, Any]:
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
        return {"sessions": len(heads), "entries": total, "by_kind": dict(sorted(by_kind.items())),
                "bytes": disk, "heads": heads}
