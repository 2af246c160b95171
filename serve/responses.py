"""What goes back to a ``vak serve`` client: an error in its protocol's shape and status, and a streamed
request's response, written event by event as the driving task posts them (``serve/streaming.py``)."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from starlette.responses import JSONResponse, Response, StreamingResponse

from vak_context.errors import (
    ContextOverflow,
    InvalidBody,
    InvalidInput,
    ProviderError,
    RequestTooLarge,
    VakError,
)
from vak_context.serve.leases import FORWARD_TO, Elsewhere
from vak_context.serve.protocol import Events, Protocol, Usage, error_body
from vak_context.serve.streaming import Stream

log = logging.getLogger("vak.serve")


def error_response(protocol: Protocol, exc: BaseException) -> JSONResponse:
    """An error in the client's protocol: its status and type as that protocol's clients expect."""
    if isinstance(exc, Elsewhere):  # not for the client: serve/workers.py forwards the request
        return JSONResponse({}, status_code=307, headers={FORWARD_TO: exc.address})
    if isinstance(exc, ContextOverflow | RequestTooLarge):  # the request cannot fit: resending it fails alike
        status, body = error_body(protocol, "overflow", str(exc))
    elif isinstance(exc, ProviderError):
        upstream = exc.status or 502
        kind = "rate_limit" if upstream == 429 else "overloaded" if upstream == 529 else "upstream"
        # A 429 or 5xx keeps its status (clients back off and retry on them); any other upstream failure
        # (its auth, a malformed request) is the gateway's: 502.
        status, body = error_body(protocol, kind, f"upstream: {exc}", upstream if upstream == 429 or upstream >= 500 else 502)
    elif isinstance(exc, InvalidBody):
        status, body = error_body(protocol, "too_large" if exc.status == 413 else "invalid", str(exc), exc.status)
    elif isinstance(exc, InvalidInput):
        status, body = error_body(protocol, "invalid", str(exc))
    elif isinstance(exc, VakError):
        status, body = error_body(protocol, "internal", str(exc))
    else:
        log.exception("vak serve: an unexpected error", exc_info=exc)
        status, body = error_body(protocol, "internal", f"{type(exc).__name__}: the server failed; see its log")
    return JSONResponse(body, status_code=status)


class StreamedResponse(StreamingResponse):
    """The SSE response of a streamed request: however it ends (written out, or the client gone, even
    before its first event), the driving task is told, so it stops waiting on the client."""

    def __init__(self, stream: Stream, content: AsyncIterator[str]) -> None:
        super().__init__(content, media_type="text/event-stream", headers={"cache-control": "no-cache"})
        self.stream = stream

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.stream.leave()


async def streamed(protocol: Protocol, stream: Stream, events: Events) -> Response:
    """The response once the driving task posted its first event: an error before any byte went out keeps
    the protocol's error status and shape; after that, an error ends the stream with the protocol's
    in-stream error event."""
    try:
        first = await stream.events.get()
    except BaseException:
        stream.leave()
        raise
    if first.kind == "error":
        assert first.error is not None
        return error_response(protocol, first.error)

    async def write() -> AsyncIterator[str]:
        event = first
        usage = first.reply.usage if first.reply is not None else Usage()
        for chunk in events.start(usage):
            yield chunk
        while True:
            pending = None
            if event.kind == "text":
                text, pending = stream.joined(event.text)
                for chunk in events.text(text):
                    yield chunk
            elif event.kind == "reply":
                assert event.reply is not None
                for chunk in events.end(event.reply):
                    yield chunk
                stream.delivered()
                # The last event waits until the driver noted the request in the ledger (or failed to):
                # a client reading the ledger once its stream ended finds the request's entries.
                event = await stream.events.get()
                if event.kind != "done":
                    continue  # an error noting it: written as the in-stream error
                for chunk in events.last():
                    yield chunk
                return
            else:
                assert event.error is not None
                response = error_response(protocol, event.error)
                for chunk in events.error(json.loads(bytes(response.body))):
                    yield chunk
                return
            event = pending or await stream.events.get()

    return StreamedResponse(stream, write())
