"""SessionLeases: who may serve a session now, for every ``vak serve`` worker of one ledger folder.

Several serve workers (processes, on one machine or several) share a folder through its LedgerActor, and
any of them may receive any request. A session's requests must still run one at a time, and a worker may
trust what it holds of a session in memory (its bound ``Session``, the history it holds, a turn left open for
the client's tool results) only while no other worker has written to the session since. So a worker serves
a request of session ``key`` only under the session's *lease*: ``acquire`` waits until no other worker holds
it and answers with a token and the worker that held it last (a different one: what this worker holds of the
session is stale, and it reads the session from the ledger again); ``release`` with that token lets the
next one in. A plain class, wrapped by ``vak_context.actors.factory.session_leases`` as an async actor: a
waiting ``acquire`` costs a suspended coroutine, not a thread.

A session whose last request left a turn open (the client runs the calls it was handed) stays with the
worker holding that turn in memory: ``release`` says so (``open_at``: the worker's own address for forwarded
requests), and until that worker releases the session with no turn open, ``acquire`` from another worker
answers where to forward the request instead of a lease (``acquire`` with ``forwarded``: the request came
that way, and is served where it is).

A worker that dies holding a lease must not block its sessions for ever: its supervisor ``drop``s the dead
worker's leases at once, and a worker that stops renewing (``renew``, every few seconds while it runs; any
call of it counts) for ``EXPIRE_S`` loses them to the next worker that waits for one.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

EXPIRE_S = 60.0  # a worker silent this long (no call, no renew) has its leases taken by whoever waits
CHECK_S = 5.0  # how often a waiting acquire looks whether the holder went silent


@dataclass
class LeaseStats:
    """What the leases did so far: leases granted, grants to a worker other than the session's last one
    (the session moved), grants that had to wait for another worker's lease, leases taken from a silent
    worker or dropped with a dead one."""

    granted: int = 0
    moved: int = 0
    waited: int = 0
    expired: int = 0
    dropped: int = 0
    forwarded: int = 0  # requests sent on to the worker holding their session's open turn
    workers: dict[str, int] = field(default_factory=dict)  # leases granted per worker


class SessionLeases:
    def __init__(self) -> None:
        self._held: dict[str, tuple[str, int]] = {}  # session -> (worker, token)
        self._last: dict[str, str] = {}  # session -> the worker that held it last
        self._seen: dict[str, float] = {}  # worker -> when it last called
        self._open: dict[str, tuple[str, str]] = {}  # session -> (worker, address) holding a turn open
        self._waiting: dict[str, list[asyncio.Future[None]]] = {}
        self._token = 0
        self.stats = LeaseStats()

    async def acquire(self, key: str, worker: str, forwarded: bool = False) -> tuple[int, str | None, str | None]:
        """Wait for session ``key``'s lease and take it for ``worker``: (the lease's token, the worker that
        held it before; None for the session's first lease here; None). A lease ``worker`` still holds is taken
        again: its release is on its way (the worker serialises a session's requests itself before it asks).
        Where another live worker holds the session's open turn (and the request was not ``forwarded``
        already): (0, None, that worker's address), no lease: the caller forwards the request there."""
        self._seen[worker] = time.monotonic()
        waited = False
        while True:
            held = self._held.get(key)
            if held is not None and held[0] != worker:
                if not self._silent(held[0]):
                    waited = True
                    await self._wait(key)
                    continue
                self.stats.expired += 1
            # Asked once the session is free: the release that ended a wait says whether a turn is left open.
            sticky = self._open.get(key)
            if sticky is not None and sticky[0] != worker and not forwarded and not self._silent(sticky[0]):
                self.stats.forwarded += 1
                return 0, None, sticky[1]
            break
        self._token += 1
        previous = self._last.get(key)
        self._held[key], self._last[key] = (worker, self._token), worker
        s = self.stats
        s.granted += 1
        s.moved += previous is not None and previous != worker
        s.waited += waited
        s.workers[worker] = s.workers.get(worker, 0) + 1
        return self._token, previous, None

    def release(self, key: str, token: int, open_at: str | None = None) -> None:
        """End the lease ``token`` of ``key`` (a late release of a lease already taken again is ignored);
        ``open_at``: the worker holds a turn of the session open, and takes its requests at that address."""
        held = self._held.get(key)
        if held is not None and held[1] == token:
            self._seen[held[0]] = time.monotonic()
            if open_at is not None:
                self._open[key] = (held[0], open_at)
            else:
                self._open.pop(key, None)
            del self._held[key]
            self._wake(key)

    def renew(self, worker: str) -> None:
        """``worker`` is alive (it calls this every few seconds): its leases stay its own."""
        self._seen[worker] = time.monotonic()

    def drop(self, worker: str) -> int:
        """``worker`` is gone: release every lease it holds (its sessions are read from the ledger by the
        next worker, as the moved sessions they are). How many it held."""
        keys = [k for k, (w, _) in self._held.items() if w == worker]
        for key in [k for k, (w, _) in self._open.items() if w == worker]:
            del self._open[key]
        for key in keys:
            del self._held[key]
            self._wake(key)
        self._seen.pop(worker, None)
        self.stats.dropped += len(keys)
        return len(keys)

    async def _wait(self, key: str) -> None:
        """Until ``key`` is released, or ``CHECK_S`` (to look whether its holder went silent)."""
        wake: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(key, []).append(wake)
        try:
            await asyncio.wait_for(wake, CHECK_S)
        except TimeoutError:
            pass
        finally:
            waiters = self._waiting.get(key, [])
            if wake in waiters:
                waiters.remove(wake)

    def _silent(self, worker: str) -> bool:
        return time.monotonic() - self._seen.get(worker, 0.0) > EXPIRE_S

    def report(self) -> LeaseStats:
        return self.stats

    def _wake(self, key: str) -> None:
        for wake in self._waiting.pop(key, []):
            if not wake.done():
                wake.set_result(None)
