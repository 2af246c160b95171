"""The one loopback HTTP server of the tests: a handler served on 127.0.0.1, on a free port, in a thread.

A handler is what ``httpx.MockTransport`` takes (``httpx.Request -> httpx.Response``), so every fake
model answers the same way in this process and over a real socket (a Ray actor, another process, or
httpcore's own transport, as a test needs). ``serve`` binds ``127.0.0.1`` port 0, serves each request in
its own thread, and stops (shutdown, close, join) when the ``with`` block ends.

A reply of ``text/event-stream`` whose content is an iterator (``httpx.Response(200, content=chunks)``)
is written chunk by chunk as the iterator gives them, with no length (the connection's close ends it), so
a fake can stream server-sent events and hold the rest of its stream on an event.

A handler that raises answers 500 with the error's text, and the error is raised again when the block
ends (unless the block itself failed), so a broken fake fails its test instead of turning into a
confusing reply.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

Handler = Callable[[httpx.Request], httpx.Response]

# Hop-by-hop headers the server writes itself (it answers HTTP/1.0 and closes each connection).
_OWN_HEADERS = {"connection", "content-length", "keep-alive", "transfer-encoding"}


@dataclass
class LoopbackServer:
    """A running server: ``url`` is its root (``http://127.0.0.1:PORT``), ``base_url`` the OpenAI-style ``/v1``."""

    host: str
    port: int
    requests: int = 0  # answered so far
    errors: list[BaseException] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"


def _request_handler(handler: Handler, state: LoopbackServer, lock: threading.Lock) -> type[BaseHTTPRequestHandler]:
    class Serve(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            if len(body) < length:  # the client went away mid-request (an actor killed at a test's end)
                self.close_connection = True
                return
            request = httpx.Request(self.command, f"{state.url}{self.path}",
                                    headers=list(self.headers.items()), content=body)
            try:
                response = handler(request)
                if _streamed(response):
                    self._stream(response)
                    return
                data = response.read()
            except Exception as exc:  # reported to the test when the server stops
                with lock:
                    state.errors.append(exc)
                response, data = None, f"{type(exc).__name__}: {exc}".encode()
            self.send_response(500 if response is None else response.status_code)
            if response is not None:
                for name, value in response.headers.multi_items():
                    if name.lower() not in _OWN_HEADERS:
                        self.send_header(name, value)
            # Counted before the reply goes out: a client that has its reply may read the count at once.
            with lock:
                state.requests += 1
            try:
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):  # the client went away before its reply
                self.close_connection = True

        def _stream(self, response: httpx.Response) -> None:
            self.send_response(response.status_code)
            for name, value in response.headers.multi_items():
                if name.lower() not in _OWN_HEADERS:
                    self.send_header(name, value)
            with lock:
                state.requests += 1
            self.close_connection = True
            try:
                self.end_headers()
                for chunk in response.iter_raw():
                    self.wfile.write(chunk)
                    self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):  # the client went away mid-stream
                pass

        do_GET = do_POST = do_PUT = do_DELETE = _answer

        def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
            pass

    return Serve


def _streamed(response: httpx.Response) -> bool:
    return (response.headers.get("content-type", "").startswith("text/event-stream")
            and not isinstance(response.stream, httpx.ByteStream))


@contextmanager
def serve(handler: Handler) -> Iterator[LoopbackServer]:
    """Serve ``handler`` on 127.0.0.1 (a free port) for the ``with`` block; yields the running server."""
    state = LoopbackServer("127.0.0.1", 0)
    lock = threading.Lock()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _request_handler(handler, state, lock))
    server.daemon_threads = True  # a client that never finishes its request cannot hold up the stop
    state.port = server.server_address[1]
    # shutdown() waits for serve_forever's next poll: 0.5 s by default, paid at the end of every block
    # (hundreds of servers in a run); 0.02 s costs a few idle wake-ups.
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02},
                              name=f"loopback-http-{state.port}", daemon=True)
    thread.start()
    failed = False
    try:
        yield state
    except BaseException:
        failed = True
        raise
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
        if state.errors and not failed:
            raise state.errors[0]
