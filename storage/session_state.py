"""What a LedgerStore keeps per session: the row index, batch locations, and the writer's state
(the group of appends waiting for the next commit, the committer thread, the open tail)."""

from __future__ import annotations

import _thread
import asyncio
import itertools
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from vak_context.errors import LedgerCorrupt
from vak_context.events.envelope import StoredEntry
from vak_context.storage.ledger_index import PROFILE_KIND, SessionIndex
from vak_context.storage.segment.files import sealed_name
from vak_context.storage.segment.schema import from_batch
from vak_context.storage.segment.writer import SegmentWriter


@dataclass(slots=True)
class Row:
    id: str
    parent: str | None
    kind: str
    time_us: int
    batch: int  # index into SessionState.batches
    row: int


@dataclass(slots=True)
class BatchLoc:
    number: int  # segment number
    offset: int
    first_seq: int
    rows: int


class Group:
    """Entries that go to disk together: one record batch, one fsync.

    Held as columns, the shape the batch is written in: no per-entry object is made on the way
    to disk (ids, parents and seqs are all the index needs afterwards).
    """

    __slots__ = ("appends", "blobs", "error", "first_seq", "futures", "ids", "kinds", "parents", "payloads",
                 "sync", "times", "vs", "waiters")

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
        self.sync = False  # fsync'd when written: some append in it was made outside a hold (GroupCommit.hold)
        # A held lock per blocked thread, released by finish(): each waiter wakes on its own lock
        # instead of all of them re-acquiring one condition's lock in turn.
        self.waiters: list[Any] = []
        self.futures: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = {}

    def add(self, ids: list[str], first_parent: str | None, now: int, kinds: list[str], vs: list[int],
            payloads: list[bytes], blobs: list[bytes | None]) -> None:
        """Add one append's entries, a chain run from ``first_parent`` (each the parent of the next)."""
        n = len(ids)
        self.ids += ids
        self.parents.append(first_parent)
        self.parents += ids[:-1]
        self.times += [now] * n
        self.kinds += kinds
        self.vs += vs
        self.payloads += payloads
        self.blobs += blobs
        self.appends += 1

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
                loop.call_soon_threadsafe(settle, futs, error)
            except RuntimeError:  # that loop was closed: nobody waits there, and the committer must go on
                pass


def settle(futs: list[asyncio.Future[None]], error: BaseException | None) -> None:
    for fut in futs:
        if not fut.done():
            if error is None:
                fut.set_result(None)
            else:
                fut.set_exception(error)


@dataclass
class SessionState:
    name: str
    dir: Path
    rows: list[Row | None] = field(default_factory=list)  # index = seq; None = in a damaged batch
    ids: dict[str, int] = field(default_factory=dict)
    batches: list[BatchLoc] = field(default_factory=list)
    damaged: list[dict[str, Any]] = field(default_factory=list)
    sealed: set[int] = field(default_factory=set)  # segment numbers already sealed
    manifest: Any = None  # the manifest last read or written (vak_context.storage.manifest.Manifest)
    index: SessionIndex | None = None  # head and newest profiles, kept on every commit (storage/ledger_index.py)
    index_bytes: int = 0  # the tail's size when the index file was last written
    next_segment: int = 1
    # writer state
    lock_fd: int | None = None
    writer: SegmentWriter | None = None
    cond: threading.Condition = field(default_factory=threading.Condition)
    open_group: Group | None = None  # appends waiting for the next commit
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
    # Write-behind (GroupCommit.hold): while held, appends are written and readable but not synced, and
    # ``unsynced`` says the tail has writes no fsync covers yet (the next sync, or any durable commit, does).
    hold: int = 0
    unsynced: bool = False


def index_batch(s: SessionState, number: int, offset: int, batch: pa.RecordBatch) -> None:
    """Index a record batch read from disk (segment ``number``, message at ``offset``)."""
    seqs = batch.column("seq").to_pylist()
    ids = batch.column("id").to_pylist()
    parents = batch.column("parent").to_pylist()
    kinds = batch.column("kind").to_pylist()
    times = batch.column("time").view(pa.int64()).to_pylist()  # zero-copy: cast costs 16 us a batch
    bi = len(s.batches)
    s.batches.append(BatchLoc(number, offset, seqs[0] if seqs else len(s.rows), len(seqs)))
    index = s.index if s.index is not None else SessionIndex(s.name)
    s.index = index
    payloads = batch.column("payload").view(pa.large_binary()) if PROFILE_KIND in kinds else None
    vs = batch.column("v").to_pylist() if payloads is not None else None
    for i, seq in enumerate(seqs):
        while len(s.rows) < seq:
            s.rows.append(None)
        row = Row(ids[i], parents[i], kinds[i], times[i], bi, i)
        if seq == len(s.rows):
            s.rows.append(row)
        else:  # out of order seq: keep the first, verify() reports the rest
            continue
        s.ids[ids[i]] = seq
        if payloads is not None and vs is not None and kinds[i] == PROFILE_KIND:
            index.note(seq, ids[i], parents[i], times[i], kinds[i], vs[i], payloads[i].as_py())
        else:
            index.note(seq, ids[i], parents[i], times[i], kinds[i], 1, None)


def index_group(s: SessionState, group: Group, loc: tuple[int, int]) -> None:
    """Index a group just written at ``loc`` (segment number, offset): rows, ids, durable seq."""
    bi = len(s.batches)
    n = len(group.ids)
    first = group.first_seq
    s.batches.append(BatchLoc(loc[0], loc[1], first, n))
    s.rows += map(Row, group.ids, group.parents, group.kinds, group.times, itertools.repeat(bi, n), range(n))
    s.ids.update(zip(group.ids, range(first, first + n), strict=True))
    if s.index is None:
        s.index = SessionIndex(s.name)
    if PROFILE_KIND in group.kinds:
        for i in range(n):
            s.index.note(first + i, group.ids[i], group.parents[i], group.times[i], group.kinds[i], group.vs[i],
                         group.payloads[i])
    else:  # the head and the seq alone: no payload is looked at
        s.index.seq, s.index.head = first + n, group.ids[-1]
    s.pending_ids.difference_update(group.ids)
    s.durable_seq = first + n - 1  # written and readable; synced too unless the group was written behind
    if group.sync:
        s.commits += 1


def group_entries(session: str, group: Group) -> list[StoredEntry]:
    """A group's entries as ``from_batch`` decodes the batch it was written as (field for field)."""
    return [StoredEntry(entry_id, parent, session, group.first_seq + i, time_us, kind, v, payload, blob)
            for i, (entry_id, parent, time_us, kind, v, payload, blob) in enumerate(zip(
                group.ids, group.parents, group.times, group.kinds, group.vs, group.payloads, group.blobs,
                strict=True))]


def relocate(s: SessionState, number: int, offsets: list[int]) -> None:
    """Point the session's batches in segment ``number`` at their offsets in its sealed copy."""
    locs = [b for b in s.batches if b.number == number]
    if len(locs) != len(offsets):
        raise LedgerCorrupt(
            f"sealed segment {sealed_name(number)} of session {s.name!r} has {len(offsets)} record "
            f"batches where its tail had {len(locs)}; run verify() on the ledger",
            {"session": s.name, "segment": sealed_name(number)},
        )
    for loc, offset in zip(locs, offsets, strict=True):
        loc.offset = offset


def decoded_newest(name: str, read: list[tuple[int, pa.RecordBatch]], max_bytes: int,
                   max_batches: int) -> list[tuple[tuple[str, int], list[StoredEntry]]]:
    """The newest of ``read`` (batch index, batch), within ``max_bytes`` and ``max_batches``, decoded, keyed
    for the store's batch cache. Within a count of batches too: past the cache's count the oldest kept were
    evicted as they were put (and a whole read of the session then missed on every batch, each read from its
    file again). Decoded as one batch, then cut: a batch is a commit, often of one entry, and decoding each
    alone paid the per-column conversion for every one (~65 us a batch, 1.7 s of a 14,000-commit session's
    open)."""
    kept: list[tuple[int, pa.RecordBatch]] = []
    size = 0
    for bi, batch in reversed(read):
        size += batch.nbytes
        if size > max_bytes or len(kept) >= max_batches:
            break
        kept.append((bi, batch))
    if not kept or not any(b.num_rows for _, b in kept):
        return []
    kept.reverse()
    rows = from_batch(pa.Table.from_batches([b for _, b in kept]).combine_chunks().to_batches()[0])
    out: list[tuple[tuple[str, int], list[StoredEntry]]] = []
    at = 0
    for bi, batch in kept:
        out.append(((name, bi), rows[at:at + batch.num_rows]))
        at += batch.num_rows
    return out
