"""LedgerActor on a real local Ray: named and detached, durable appends, restart after a kill."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import ray

from vak_context.actors.factory import NAMESPACE, get_ledger_actor, ledger_actor, ledger_actor_name
from vak_context.actors.ledger.actor import LedgerActor
from vak_context.events.payloads import Directive, Nudge
from vak_context.storage.ledger import LedgerStore

pytestmark = pytest.mark.ray


def test_plain_class_works_without_ray(ledger_dir: Path) -> None:
    actor = LedgerActor(str(ledger_dir))
    with ThreadPoolExecutor(8) as pool:  # concurrent appends, as the actor's threads make them
        ids = list(pool.map(lambda i: actor.append("s", [Directive(text=f"no ray needed {i}")]), range(20)))
    chain = actor.chain_to_root(actor.head("s") or "")
    assert {i for (i,) in ids} == {e.id for e in chain}
    assert actor.verify().ok
    actor.close()


def test_named_detached_actor_is_shared(ray_cluster: Any, ledger_dir: Path) -> None:
    a = ledger_actor(ledger_dir)
    ids = ray.get(a.append.remote("s", [Directive(text="hello"), Nudge(tag="t", text="n")]))
    # another handle, found by name in the namespace, is the same actor and sees the same ledger
    b = get_ledger_actor(ledger_dir)
    assert ray.get(b.head.remote("s")) == ids[-1]
    assert ray.get(ledger_actor(ledger_dir).pid.remote()) == ray.get(a.pid.remote())
    # a task in another worker process reaches it by name too
    @ray.remote(num_cpus=0)
    def head_from_a_task(root: str) -> str | None:
        return ray.get(get_ledger_actor(root).head.remote("s"))

    assert ray.get(head_from_a_task.remote(str(ledger_dir))) == ids[-1]
    # appends are durable when acknowledged: a plain reader sees them on disk
    reader = LedgerStore(ledger_dir, readonly=True)
    assert [e.id for e in reader.entries("s")] == ids
    reader.close()
    ray.kill(a, no_restart=True)


def test_detached_actor_outlives_the_job_that_made_it(ray_cluster: Any, ledger_dir: Path) -> None:
    script = (
        "import ray, sys; from vak_context.actors.factory import ledger_actor; from vak_context.events.payloads import Directive;"
        "ray.init(address=sys.argv[1], namespace='vak', log_to_driver=False);"
        "a = ledger_actor(sys.argv[2]); print(ray.get(a.append.remote('job', [Directive(text='from a job')]))[0])"
    )
    address = ray.get_runtime_context().gcs_address
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    out = subprocess.run([sys.executable, "-c", script, address, str(ledger_dir)], capture_output=True,
                         text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    written = out.stdout.strip().splitlines()[-1]
    a = ray.get_actor(ledger_actor_name(ledger_dir), namespace=NAMESPACE)  # the job has exited
    assert ray.get(a.head.remote("job")) == written
    ray.kill(a, no_restart=True)


def test_concurrent_appends_through_the_actor(ray_cluster: Any, ledger_dir: Path) -> None:
    a = ledger_actor(ledger_dir)
    refs = [a.append.remote("c", [Nudge(tag="t", text=str(i))]) for i in range(200)]
    ids = [i for r in ray.get(refs) for i in r]
    assert len(set(ids)) == 200
    report = ray.get(a.verify.remote("c"))
    assert report.ok and report.entries == 200
    ray.kill(a, no_restart=True)


def _wait_alive(handle: Any, timeout: float = 60) -> int:
    deadline = time.time() + timeout
    while True:
        try:
            return int(ray.get(handle.pid.remote(), timeout=10))
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            if time.time() > deadline:
                raise
            time.sleep(0.5)


def test_killed_actor_restarts_and_chains_onto_last_acknowledged(ray_cluster: Any, ledger_dir: Path) -> None:
    a = ledger_actor(ledger_dir)
    acked = [ray.get(a.append.remote("k", [Nudge(tag="t", text=str(i))]))[0] for i in range(5)]
    pid = ray.get(a.pid.remote())
    os.kill(pid, signal.SIGKILL)  # mid-session, no goodbye
    new_pid = _wait_alive(a)
    assert new_pid != pid
    (nxt,) = ray.get(a.append.remote("k", [Nudge(tag="t", text="after restart")]))
    chain = [e.id for e in ray.get(a.chain_to_root.remote(nxt))]
    assert chain == [*acked, nxt]
    assert ray.get(a.verify.remote()).ok
    ray.kill(a, no_restart=True)


def _stall_a_commit(actor: Any, fifo: str, after: int) -> int:
    """Run inside the actor's process (``__ray_call__``): the tail fsync after ``after`` more commits
    never returns. Before it blocks, it writes its pid and the tail's path to ``fifo``: the event that
    proves a commit is in flight (its batch written, its sync not done, its appends not acknowledged)."""
    import os
    import threading

    real = os.fsync
    left = [after]

    def fsync(fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        if os.path.basename(path).startswith("_seg-"):
            if left[0] == 0:
                left[0] = -1
                with open(fifo, "w") as f:
                    f.write(f"{os.getpid()} {path}\n")
                threading.Event().wait()  # in flight until the test kills the process
            elif left[0] > 0:
                left[0] -= 1
        real(fd)

    os.fsync = fsync
    return os.getpid()


def test_kill_during_inflight_appends_loses_nothing_acknowledged(
        ray_cluster: Any, ledger_dir: Path, tmp_path: Path) -> None:
    """SIGKILL while a commit is provably in flight (the actor signalled from inside its fsync): the
    appends of that commit and after are not acknowledged, every acknowledged one survives the
    restart, and the restarted actor chains onto the ledger and verifies."""
    a = ledger_actor(ledger_dir)
    acked = [i for r in ray.get([a.append.remote("m", [Nudge(tag="t", text=f"before {i}")]) for i in range(3)])
             for i in r]
    fifo = tmp_path / "in-flight"
    os.mkfifo(fifo)
    signalled: list[str] = []
    reader = threading.Thread(target=lambda: signalled.append(fifo.read_text()), daemon=True)
    reader.start()  # blocks in open() until the actor opens the fifo to write
    # The actor runs up to LEDGER_THREADS appends at once, so 300 make at least 300 / 64 commits:
    # the fourth stalls.
    pid = ray.get(a.__ray_call__.remote(_stall_a_commit, str(fifo), 3))
    refs = [a.append.remote("m", [Nudge(tag="t", text=f"{i} " + "p" * 2000)]) for i in range(300)]
    reader.join(120)
    assert signalled, "no commit reached its fsync within 120 s"
    stalled_pid, tail = signalled[0].split()
    assert int(stalled_pid) == pid and Path(tail).parent == ledger_dir.resolve() / "sessions" / "m"
    os.kill(pid, signal.SIGKILL)
    not_acked = 0
    for r in refs:
        try:
            acked += ray.get(r)
        except ray.exceptions.RayActorError:
            not_acked += 1  # died with the actor: not acknowledged, may or may not be on disk
    assert not_acked >= 1  # the stalled commit's appends were in flight when the kill came
    assert len(acked) > 3  # and commits before it were acknowledged
    _wait_alive(a)
    (nxt,) = ray.get(a.append.remote("m", [Nudge(tag="t", text="after")]))
    chain = [e.id for e in ray.get(a.chain_to_root.remote(nxt))]
    assert set(acked) <= set(chain)
    assert chain[-1] == nxt
    assert ray.get(a.verify.remote()).ok
    ray.kill(a, no_restart=True)
