"""``vak serve --ray --workers N``: N serve workers, each a process with its own event loop and interpreter,
serving one ledger on one port of 127.0.0.1.

The process ``vak serve`` starts is the first worker and the supervisor of the others: it joins Ray (a local
cluster on 127.0.0.1, or the one at ``--ray ADDRESS``), binds the port with ``SO_REUSEPORT``, and starts
N-1 workers (``python -m vak_context.serve.workers``), handing each its settings and keys on its stdin (never
on a command line); each joins the same cluster, opens the ledger through the folder's LedgerActor (the
folder's one writer) and binds the same address and port with ``SO_REUSEPORT``, so the kernel spreads the
connections over the workers. On more machines, the same command on each, joined to one cluster
(``--ray ADDRESS``) and to one ledger folder at the same path, serves the same sessions.

A request may land on any worker, so a session's requests are serialised by the session's **lease**
(``actors/leases.py``, ``serve/leases.py``), which the folder's SessionLeases actor grants to one worker at a
time; a worker that gets a session another worker served since reads it from the ledger again. A worker
tells which it is in each response's ``x-vak-worker`` header. A worker whose stdin closes (its supervisor
gone, even killed) stops; a worker that dies has its leases dropped by the supervisor at once.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

from vak_context.errors import VakError

log = logging.getLogger("vak.serve")

WORKER_HEADER = "x-vak-worker"  # on every response: the worker that answered (machine:process)
FORWARDED_HEADER = "x-vak-forwarded"  # on a request one worker sent on to another
_HOP = {b"host", b"content-length", b"transfer-encoding", b"connection", b"keep-alive"}
STOP_S = 60.0  # how long a stopping worker may take to close its sessions before it is killed

Scope = MutableMapping[str, Any]
ASGI = Callable[[Scope, Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Awaitable[None]]


def shared_socket(port: int) -> socket.socket:
    """A socket bound to 127.0.0.1:``port`` that the other workers (processes of this user) bind too: the
    kernel hands each new connection to one of them."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(("127.0.0.1", port))
    return sock


def worker_app(engine: Any, config: Any, leases: Any) -> tuple[ASGI, socket.socket]:
    """This worker's app (``serve/app.py`` under the session leases, forwarding as ``forwarding`` says) and
    the socket it takes forwarded requests on (127.0.0.1, a port of its own)."""
    from vak_context.serve.app import build_app
    from vak_context.serve.leases import LeasedLocks, worker_id

    own = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    own.bind(("127.0.0.1", 0))
    me = worker_id()
    address = f"http://127.0.0.1:{own.getsockname()[1]}"
    return forwarding(build_app(engine, config, locks=LeasedLocks(leases, me, address)), me), own


def forwarding(app: Any, worker: str) -> ASGI:
    """``app`` with the ``x-vak-worker`` header on each response, and a request whose session's open turn
    another worker holds (the app answers it with ``x-vak-forward-to``) sent on to that worker as it came,
    its answer streamed back as that worker writes it. A request that arrived forwarded is served here; so
    is one whose worker cannot be reached (it stopped: the session is read from the ledger here)."""
    import httpx

    from vak_context.serve.leases import FORWARD_TO, FORWARDED

    label = (WORKER_HEADER.encode(), worker.encode())
    client = httpx.AsyncClient(trust_env=False, timeout=httpx.Timeout(900.0, connect=5.0))

    async def serve(scope: Scope, receive: Callable[[], Awaitable[Any]], send: Callable[[Any], Awaitable[None]]) -> None:
        if scope["type"] != "http":
            await _not_http(app, client, scope, receive, send)
            return
        if any(k == FORWARDED_HEADER.encode() for k, _ in scope["headers"]):
            FORWARDED.set(True)  # this request's task (and the tasks it starts) only
        body: list[bytes] = []
        target: list[str] = []

        async def kept() -> Any:
            message = await receive()
            if message["type"] == "http.request":
                body.append(message.get("body", b""))
            return message

        async def send_labelled(message: Any) -> None:
            if message["type"] == "http.response.start":
                to = next((v for k, v in message.get("headers", ()) if k == FORWARD_TO.encode()), None)
                if to is not None:
                    target.append(to.decode())
                    return
                message = {**message, "headers": [*message.get("headers", ()), label]}
            elif target:
                return  # the body of the answer that says where to forward
            await send(message)

        await app(scope, kept, send_labelled)
        if not target:
            return
        data = b"".join(body)
        try:
            await _forward(client, target[0], scope, data, send)
        except httpx.ConnectError:
            log.warning("vak serve: the worker at %s holding a session's open turn is gone; served here", target[0])
            FORWARDED.set(True)
            again = [{"type": "http.request", "body": data, "more_body": False}]
            target.clear()

            async def replay() -> Any:
                return again.pop() if again else await receive()

            await app(scope, replay, send_labelled)

    return serve


async def _not_http(app: Any, client: Any, scope: Scope, receive: Callable[[], Awaitable[Any]],
                    send: Callable[[Any], Awaitable[None]]) -> None:
    """What is not a request goes to the app as it came; at the lifespan's end the forwarding client closes."""
    if scope["type"] == "lifespan":
        # The client closes before shutdown is reported complete: once it is, uvicorn returns and
        # asyncio cancels what is still running, a close in flight included (a traceback at exit).
        async def closing(message: Any) -> None:
            if message["type"] == "lifespan.shutdown.complete":
                await client.aclose()
            await send(message)

        await app(scope, receive, closing)
        return
    await app(scope, receive, send)


async def _forward(client: Any, target: str, scope: Scope, data: bytes, send: Callable[[Any], Awaitable[None]]) -> None:
    path = scope["path"] + (f"?{scope['query_string'].decode()}" if scope.get("query_string") else "")
    headers = [(k, v) for k, v in scope["headers"] if k.lower() not in _HOP]
    headers.append((FORWARDED_HEADER.encode(), b"1"))
    async with client.stream(scope["method"], target + path, content=data, headers=headers) as answer:
        await send({"type": "http.response.start", "status": answer.status_code,
                    "headers": [(k, v) for k, v in answer.headers.raw if k.lower() not in _HOP]})
        async for chunk in answer.aiter_raw():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


@dataclasses.dataclass
class Spec:
    """What every worker serves: the ledger, the cluster, the port, the search-index setting and the app's
    settings (``ServeConfig``'s fields, keys included: handed over a pipe, never an argument)."""

    ledger: str
    ray: str
    port: int
    search_index: str
    config: dict[str, Any]


class Workers:
    """The workers this process started, watched: one that exits while they should run has its leases
    dropped (its sessions go to the other workers, read from the ledger)."""

    def __init__(self, spec: Spec, count: int, leases: Any) -> None:
        self.spec, self.count, self.leases = spec, count, leases
        self.procs: list[subprocess.Popen[bytes]] = []
        self._stopping = threading.Event()

    def start(self) -> None:
        """Start the workers and return once each says it serves (its line printed here, as what it prints
        after it); a worker that exits before that is an error naming its exit code."""
        line = (json.dumps(dataclasses.asdict(self.spec)) + "\n").encode()
        for _ in range(self.count):
            proc = subprocess.Popen([sys.executable, "-m", "vak_context.serve.workers"], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE)
            assert proc.stdin is not None
            proc.stdin.write(line)
            proc.stdin.flush()  # kept open: the worker stops when it closes
            self.procs.append(proc)
        for proc in self.procs:
            assert proc.stdout is not None
            ready = proc.stdout.readline()
            if not ready:
                raise VakError(f"a vak serve worker exited ({proc.wait()}) before it served; what it printed "
                                 "is above")
            sys.stdout.buffer.write(ready)
            sys.stdout.flush()
            threading.Thread(target=self._watch, args=(proc,), name=f"vak-serve-worker-{proc.pid}", daemon=True).start()

    def _watch(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:  # what it prints, passed on
            sys.stdout.buffer.write(line)
            sys.stdout.flush()
        code = proc.wait()
        if self._stopping.is_set():
            return
        log.warning("vak serve: worker %d exited (%d) while serving; its sessions go to the other workers",
                    proc.pid, code)
        print(f"vak serve: worker {proc.pid} exited ({code}); its sessions go to the other workers",
              file=sys.stderr, flush=True)
        self.leases.drop.remote(f"{socket.gethostname()}:{proc.pid}")

    def stop(self) -> None:
        """Close each worker's stdin (it stops serving and closes its sessions), then wait for it."""
        self._stopping.set()
        for proc in self.procs:
            if proc.stdin is not None and not proc.stdin.closed:
                proc.stdin.close()
        for proc in self.procs:
            try:
                proc.wait(STOP_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def announce(port: int, own: socket.socket) -> None:
    """The line that says this worker serves (tests and benches wait for it; its own port takes the requests
    other workers forward here, and any client's as well)."""
    print(f"vak serve: worker {os.getpid()} serving on 127.0.0.1:{port} (its own: 127.0.0.1:{own.getsockname()[1]})",
          flush=True)


def _stop_at_eof(server: Any) -> None:
    """The supervisor holds this process's stdin open while it runs: EOF (it stopped, or died) stops it."""
    sys.stdin.buffer.read()
    server.should_exit = True


def run_worker(spec: Spec) -> int:
    """One worker: join the cluster, open the ledger on Ray, serve the app on the shared port until stdin
    closes (or SIGTERM / Ctrl-C)."""
    import uvicorn

    from vak_context.actors.factory import session_leases
    from vak_context.engine.api import Engine
    from vak_context.serve.app import ServeConfig
    from vak_context.serve.connections import timed_protocol

    config = ServeConfig(**spec.config)
    engine = Engine.open(Path(spec.ledger), ray=spec.ray, search_index=spec.search_index)
    try:
        app, own = worker_app(engine, config, session_leases(engine.folder))
        sock = shared_socket(spec.port)
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on",
                                               http=timed_protocol(config.idle_s)))
        threading.Thread(target=_stop_at_eof, args=(server,), name="vak-serve-stdin", daemon=True).start()
        announce(spec.port, own)
        server.run(sockets=[sock, own])
    finally:
        engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(run_worker(Spec(**json.loads(sys.stdin.buffer.readline()))))
