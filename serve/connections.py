"""uvicorn's h11 protocol with a deadline on a request's head: a connection that sends no request, or only
part of a request's head, within ``head_s`` of opening (or of its last response) is closed. uvicorn's own
keep-alive timer starts only after a response and stops at the first byte of the next request, so without
this an idle or half-sent connection holds its file descriptor for ever (issue 35). A body that stops
arriving is the app's to refuse (``serve/bodies.py``: 408)."""

from __future__ import annotations

import asyncio
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

HEAD_S = 30.0


def timed_protocol(head_s: float = HEAD_S) -> type[H11Protocol]:
    """The protocol class to give ``uvicorn.Config(http=...)``, its deadline ``head_s`` seconds."""

    class TimedH11(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            if not self.transport.is_closing():
                self._head_timer = self.loop.call_later(head_s, self._expired)

        def _disarm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _expired(self) -> None:
            self._head_timer = None
            # IDLE: no request head has been read whole since the deadline was set (none at all, or part of one);
            # SEND_BODY after our response: the rest of a refused body, which uvicorn reads only to drop it.
            waiting = self.conn.their_state is h11.IDLE or (
                self.conn.their_state is h11.SEND_BODY and self.conn.our_state is h11.DONE)
            if waiting and not self.transport.is_closing():
                self.transport.close()

    return TimedH11
