"""The ledger's write path, so concurrent appends share syncs: each group is one record batch, one fsync.

Durability: ``append`` returns only after the entries' record batch is synced to the session's tail.
Appends that arrive while a commit is in flight queue up and go out together in the next batch,
under one sync (group commit), written by the session's committer thread, or (a writer alone, when
syncs are cheap) by the writer's own thread. ``GroupCommit`` is the write half of ``LedgerStore``;
the store provides the sessions it writes to.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from vak_context.errors import ChainMoved, InvalidInput, LedgerClosed, LedgerError, UnknownParent
from vak_context.events.envelope import CURRENT_VERSION, At, Mapper, blob_meta, chain_ids
from vak_context.storage.commit_tally import COMMITS
from vak_context.storage.contract import Payload
from vak_context.storage.index_files import IndexFiles
from vak_context.storage.ipc_message import encode_message
from vak_context.storage.ledger_index import PROFILE_KIND, REWRITE_BYTES, write_index
from vak_context.storage.manifest import manifest_of, write_manifest
from vak_context.storage.segment.writer import SegmentWriter
from vak_context.storage.session_state import Group, SessionState, index_group, relocate
from vak_context.storage.write_behind import WriteBehind

# What an append's later entries are, given the ids of its first ones (``append(then=)``): a receipt names its step.
Then = Callable[[list[str]], Sequence[Payload]]
_INLINE = object()  # _enqueue's answer to a writer that commits its own group
INLINE_MAX_WRITE_S = 0.0002  # a sync this fast does not block long enough to cost the writer its CPU
COMMIT_GATHER_S = 0.002  # the longest a commit waits for writers that were recently active
PEAK_DECAY = 0.9  # per commit: a writer that left stops being waited for within a few dozen commits


@dataclass(slots=True)
class _Encoded:
    """One append's entries, validated and encoded (outside the session lock)."""

    kinds: list[str]
    payloads: list[bytes]
    vs: list[int]
    blobs: list[bytes | None]
    metas: list[dict[str, Any] | None]

    def joined(self, more: _Encoded) -> _Encoded:
        return _Encoded(self.kinds + more.kinds, self.payloads + more.payloads, self.vs + more.vs,
                        self.blobs + more.blobs, self.metas + more.metas)




def _check_blobs(payloads: Sequence[Payload], blobs: Sequence[bytes | None] | None) -> None:
    if blobs is not None and len(blobs) != len(payloads):
        raise InvalidInput(f"{len(blobs)} blobs for {len(payloads)} payloads: pass one blob (or None) per payload")


def _not_durable(s: SessionState, group: Group) -> LedgerError:
    return LedgerError(f"append to {s.name!r} was not made durable: {group.error}; reopen the ledger and "
                       "check the disk (the append may or may not be on it)")


class GroupCommit(WriteBehind):
    """The write half of ``LedgerStore``, apart for size: ``append*``, the queue, committer, sealing."""

    # A writer alone may commit its own group in its own thread, saving two thread hand-offs (20-35%
    # of a one-entry commit when the sync is cheap). But when the sync blocks, on a loaded machine the
    # busy writer thread waits far longer for the CPU after its fsync returns than the committer
    # thread, which mostly sleeps and so is scheduled at once (measured here: fsync 5-8 ms from the
    # writer, 0.5-1.4 ms from the committer; docs/PERFORMANCE.md). None: inline while the last
    # commit's write and sync took under INLINE_MAX_WRITE_S; True: always; False: never.
    inline_commits: bool | None = None
    inline_max_write_s = INLINE_MAX_WRITE_S  # the adaptive mode's bound (a store may set its own)

    # set by LedgerStore.__init__
    readonly: bool
    mapper: Mapper
    clock: Callable[[], int]
    max_segment_bytes: int
    _closed: bool
    _where: dict[str, str]
    _sessions: dict[str, SessionState]
    index_files: IndexFiles

    def _session(self, name: str, *, create: bool = False) -> SessionState:
        raise NotImplementedError  # LedgerStore opens sessions

    def _check_open(self) -> None:
        if self._closed:
            raise LedgerClosed()

    def _check_writable(self) -> None:
        if self.readonly:
            raise LedgerError("this LedgerStore is read-only; open it with readonly=False to append")

    def _synced(self, seconds: float) -> None:
        COMMITS.add(0, seconds)  # a sync of what was written behind (WriteBehind.sync): one durable commit

    # ------------------------------------------------------------------ the public calls

    def append(
        self,
        session: str,
        payloads: Sequence[Payload],
        *,
        parent: str | None = None,
        blobs: Sequence[bytes | None] | None = None,
        at: At | None = None,
        then: Then | None = None,
    ) -> list[str]:
        """Append entries as one chain (each the parent of the next); return their ids once durable.

        ``parent`` defaults to the session head. ``blobs[i]`` is the raw body of entry ``i``. ``at``: entries
        the caller chained itself (``vak_context.events.envelope.chained``): appended only where ``at`` says
        the head is, stamped with its time, so their ids are the caller's (``ChainMoved`` otherwise).
        """
        self._check_writable()
        _check_blobs(payloads, blobs)
        s = self._session(session, create=True)
        return self._append_locked_session(s, payloads, parent, blobs, at, then)

    def append_held(self, session: str, payloads: Sequence[Payload], then: Then | None = None,
                    blobs: Sequence[bytes | None] | None = None) -> list[str] | None:
        """``append`` at the head where it waits for nothing: the session open and held (no sync), no commit
        written or queued; else None (append in a thread). For an event loop's writer of a held session
        (actors/local_services.py): a thread hand-off cost about as much as such an append."""
        s = self._sessions.get(session)
        if (s is None or not s.hold or s.flushing or s.open_group is not None or self.readonly or self._closed
                or s.peak_inflight >= 2 or not (s.committer is None or s.committer_idle)):
            return None  # else ``_hand_off`` has the caller write its own group: no wait for another thread
        _check_blobs(payloads, blobs)
        return self._append_locked_session(s, payloads, None, blobs, None, then)

    async def append_async(self, session: str, payloads: Sequence[Payload], *, parent: str | None = None,
                           blobs: Sequence[bytes | None] | None = None) -> list[str]:
        """``append`` for asyncio callers: many coroutines share commits without a thread each."""
        self._check_writable()
        _check_blobs(payloads, blobs)
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
            raise _not_durable(s, group) from group.error
        return new

    async def append_many_async(
        self, session: str, requests: Sequence[tuple[Sequence[Payload], Sequence[bytes | None] | None]],
    ) -> list[list[str] | BaseException]:
        """Several appends to one session's head, in order, under one commit: what a caller-side
        client coalesced into one call. Each request is its own chain link run, as if appended
        alone; a request that fails (an invalid payload) gets its error and the others go on."""
        self._check_writable()
        s = self._session(session, create=True)
        loop = asyncio.get_running_loop()
        queued: list[tuple[asyncio.Future[None], Group, list[str]] | BaseException] = []
        with s.cond:  # reentrant: the committer takes all of them or none
            for payloads, blobs in requests:
                try:
                    _check_blobs(payloads, blobs)
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
                results.append(_not_durable(s, group) if group.error is not None else exc)
        return results

    def append_many(
        self, session: str,
        requests: Sequence[tuple[Sequence[Payload], Sequence[bytes | None] | None]
                           | tuple[Sequence[Payload], Sequence[bytes | None] | None, At | None]],
        *, behind: bool = False,
    ) -> list[list[str] | BaseException]:
        """``append_many_async`` for a thread caller (the LedgerActor's ``append_batch``).

        Leader/follower: the calling thread writes the group itself when no commit is being
        written, else waits for the one that is and then writes what is queued (its own appends
        and any that joined them), unless another writer took them meanwhile. No hand-off to the
        committer thread and back: the call already carries a whole group, so there is nobody to
        wait for (measured in docs/PERFORMANCE.md, "The actor path").

        ``behind``: written without an fsync, as if the session were held, for this call's appends only (a
        group that a durable append joins is synced all the same); ``sync`` makes them durable.
        """
        self._check_writable()
        s = self._session(session, create=True)
        queued: list[tuple[Group, list[str]] | BaseException] = []
        with s.cond:  # reentrant: the requests join one group in order
            peak, inflight = s.peak_inflight, s.inflight
            for request in requests:  # (payloads, blobs) at the head, or (payloads, blobs, at): see ``append``
                payloads, blobs = request[0], request[1]
                try:
                    _check_blobs(payloads, blobs)
                    queued.append(self._queue_locked(s, self._encode(payloads, blobs), None,
                                                     request[2] if len(request) > 2 else None, behind))
                except Exception as exc:  # handed back to that request's caller
                    queued.append(exc)
            # One call is one writer, however many runs it carries: counted as several, a chained step's commit
            # (a run per blob) made the next lone append wait for writers that never come (COMMIT_GATHER_S).
            s.peak_inflight = max(peak, float(min(s.inflight, inflight + 1)))
            group = self._lead_or_follow(s, [q[0] for q in queued if not isinstance(q, BaseException) and q[1]])
        if group is not None:
            self._commit(s, group, inline=True)
        return [q if isinstance(q, BaseException) else _not_durable(s, q[0]) if q[0].error is not None else q[1]
                for q in queued]

    @staticmethod
    def _lead_or_follow(s: SessionState, groups: list[Group]) -> Group | None:
        """Wait (``s.cond`` held) until ``groups`` are durable or failed (None), or until no commit
        is being written while the last of them is still queued: then take it (the caller writes it)."""
        if not groups:
            return None
        last = groups[-1]
        end = last.first_seq + len(last.ids) - 1  # its last entry's seq: durable once durable_seq reaches it
        while s.durable_seq < end and last.error is None and s.broken is None:
            if not s.flushing and s.open_group is last:
                s.open_group = None
                s.flushing = True
                return last
            s.cond.wait()
        return None

    def append_one(self, session: str, payload: Payload, *, parent: str | None = None, blob: bytes | None = None) -> str:
        return self.append(session, [payload], parent=parent, blobs=[blob])[0]

    def _append_locked_session(
        self, s: SessionState, payloads: Sequence[Payload], parent: str | None, blobs: Sequence[bytes | None] | None,
        at: At | None = None, then: Then | None = None,
    ) -> list[str]:
        group, new, lock = self._enqueue(s, payloads, parent, blobs, None, at, then)
        if not new:
            return []
        if lock is _INLINE:
            self._commit(s, group, inline=True)
        else:
            lock.acquire()  # released by the committer once the group is durable (or failed)
        if group.error is not None:
            raise _not_durable(s, group) from group.error
        return new

    # ------------------------------------------------------------------ the queue

    def _encode(self, payloads: Sequence[Payload], blobs: Sequence[bytes | None] | None) -> _Encoded:
        """Validate and encode one append's payloads, and hash its blobs."""
        kinds: list[str] = []
        datas: list[bytes] = []
        encode = self.mapper.encode_payload
        for p in payloads:
            kind, data = encode(p)
            kinds.append(kind)
            datas.append(data)
        vs = [CURRENT_VERSION.get(k, 1) for k in kinds]
        if blobs is None:
            blob_list: list[bytes | None] = [None] * len(payloads)
            metas: list[dict[str, Any] | None] = blob_list  # type: ignore[assignment]  # all None
        else:
            blob_list = list(blobs)
            for b in blob_list:
                self.mapper.check_blob(b)
            metas = [blob_meta(b) for b in blob_list]
        return _Encoded(kinds, datas, vs, blob_list, metas)

    def _enqueue(
        self, s: SessionState, payloads: Sequence[Payload], parent: str | None,
        blobs: Sequence[bytes | None] | None, fut: asyncio.Future[None] | None, at: At | None = None,
        then: Then | None = None,
    ) -> tuple[Group, list[str], Any]:
        """Give the entries their seq, parent and id, and queue them for the next commit.

        Returns the group, the new ids, and (for a thread caller, ``fut`` None) the lock the
        caller blocks on until the group is durable, or ``_INLINE`` when it commits the group itself.
        """
        # Validation, encoding and blob hashing happen outside the lock; only seq, parent and the
        # id are serial.
        enc = self._encode(payloads, blobs)
        with s.cond:
            if then is not None:  # the rest names these entries' ids: chained at the head, one group with them
                at = At(s.head, s.next_seq, self.clock()) if at is None else at
                ids = chain_ids(at.parent, s.name, at.seq, at.time_us, enc.kinds, enc.vs, enc.payloads, enc.metas)
                enc = enc.joined(self._encode(then(ids), None))
            group, new = self._queue_locked(s, enc, parent, at)
            if not new:
                return group, [], None
            return group, new, self._hand_off(s, group, fut)

    def _queue_locked(self, s: SessionState, enc: _Encoded, parent: str | None,
                      at: At | None = None, behind: bool = False) -> tuple[Group, list[str]]:
        """Give one append's entries seq, parent and id and add them to the open group (s.cond held); with
        ``at``, only where it says the head is (the ids are then the ones its caller computed)."""
        self._check_open()
        if s.broken is not None:
            raise LedgerError(f"session {s.name!r} writer failed earlier ({s.broken}); reopen the ledger")
        prev = parent if parent is not None else s.head
        if parent is not None and parent not in s.ids and parent not in s.pending_ids:
            raise UnknownParent(parent, s.name)
        if at is not None and (parent is not None or at.parent != s.head or at.seq != s.next_seq):
            raise ChainMoved(s.name, at.parent, at.seq, s.head, s.next_seq)
        if not enc.kinds:
            return Group(s.next_seq), []
        now = self.clock() if at is None else at.time_us
        new = chain_ids(prev, s.name, s.next_seq, now, enc.kinds, enc.vs, enc.payloads, enc.metas)
        group = s.open_group
        if group is None:
            group = s.open_group = Group(s.next_seq)
        s.next_seq += len(new)
        group.add(new, prev, now, enc.kinds, enc.vs, enc.payloads, enc.blobs)
        if not s.hold and not behind:
            group.sync = True
        s.inflight += 1
        if s.inflight > s.peak_inflight:
            s.peak_inflight = float(s.inflight)
        s.pending_ids.update(new)
        s.head = new[-1]
        return group, new

    def _hand_off(self, s: SessionState, group: Group, fut: asyncio.Future[None] | None) -> Any:
        """Who commits the group (``s.cond`` held): ``_INLINE`` (the caller), else the committer, and
        the lock (None for ``fut`` callers) the caller waits on."""
        inline = self.inline_commits
        if inline is None:
            inline = s.last_write_s < self.inline_max_write_s
        if (fut is None and (inline or not group.sync) and group.appends == 1 and not s.flushing
                and s.peak_inflight < 2 and (s.committer is None or s.committer_idle)):
            # A writer alone (no commit in flight, none recently concurrent) commits its own
            # group in its own thread: two thread hand-offs (to the committer and back) cost
            # about as much as a small commit. Marked flushing, so the committer waits for it.
            s.open_group = None
            s.flushing = True
            return _INLINE
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
        return lock

    # ------------------------------------------------------------------ the commit

    def _commit_loop(self, s: SessionState) -> None:
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

    def _commit(self, s: SessionState, group: Group, *, inline: bool) -> bool:
        """Write and sync a group taken from the queue (``s.flushing`` set), index it, wake its
        waiters. False when it failed: the session is then broken, and every queued append fails."""
        error: BaseException | None = None
        loc: tuple[int, int] | None = None
        try:
            writer = self._writer(s)
            message = encode_message(group.ids, group.parents, s.name, group.first_seq, group.times, group.kinds,
                                     group.vs, group.payloads, group.blobs)
            t0 = time.perf_counter()
            offset = writer.write_message(message, sync=group.sync)
            seconds = time.perf_counter() - t0
            if group.sync:  # only a synced write tells how long a sync blocks (the inline rule's measure)
                s.last_write_s = seconds
            COMMITS.add(len(group.ids), seconds, synced=group.sync)
            loc = (writer.number, offset)
        except BaseException as exc:  # an I/O error poisons the session: what is on disk is unknown
            error = exc
        with s.cond:
            if error is None and loc is not None:
                s.unsynced = not group.sync  # an fsync covers every write before it
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


    def _index_committed(self, s: SessionState, group: Group, loc: tuple[int, int]) -> None:
        index_group(s, group, loc)
        self._where.update(dict.fromkeys(group.ids, s.name))
        index, writer = s.index, s.writer
        if index is None or writer is None:
            return
        index.segment, index.offset = writer.number, writer.size
        # The index file follows a new profile at once (what binding reads) and the rest every REWRITE_BYTES,
        # so a reader after a crash reads at most that much of the tail (storage/ledger_index.py). Not synced:
        # the entries are durable, and an index a power cut tears is rebuilt from them.
        if PROFILE_KIND in group.kinds or writer.size - s.index_bytes >= REWRITE_BYTES:
            if s.hold or not group.sync:  # written behind: the file follows in the background (index_files.py)
                self.index_files.mark(s)
            else:
                write_index(s.dir, index, durable=False)
            s.index_bytes = writer.size

    def _seal_writer(self, s: SessionState) -> None:
        """Compact the session's tail into its sealed segment and point the index at it.

        Called with ``s.cond`` held. The tail is removed last, so a reader that picked a tail
        offset before the index moved still finds the file (or retries, see _batch_entries).
        """
        writer = s.writer
        assert writer is not None
        offsets = writer.seal()  # the sealed copy is synced: it covers what was written behind a hold
        s.unsynced = False
        relocate(s, writer.number, offsets)
        s.sealed.add(writer.number)
        s.writer = None
        # Once per seal, never per append: the new head, for verify() to detect lost newest segments.
        # Before the tail goes, so a crash in between leaves the tail, which the next open removes.
        s.manifest = manifest_of(s, s.manifest)
        write_manifest(s.dir, s.manifest)
        if s.index is not None:  # and the index, durably: it covers the sealed segment, the next tail is uncovered
            s.index.segment, s.index.offset = s.next_segment, 0
            write_index(s.dir, s.index, durable=True)
            s.index_bytes = 0
        writer.remove_tail()

    def _writer(self, s: SessionState) -> SegmentWriter:
        if s.writer is None:
            s.writer = SegmentWriter(s.dir, s.next_segment)
            s.next_segment += 1
        return s.writer

