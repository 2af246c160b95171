"""The LedgerActor on the shared local Ray runs calls in several threads: a read is answered while an append
waits in its fsync (issue 14). Leader/follower commits in this process: tests/unit/test_ledger_actor_threads.py."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest
import ray

from vak_context.actors.factory import ledger_actor
from vak_context.events.payloads import Nudge


@pytest.mark.ray
def test_a_read_is_answered_while_an_append_waits_in_its_fsync(ray_cluster: Any, ledger_dir: Path,
                                                               tmp_path: Path) -> None:
    """The LedgerActor runs calls in several threads: with an ``append_batch`` held inside its fsync
    (the actor says so through a fifo it writes from there), ``head`` and ``sessions`` are answered,
    and the append completes once the fsync is let go."""
    handle = ledger_actor(ledger_dir)
    ray.get(handle.append_batch.remote("s", [([Nudge(tag="t", text="first")], None)]))
    entered, release = tmp_path / "entered", tmp_path / "release"
    os.mkfifo(entered)
    os.mkfifo(release)
    signalled: list[str] = []
    reader = threading.Thread(target=lambda: signalled.append(entered.read_text()), daemon=True)
    reader.start()  # blocks until the actor's fsync opens the fifo to write
    ray.get(handle.__ray_call__.remote(_hold_next_fsync, str(entered), str(release)))
    ref = handle.append_batch.remote("s", [([Nudge(tag="t", text="held")], None)])
    reader.join(60)
    assert signalled == ["in fsync"], "the append never reached its fsync"
    head = ray.get(handle.head.remote("s"), timeout=60)  # answered while the append waits
    assert ray.get(handle.sessions.remote(), timeout=60) == ["s"]
    assert not ray.wait([ref], timeout=0)[0]
    release.write_text("go")  # the held fsync reads it and goes on
    ((new_id,),) = ray.get(ref, timeout=60)
    assert head == new_id  # the head moves when the entry is queued; it is acknowledged once durable
    ray.kill(handle, no_restart=True)


def _hold_next_fsync(actor: Any, entered: str, release: str) -> None:
    """Inside the actor (``__ray_call__``): the next fsync writes to the fifo ``entered``, then waits
    until something is written to the fifo ``release``."""
    import os

    real = os.fsync
    held = [False]

    def fsync(fd: int) -> None:
        if not held[0]:
            held[0] = True
            with open(entered, "w") as f:
                f.write("in fsync")
            with open(release) as f:
                f.read()
        real(fd)

    os.fsync = fsync
