"""Appends from one process's threads, coalesced into few LedgerActor calls: a call costs more than a commit.

An actor call costs about a millisecond or two, more than the commit it waits for, so while calls
are in flight (two per session at most) the appends of other threads queue here and go out
together as the next call (``append_batch``), which the actor commits under one sync. Each caller
still gets its own ids, or its own error. Pure threading: the actor call and the wait for its
result (``get``) are given, so the rules are testable without Ray.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

GATHER_S = 0.002  # the longest a call waits for writers that were recently active
PEAK_DECAY = 0.9  # per call: a writer that left stops being waited for within a few dozen calls


class _Request:
    __slots__ = ("blobs", "error", "finished", "ids", "lead", "payloads", "wake")

    def __init__(self, payloads: list[Any], blobs: list[bytes | None] | None) -> None:
        self.payloads = payloads
        self.blobs = blobs
        self.wake = threading.Event()  # set when finished, or when made a sender
        self.finished = False
        self.lead = False  # this request's thread holds a call slot: it sends the next call
        self.ids: list[str] = []
        self.error: BaseException | None = None

    def result(self) -> list[str]:
        if self.error is not None:
            raise self.error
        return self.ids


class AppendCoalescer:
    """Turns concurrent ``append`` calls from this process's threads into few actor calls per session.

    At most ``max_in_flight`` calls per session are in flight. A thread whose append finds a free
    slot sends every append queued for that session so far, its own included. When a call returns
    its sender hands the results out, frees its slot and gives free slots to the oldest appends
    still queued, whose threads send the next calls. Two slots let one call's commit overlap the
    next call's trip to the actor; each call still carries everything that queued meanwhile.
    """

    def __init__(self, handle: Any, *, get: Callable[[Any], Any], max_in_flight: int = 2) -> None:
        """``get`` waits for a call's result (``ray.get``, its errors translated: vak_context.actors.ledger.remote)."""
        self.handle = handle
        self._get = get
        self.max_in_flight = max_in_flight
        self._lock = threading.Condition(threading.Lock())  # notified whenever an append queues
        self._queued: dict[str, list[_Request]] = {}
        self._inflight: dict[str, int] = {}
        self._carried: dict[str, int] = {}  # appends inside calls in flight
        self._outstanding: dict[str, int] = {}  # appends not yet returned to their callers
        self._peak: dict[str, float] = {}  # recent peak of outstanding: how many writers are really concurrent
        self.calls = 0  # actor calls made: fewer than appends when they were coalesced

    def append(self, session: str, payloads: Sequence[Any], blobs: Sequence[bytes | None] | None) -> list[str]:
        req = _Request(list(payloads), list(blobs) if blobs is not None else None)
        with self._lock:
            self._queued.setdefault(session, []).append(req)
            out = self._outstanding[session] = self._outstanding.get(session, 0) + 1
            if out > self._peak.get(session, 0.0):
                self._peak[session] = float(out)
            self._lock.notify_all()
            if self._inflight.get(session, 0) < self.max_in_flight:
                self._inflight[session] = self._inflight.get(session, 0) + 1
                req.lead = True
        while True:
            with self._lock:
                lead, req.lead = req.lead, False
                if req.finished:
                    if lead:  # made a sender, but another call already carried this append
                        self._release(session)
                    break
                if not lead:
                    req.wake.clear()
            if lead:
                self._send(session)
            else:
                req.wake.wait()
        with self._lock:
            self._outstanding[session] -= 1
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
        """Send what is queued for ``session`` as one call (holding a slot), answer it, free the slot."""
        get = self._get
        with self._lock:
            # Writers that were just answered come straight back: wait a moment (at most
            # GATHER_S) for as many as were recently concurrent, so they share this call instead
            # of splitting into small calls that alternate (the store's committer does the same).
            want = int(self._peak.get(session, 1.0)) - self._carried.get(session, 0)
            if want > 1:
                self._lock.wait_for(lambda: len(self._queued.get(session, ())) >= want, GATHER_S)
            batch = self._queued.pop(session, [])
            self._carried[session] = self._carried.get(session, 0) + len(batch)
            self._peak[session] = max(float(self._outstanding.get(session, 0)),
                                      self._peak.get(session, 0.0) * PEAK_DECAY)
        try:
            if batch:
                self.calls += 1
                try:
                    results = get(self.handle.append_batch.remote(session, [(r.payloads, r.blobs) for r in batch]))
                except BaseException as exc:  # the call itself failed: every append in it failed
                    results = [exc] * len(batch)
                for r, res in zip(batch, results, strict=True):
                    if isinstance(res, BaseException):
                        r.error = res
                    else:
                        r.ids = list(res)
        finally:
            with self._lock:
                self._carried[session] -= len(batch)
                for r in batch:
                    r.finished = True
                    r.wake.set()
                self._release(session)

    def _release(self, session: str) -> None:
        """Free a call slot (lock held) and give free slots to the oldest queued appends."""
        n = self._inflight.get(session, 1) - 1
        for r in self._queued.get(session, ()):
            if n >= self.max_in_flight:
                break
            if not r.lead:
                r.lead = True
                r.wake.set()
                n += 1
        if n:
            self._inflight[session] = n
        else:
            self._inflight.pop(session, None)

