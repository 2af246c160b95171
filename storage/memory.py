"""An in-memory ledger: the whole ``vak_context.storage.contract.Ledger`` contract with no folder behind it.

The ledger's test fake, in the way LangGraph's ``InMemorySaver`` is the checkpointer's: code written against
the contract runs on it unchanged, and the same conformance suite (tests/fakes/ledger_contract.py) holds it
to what ``LedgerStore`` does. Entries are encoded and hashed by the same functions (``Mapper.encode_payload``,
``blob_meta``, ``chain_ids``), so a session appended with the same payloads at the same clock readings has
the same ids, byte for byte, on both; a bad input raises the same typed error, checked in the same order.

What it is not: durable (nothing outlives the process, and ``close`` drops everything), or shared between
processes. ``verify`` re-checks every held entry's hash link, as ``LedgerStore.verify`` re-reads its segments;
``stats().bytes`` counts the payload and blob bytes held, where the store counts its segment files.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from vak_context.errors import LedgerClosed, UnknownEntry, UnknownParent, UnknownSession
from vak_context.events import canonical
from vak_context.events.envelope import (
    CURRENT_VERSION,
    LedgerLimits,
    Mapper,
    StoredEntry,
    blob_meta,
    chain_ids,
)
from vak_context.events.payloads import PAYLOAD_TYPES
from vak_context.names import check_name
from vak_context.storage.contract import LedgerStats, Payload
from vak_context.storage.group_commit import _check_blobs
from vak_context.storage.ledger_index import PROFILE_KIND, newer, profile_key
from vak_context.storage.verify import BadEntry, VerifyReport

__all__ = ["InMemoryLedger"]

SEGMENT = "<memory>"  # what a BadEntry names as the segment: there is none


def _now_us() -> int:
    return time.time_ns() // 1000


@dataclass
class _Session:
    name: str
    entries: list[StoredEntry] = field(default_factory=list)
    ids: dict[str, int] = field(default_factory=dict)  # entry id -> seq
    batches: list[int] = field(default_factory=list)  # each append's first seq (a "batch", as on disk)
    head: str | None = None


class InMemoryLedger:
    """A ledger held in this process's memory. Thread-safe; ``limits`` and ``clock`` as for ``LedgerStore``."""

    def __init__(self, *, limits: LedgerLimits | None = None, clock: Callable[[], int] = _now_us) -> None:
        self.mapper = Mapper(limits)
        self.clock = clock
        self._sessions: dict[str, _Session] = {}
        self._where: dict[str, str] = {}  # entry id -> session
        self._lock = threading.RLock()
        self._closed = False

    # ------------------------------------------------------------------ sessions

    def _check_open(self) -> None:
        if self._closed:
            raise LedgerClosed()

    def _session(self, name: str, *, create: bool = False) -> _Session:
        """The session (made empty with ``create``); the same checks, in the same order, as the store's."""
        self._check_open()
        s = self._sessions.get(name) if isinstance(name, str) else None
        if s is not None:
            return s
        check_name(name, "session name")
        if not create:
            raise UnknownSession(name)
        s = self._sessions[name] = _Session(name)
        return s

    def sessions(self) -> list[str]:
        with self._lock:
            self._check_open()
            return sorted(self._sessions)

    def profile_entry(self, provider: str, model: str, quantisation: str = "") -> StoredEntry | None:
        """The newest ``capacity_profile`` entry for the key: a scan of what is held (no folder to index)."""
        key = (provider, model, quantisation)
        best: StoredEntry | None = None
        with self._lock:
            self._check_open()
            entries = [e for name in sorted(self._sessions) for e in self._sessions[name].entries]
        for entry in entries:
            if entry.kind == PROFILE_KIND and profile_key(entry.v, entry.payload) == key and newer(entry, best):
                best = entry
        return best

    # ------------------------------------------------------------------ appending

    def append(
        self, session: str, payloads: Sequence[Payload], *, parent: str | None = None,
        blobs: Sequence[bytes | None] | None = None,
    ) -> list[str]:
        """Append entries as one chain (parent: the session head by default); their ids.

        Like the store, the session exists from the first append to it, even one that then fails
        validation: the store makes its folder before it encodes the payloads.
        """
        _check_blobs(payloads, blobs)
        with self._lock:
            s = self._session(session, create=True)
        kinds, datas = [], []
        for p in payloads:
            kind, data = self.mapper.encode_payload(p)
            kinds.append(kind)
            datas.append(data)
        blob_list: list[bytes | None] = [None] * len(datas) if blobs is None else list(blobs)
        for b in blob_list:
            self.mapper.check_blob(b)
        metas = [blob_meta(b) for b in blob_list]
        vs = [CURRENT_VERSION.get(k, 1) for k in kinds]
        with self._lock:
            self._check_open()
            if parent is not None and parent not in s.ids:
                raise UnknownParent(parent, s.name)
            if not kinds:
                return []
            prev = parent if parent is not None else s.head
            now, first = self.clock(), len(s.entries)
            ids = chain_ids(prev, s.name, first, now, kinds, vs, datas, metas)
            parents = [prev, *ids[:-1]]
            for i, eid in enumerate(ids):
                blob = blob_list[i]
                s.entries.append(StoredEntry(id=eid, parent=parents[i], session=s.name, seq=first + i, time_us=now,
                                             kind=kinds[i], v=vs[i], payload=datas[i],
                                             blob=None if blob is None else bytes(blob)))
                s.ids[eid] = first + i
                self._where[eid] = s.name
            s.batches.append(first)
            s.head = ids[-1]
            return ids

    def append_one(self, session: str, payload: Payload, *, parent: str | None = None, blob: bytes | None = None) -> str:
        return self.append(session, [payload], parent=parent, blobs=[blob])[0]

    async def append_async(
        self, session: str, payloads: Sequence[Payload], *, parent: str | None = None,
        blobs: Sequence[bytes | None] | None = None,
    ) -> list[str]:
        """``append`` for asyncio callers (nothing to wait for: it holds the lock only for the bookkeeping)."""
        return self.append(session, payloads, parent=parent, blobs=blobs)

    # ------------------------------------------------------------------ reading

    def head(self, session: str) -> str | None:
        with self._lock:
            return self._session(session).head

    def count(self, session: str) -> int:
        with self._lock:
            return len(self._session(session).entries)

    def _locate(self, entry_id: str) -> tuple[_Session, int]:
        self._check_open()
        if not isinstance(entry_id, str):
            raise UnknownEntry(repr(entry_id))
        name = self._where.get(entry_id)
        if name is None:
            raise UnknownEntry(entry_id)
        s = self._sessions[name]
        return s, s.ids[entry_id]

    def get(self, entry_id: str) -> StoredEntry:
        with self._lock:
            s, seq = self._locate(entry_id)
            return s.entries[seq]

    def payload(self, entry_id: str) -> Any:
        return self.mapper.payload_of(self.get(entry_id))

    def entries(self, session: str, start: int = 0, stop: int | None = None) -> list[StoredEntry]:
        """Entries with ``start <= seq < stop``, in seq order."""
        with self._lock:
            s = self._session(session)
            n = len(s.entries)
            if not isinstance(start, int) or not isinstance(stop, int | None):
                raise UnknownEntry(f"seq range {start!r}..{stop!r} of session {session!r}: seqs are integers")
            stop = n if stop is None else min(stop, n)
            if start < 0 or start > stop:
                raise UnknownEntry(f"seq range {start}..{stop} of session {session!r} (it has {n} entries)")
            return s.entries[start:stop]

    def iter_metadata(self, session: str) -> Iterable[tuple[int, str, str | None, str, int]]:
        """(seq, id, parent, kind, time_us) for every entry, as the store gives them."""
        return [(e.seq, e.id, e.parent, e.kind, e.time_us) for e in self.entries(session)]

    def chain_to_root(self, entry_id: str) -> list[StoredEntry]:
        """The entries from the session root down to ``entry_id``, oldest first, following parents."""
        with self._lock:
            s, seq = self._locate(entry_id)
            chain: list[StoredEntry] = []
            cur: int | None = seq
            while cur is not None:
                e = s.entries[cur]
                chain.append(e)
                cur = s.ids[e.parent] if e.parent is not None else None  # appends only name held parents
            return chain[::-1]

    # ------------------------------------------------------------------ maintenance

    def verify(self, session: str | None = None) -> VerifyReport:
        """Re-check every held entry (session, seq, kind, canonical payload, hash, parent), naming the first bad one."""
        with self._lock:
            self._check_open()
            names = [session] if session is not None else sorted(self._sessions)
            report = VerifyReport()
            for name in names:
                report.first_bad = _verify_session(self._session(name), report)
                if not report.ok:
                    break
            return report

    def stats(self) -> LedgerStats:
        """Sessions, entries by kind, heads, and the bytes held (payloads and blobs)."""
        with self._lock:
            self._check_open()
            by_kind: dict[str, int] = {}
            held = 0
            for s in self._sessions.values():
                for e in s.entries:
                    by_kind[e.kind] = by_kind.get(e.kind, 0) + 1
                    held += len(e.payload) + len(e.blob or b"")
            heads = {name: self._sessions[name].head for name in sorted(self._sessions)}
            return LedgerStats(sessions=len(heads), entries=sum(by_kind.values()),
                               by_kind=dict(sorted(by_kind.items())), bytes=held, heads=heads)

    def checkpoint(self) -> None:
        """Nothing to seal: every appended entry is already visible to every reader."""
        self._check_open()

    def close(self) -> None:
        """Drop what the ledger holds; every later call but ``close`` raises LedgerClosed."""
        with self._lock:
            self._closed = True
            self._sessions.clear()
            self._where.clear()

    def __enter__(self) -> InMemoryLedger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _verify_session(s: _Session, report: VerifyReport) -> BadEntry | None:
    """Count the session's entries into ``report``; the first bad one, checked as verify_session checks a row."""
    report.sessions += 1
    seen: set[str] = set()
    starts = s.batches
    for seq, e in enumerate(s.entries):
        batch = bisect_right(starts, seq) - 1
        reason = _problem(e, s.name, seq, seen)
        if reason:
            return BadEntry(s.name, SEGMENT, batch, seq - starts[batch], seq, e.id, reason)
        seen.add(e.id)
        report.entries += 1
    return None


def _problem(e: StoredEntry, session: str, expected_seq: int, seen: set[str]) -> str:
    if e.session != session:
        return f"session column says {e.session!r}"
    if e.seq != expected_seq:
        return f"seq {e.seq} where {expected_seq} was expected"
    if e.kind not in PAYLOAD_TYPES:
        return f"unknown kind {e.kind!r}"
    if not canonical.is_canonical(e.payload):
        return "payload bytes are not canonical JSON (altered, or not UTF-8)"
    if e.compute_id() != e.id:
        return "content does not hash to the entry's id (tampered)"
    if e.parent is not None and e.parent not in seen:
        return f"parent {e.parent} is not an earlier entry of the session"
    return ""
