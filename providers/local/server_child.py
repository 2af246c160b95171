"""The child process of ``LocalModelServer``: llama.cpp's server (``xllamacpp``) on 127.0.0.1.

Started as ``python -m vak_context.providers.local.server_child --child CONFIG --ready-fd FD --parent-pid PID``.
It reads this run's API key from the first line of stdin, builds ``xllamacpp.CommonParams`` from
``ServerConfig``, binds, and writes ``READY <address>`` (or ``ERROR <why>``) to the ready pipe. It
serves until SIGTERM (dropping the server shuts llama.cpp down cleanly) and exits at once, without
a graceful shutdown, when its parent dies (``PR_SET_PDEATHSIG``, and EOF on stdin).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import select
import signal
import sys
import threading
from dataclasses import dataclass, field
from typing import Any

LOOPBACK = "127.0.0.1"
# cpp-httplib drops a header whose value is not a valid field value (DEL is not), so llama.cpp's
# CORS headers, which it sets to these strings on every response, are never sent.
NO_CORS = "\x7f"
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def default_threads() -> int:
    """Leave the machine usable for the caller: at most 4 threads, at least 1."""
    return max(1, min(4, os.cpu_count() or 1))


@dataclass(frozen=True)
class ServerConfig:
    """Everything the child needs to build ``xllamacpp.CommonParams``. Travels as JSON."""

    model_path: str
    port: int = 0
    n_ctx: int = 8192
    n_parallel: int = 1
    threads: int = field(default_factory=default_threads)
    chat_template: str | None = None  # template text; None keeps the model's own
    cache_prompt: bool = True



def _build_params(config: ServerConfig) -> Any:
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = config.model_path
    params.hostnames = [LOOPBACK]
    params.port = config.port
    params.n_ctx = config.n_ctx
    params.n_parallel = config.n_parallel
    params.cpuparams.n_threads = config.threads
    params.cpuparams_batch.n_threads = config.threads
    params.use_jinja = True  # the chat template and native tool-call parsing
    params.endpoint_props = True
    params.endpoint_metrics = True
    params.endpoint_slots = True
    params.cache_prompt = config.cache_prompt
    params.ui = False
    params.cors_origins = params.cors_methods = params.cors_headers = NO_CORS
    params.cors_credentials = False
    if config.chat_template is not None:
        params.chat_template = config.chat_template
    return params


def _parent_gone(stdin_fd: int, wait_s: float) -> bool:
    """Wait up to ``wait_s`` on stdin, a pipe from the parent: EOF means the parent is gone."""
    readable, _, _ = select.select([stdin_fd], [], [], wait_s)
    return bool(readable) and os.read(stdin_fd, 4096) == b""


def _read_key(stdin_fd: int) -> str | None:
    """The first line of stdin: this run's API key (None if the parent went before writing it)."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = os.read(stdin_fd, 1)  # one byte at a time: nothing after the line may be consumed
        if not chunk:
            return None
        data += chunk
    return data.decode().strip() or None


def _die_with_parent(parent_pid: int) -> None:
    """Exit at once when the parent process dies, even while llama.cpp is generating.

    ``PR_SET_PDEATHSIG`` fires when the parent *thread* that started us exits, so the handler
    checks that the parent process is really gone (we were re-parented) before exiting. The exit
    skips the graceful shutdown, which would first finish the request in flight.
    """

    def on_parent_death(*_: object) -> None:
        if os.getppid() != parent_pid:
            os._exit(0)

    signal.signal(signal.SIGUSR1, on_parent_death)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGUSR1, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the stdin watch still notices
        pass
    if os.getppid() != parent_pid:  # it died before prctl took effect
        os._exit(0)


def _child(config: ServerConfig, ready_fd: int, parent_pid: int) -> int:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    _die_with_parent(parent_pid)
    stdin_fd = sys.stdin.fileno()
    key = _read_key(stdin_fd)
    if key is None:
        os.write(ready_fd, b"ERROR no API key on stdin: the parent is gone\n")
        os.close(ready_fd)
        return 1
    try:
        import xllamacpp

        params = _build_params(config)
        params.api_keys = [key]
        server = xllamacpp.Server(params)
        address = str(server.listening_address)
    except Exception as exc:  # anything llama.cpp raises: report it to the parent, then exit
        os.write(ready_fd, f"ERROR {type(exc).__name__}: {exc}\n".encode())
        os.close(ready_fd)
        return 1
    os.write(ready_fd, f"READY {address}\n".encode())
    os.close(ready_fd)
    # Polled from the main thread (no reader thread), so interpreter shutdown never waits on stdin.
    while not stop.is_set():
        try:
            if _parent_gone(stdin_fd, 0.5):
                os._exit(0)  # no graceful shutdown: it would finish the request in flight first
        except InterruptedError:
            continue
    del server  # asked to stop (SIGTERM): dropping the server shuts llama.cpp down cleanly
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="internal: the child process of LocalModelServer")
    parser.add_argument("--child", required=True, help="ServerConfig as JSON")
    parser.add_argument("--ready-fd", type=int, required=True)
    parser.add_argument("--parent-pid", type=int, required=True)
    args = parser.parse_args(argv)
    return _child(ServerConfig(**json.loads(args.child)), args.ready_fd, args.parent_pid)


if __name__ == "__main__":
    sys.exit(main())
