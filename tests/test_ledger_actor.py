"""LedgerActor on a real local Ray: named and detached, durable appends, restart after a kill."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import ray

from actors.factory import NAMESPACE, get_ledger_actor, ledger_actor, ledger_actor_name
from actors.ledger import LedgerActor
from events.payloads import Directive, Nudge
from storage.ledger import LedgerStore

pytestmark = pytest.mark.ray


async def test_plain_class_works_without_ray(ledger_dir: Path) -> None:
    actor = LedgerActor(str(ledger_dir))
    ids = await asyncio.gather(*[actor.append("s", [Directive(text=f"no ray needed {i}")]) for i in range(20)])
    chain = await actor.chain_to_root(await actor.head("s") or "")
    assert {i for (i,) in ids} == {e.id for e in chain}
    assert (await actor.verify())["ok"]
    await actor.close()


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
        "import ray, sys; from actors.factory import ledger_actor; from events.payloads import Directive;"
        "ray.init(address=sys.argv[1], namespace='vak', log_to_driver=False);"
        "a = ledger_actor(sys.argv[2]); print(ray.get(a.append.remote('job', [Directive(text='from a job')]))[0])"
    )
    address = ray.get_runtime_context().gcs_address
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
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
    assert report["ok"] and report["entries"] == 200
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
    assert ray.get(a.verify.remote())["ok"]
    ray.kill(a, no_restart=True)


def test_kill_during_inflight_appends_loses_nothing_acknowledged(ray_cluster: Any, ledger_dir: Path) -> None:
    a = ledger_actor(ledger_dir)
    pid = ray.get(a.pid.remote())
    refs = [a.append.remote("m", [Nudge(tag="t", text=f"{i} " + "p" * 2000)]) for i in range(300)]
    time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    acked: list[str] = []
    for r in refs:
        try:
            acked += ray.get(r)
        except ray.exceptions.RayActorError:
            pass  # died with the actor: not acknowledged, may or may not be on disk
    _wait_alive(a)
    (nxt,) = ray.get(a.append.remote("m", [Nudge(tag="t", text="after")]))
    chain = [e.id for e in ray.get(a.chain_to_root.remote(nxt))]
    assert set(acked) <= set(chain)
    assert chain[-1] == nxt
    assert ray.get(a.verify.remote())["ok"]
    ray.kill(a, no_restart=True)
