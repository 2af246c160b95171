"""Child process for the crash test: appends forever, printing each id once append() returns.

``crash_writer.py ROOT SEED [MODE [ACKS]]``. MODE ``random`` (the default) runs until the test
kills it. The other modes kill the process themselves (SIGKILL, so nothing is cleaned up), at an
exact point of a commit, once ACKS appends were acknowledged; so the test knows a crash landed
there, instead of hoping a randomly timed kill did:

- ``header``: a writer created a new tail and was about to write its header (the tail is empty);
- ``midbody``: half of a record batch message's body was written;
- ``marker``: the body was written, and the continuation marker that completes it was next.

The test starts each writer with :func:`run_piped` from a multiprocessing forkserver that has imported this
module (so each of its 50 writers is a fork, not a new interpreter paying the ledger's imports, about 2 s of
CPU each): the ids go to the test through a pipe instead of stdout, and the writer is still a process of
its own, killed with SIGKILL. Run as a script, it prints them.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import threading
from multiprocessing.connection import Connection

from vak_context.events.payloads import EvidenceBody, Nudge
from vak_context.storage.ledger import LedgerStore
from vak_context.storage.segment.files import MAGIC

MODES = ("random", "header", "midbody", "marker")
_MARKER = b"\xff\xff\xff\xff"


def _kill_self() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def arm(mode: str, acked: threading.Event) -> None:
    """Wrap os.pwrite (the tail's only writer) to die at ``mode``'s point once ``acked`` is set."""
    real = os.pwrite

    def pwrite(fd: int, data: bytes, offset: int) -> int:
        if acked.is_set():
            view = memoryview(data)
            head = bytes(view[:len(MAGIC)])
            if mode == "header" and head == MAGIC:
                _kill_self()
            elif mode == "marker" and head == _MARKER:
                _kill_self()
            elif mode == "midbody" and len(view) > 8 and head[:4] != bytes(4) and head != MAGIC:
                # a message body (it starts with its metadata length); zero fill starts with zeros
                real(fd, view[: len(view) // 2], offset)
                _kill_self()
        return real(fd, data, offset)

    os.pwrite = pwrite


def main(root: str, seed: int, mode: str = "random", acks_before_kill: int = 0) -> None:
    rng = random.Random(seed)
    armed = threading.Event()
    if mode != "random":
        arm(mode, armed)
        if acks_before_kill == 0:
            armed.set()
    store = LedgerStore(root)
    lock = threading.Lock()
    acked = [0]

    def writer(w: int) -> None:
        r = random.Random(seed * 100 + w)
        while True:
            n = r.choice([1, 1, 4, 16])
            payloads: list = []
            blobs: list = []
            for i in range(n):
                if r.random() < 0.2:
                    body = bytes(r.getrandbits(8) for _ in range(r.randint(1000, 200_000)))
                    payloads.append(EvidenceBody(tool_use_id=f"t{w}-{i}", tool_name="bash", encoding="binary",
                                                 chars=len(body), bytes=len(body)))
                    blobs.append(body)
                else:
                    payloads.append(Nudge(tag="crash", text=f"writer {w} " + "x" * r.randint(0, 5000)))
                    blobs.append(None)
            ids = store.append("crash", payloads, blobs=blobs)
            with lock:
                sys.stdout.write("\n".join(ids) + "\n")
                sys.stdout.flush()
                acked[0] += 1
                if acked[0] >= acks_before_kill > 0:
                    armed.set()

    for w in range(rng.choice([1, 4])):
        threading.Thread(target=writer, args=(w,), daemon=True).start()
    threading.Event().wait()


class _PipeLines:
    """``sys.stdout`` for a piped writer: what was written goes to the test as one message per flush."""

    def __init__(self, conn: Connection) -> None:
        self.conn, self.buffer = conn, ""

    def write(self, text: str) -> int:
        self.buffer += text
        return len(text)

    def flush(self) -> None:
        if self.buffer:
            self.conn.send_bytes(self.buffer.encode())
            self.buffer = ""


def run_piped(conn: Connection, root: str, seed: int, mode: str, acks_before_kill: int) -> None:
    """:func:`main` in a forked child, each acknowledged id sent on ``conn`` before the next append."""
    sys.stdout = _PipeLines(conn)
    main(root, seed, mode, acks_before_kill)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), *sys.argv[3:4], *[int(a) for a in sys.argv[4:5]])
