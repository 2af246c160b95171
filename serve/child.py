"""``vak serve`` as a child process, started as a user starts it (``python -m vak_context.cli serve ...``):
for scripts and benchmarks that stand where a client stands. :func:`serve_child` waits for the two lines
the command prints when it listens (the key file, the base URLs), reads the per-run key from its 0600
file, and stops the server with SIGTERM (a clean exit) when the block ends. Upstream keys are passed in
the child's environment only, as ``vak serve`` reads them."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from vak_context.errors import VakError

_KEY = re.compile(r"key in (\S+);")
_URL = re.compile(r"OpenAI: base_url=(\S+)")


@dataclass
class ServeChild:
    """A running ``vak serve``: ``base_url`` (OpenAI clients, ends in /v1), ``root`` (Anthropic clients),
    ``key`` (this run's client key) and what the process printed so far (``output``)."""

    base_url: str
    key: str
    process: subprocess.Popen[str]
    output: list[str] = field(default_factory=list)

    @property
    def root(self) -> str:
        return self.base_url.removesuffix("/v1")


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when this process dies (a killed bench leaves no server behind;
    SIGTERM is vak serve's clean exit)."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@contextmanager
def serve_child(upstream: str, *, ledger: str | os.PathLike[str], base_url: str | None = None,
                window: int | None = None, extra: Sequence[str] = (), env: Mapping[str, str] | None = None,
                start_timeout: float = 600.0) -> Iterator[ServeChild]:
    """``vak serve --upstream UPSTREAM --ledger LEDGER [--base-url ...] [--window ...] EXTRA`` until the block
    ends. ``env`` is added to this process's environment (an upstream's key). A local upstream starts the
    bundled model first, hence the long default ``start_timeout``."""
    command = [sys.executable, "-m", "vak_context.cli", "serve", "--upstream", upstream, "--ledger", str(ledger)]
    if base_url:
        command += ["--base-url", base_url]
    if window:
        command += ["--window", str(window)]
    process = subprocess.Popen([*command, *extra], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, **(env or {})},
                               preexec_fn=_die_with_parent if sys.platform == "linux" else None)
    lines: list[str] = []
    arrived: queue.Queue[str | None] = queue.Queue()

    def read() -> None:  # every line it prints, kept (a full pipe would block it), handed on while we wait
        for line in process.stdout or ():
            lines.append(line)
            arrived.put(line)
        arrived.put(None)

    reader = threading.Thread(target=read, name="vak-serve-child-output", daemon=True)
    reader.start()
    key_file = url = None
    deadline = time.monotonic() + start_timeout
    try:
        # The two lines come before uvicorn runs; a child that dies says why in what it printed.
        while url is None:
            try:
                line = arrived.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise VakError(f"vak serve printed no address in {start_timeout:.0f} s:\n" + "".join(lines)[-2000:]) from None
            if line is None:
                raise VakError(f"vak serve exited ({process.wait()}) before it listened:\n" + "".join(lines)[-2000:])
            if (k := _KEY.search(line)) is not None:
                key_file = k.group(1)
            if (u := _URL.search(line)) is not None:
                url = u.group(1)
        if key_file is None:
            raise VakError("vak serve printed its address but no key file:\n" + "".join(lines))
        child = ServeChild(url, Path(key_file).read_text().strip(), process, lines)
        yield child
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        reader.join(10)  # the pipe's end: everything it printed is in ``lines``
        if process.stdout is not None:
            process.stdout.close()
