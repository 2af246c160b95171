"""What serialises a session's requests in ``vak serve``: a lock per session in one worker, and with several
workers (``vak serve --ray --workers N``) the session's lease as well (``actors/leases.py``).

``SessionLocks`` is the one-process case: an ``asyncio.Lock`` per session key. ``LeasedLocks`` takes the same
lock first (a worker's concurrent requests of one session queue here, not at the actor), then the session's
lease from the folder's SessionLeases actor, and answers whether the session *moved*: whether another worker
held it since this one last did, so what this worker holds of it in memory is stale and is read again from
the ledger (``serve/app.py``). Releasing sends the lease back without waiting for the actor's answer (a
request pays one actor round trip for its lease), saying whether this worker holds a turn of the session
open for the client's calls: until it releases the session with none open, the session's requests that land
on another worker raise ``Elsewhere`` there and are forwarded here (``serve/workers.py``), since the open
turn lives in this worker's memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import socket
from typing import Any

RENEW_S = 10.0  # how often a worker tells the leases it is alive (actors/leases.py: EXPIRE_S)
FORWARD_TO = "x-vak-forward-to"  # on the app's answer to a request to forward (never reaches a client)
# Set for a request another worker forwarded here: it is served here, never forwarded again.
FORWARDED: contextvars.ContextVar[bool] = contextvars.ContextVar("vak_serve_forwarded", default=False)


class Elsewhere(Exception):  # not an error: where the request goes, caught before any client sees it
    """The session's open turn is held by the worker at ``address``: the request is forwarded there."""

    def __init__(self, address: str) -> None:
        super().__init__(f"the session's open turn is served at {address}")
        self.address = address


class SessionLocks:
    """One lock per session key, in this process: a session's requests run one at a time."""

    def __init__(self) -> None:
        self._locks: dict[str, asyncio.Lock] = {}

    async def acquire(self, key: str) -> bool:
        """Wait for ``key``'s turn; whether another worker served the session since this one last did
        (never, here: this process is the only one)."""
        await self._locks.setdefault(key, asyncio.Lock()).acquire()
        return False

    def release(self, key: str, *, open_turn: bool = False) -> None:
        """``key``'s next request may run; ``open_turn``: this request left a turn open for the client's calls."""
        self._locks[key].release()

    async def close(self) -> None:
        """Nothing to hand back in one process."""


def worker_id() -> str:
    """This worker's name in the leases: its machine and process."""
    return f"{socket.gethostname()}:{os.getpid()}"


class LeasedLocks(SessionLocks):
    """The lock of ``SessionLocks``, then the session's lease from ``leases`` (the folder's SessionLeases
    actor handle), held until the request (and the packet summary after it) is done. ``address``: where
    this worker takes forwarded requests (``http://127.0.0.1:PORT``)."""

    def __init__(self, leases: Any, worker: str, address: str) -> None:
        super().__init__()
        self.leases, self.worker, self.address = leases, worker, address
        self._tokens: dict[str, int] = {}
        self._renewing: asyncio.Task[None] | None = None

    async def acquire(self, key: str) -> bool:
        from vak_context.actors.ray_errors import map_ray_errors

        await super().acquire(key)
        try:
            if self._renewing is None:
                self._renewing = asyncio.create_task(self._renew(), name="vak-serve-lease-renew")
            with map_ray_errors("the session's lease"):
                token, previous, elsewhere = await self.leases.acquire.remote(key, self.worker, FORWARDED.get())
        except BaseException:
            super().release(key)
            raise
        if elsewhere is not None:
            super().release(key)
            raise Elsewhere(elsewhere)
        self._tokens[key] = token
        return previous != self.worker

    def release(self, key: str, *, open_turn: bool = False) -> None:
        token = self._tokens.pop(key, None)
        if token is not None:  # not awaited: the next acquire, anywhere, waits for it
            self.leases.release.remote(key, token, self.address if open_turn else None)
        super().release(key)

    async def _renew(self) -> None:
        while True:
            self.leases.renew.remote(self.worker)
            await asyncio.sleep(RENEW_S)

    async def close(self) -> None:
        """Stop renewing and hand back every lease this worker still holds."""
        if self._renewing is not None:
            self._renewing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewing
        with contextlib.suppress(Exception):
            await self.leases.drop.remote(self.worker)
