"""Where an append through the LedgerActor spends its time (docs/PERFORMANCE.md, "The actor path").

One caller, one call after another, 200 calls each: a no-op actor call; a read that hops to a worker
thread in the actor (``head``); an ``append_batch`` carrying one one-entry append, and 16 of them, as the
client sends them (encoded (kind, bytes) pairs) and as models; and the same 16 appends in-process
(``append_many_async``), the baseline in the same run. For each: wall time per call, and the CPU time per
call of the actor's process and of this (the caller's) process, all threads, read from /proc (Linux).
On a machine whose cores are busy, CPU per call is what bounds how many calls a second fit.

    .venv/bin/python bench/ledger_actor_call.py
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from actors.factory import ledger_actor
from events.envelope import Mapper
from events.payloads import Nudge
from farm.localray import start_local_ray
from storage.ledger import LedgerStore

TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User plus system CPU seconds of process ``pid``, all its threads (fields 14 and 15 of /proc/pid/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def per_call_us(fn: Callable[[], object], actor_pid: int, n: int = 200) -> tuple[float, float, float]:
    """(wall, actor CPU, caller CPU) µs per call of ``fn``, over ``n`` calls one after another."""
    me = os.getpid()
    a0, c0, t0 = cpu_s(actor_pid), cpu_s(me), time.perf_counter()
    for _ in range(n):
        fn()
    a1, c1, t1 = cpu_s(actor_pid), cpu_s(me), time.perf_counter()
    return (t1 - t0) / n * 1e6, (a1 - a0) / n * 1e6, (c1 - c0) / n * 1e6


def main() -> None:
    import ray

    start_local_ray()
    tmp = Path(tempfile.mkdtemp(prefix="vak-actor-call-"))
    actor = ledger_actor(tmp / "actor")
    pid = ray.get(actor.pid.remote())  # started before the clock runs
    models = [[Nudge(tag="b", text=f"{i}:" + "x" * 480)] for i in range(16)]
    pairs = [[Mapper().encode_payload(p[0])] for p in models]
    ray.get(actor.append_batch.remote("s", [(pairs[0], None)]))  # the session exists
    store = LedgerStore(tmp / "inproc")
    loop = asyncio.new_event_loop()
    calls: dict[str, Callable[[], object]] = {
        "no-op call": lambda: ray.get(actor.pid.remote()),
        "head (a thread hop)": lambda: ray.get(actor.head.remote("s")),
        "append_batch, 1 append": lambda: ray.get(actor.append_batch.remote("s", [(pairs[0], None)])),
        "append_batch, 16 (pairs)": lambda: ray.get(actor.append_batch.remote("s", [(p, None) for p in pairs])),
        "append_batch, 16 (models)": lambda: ray.get(actor.append_batch.remote("s", [(p, None) for p in models])),
        "16 in-process (models)": lambda: loop.run_until_complete(
            store.append_many_async("s", [(p, None) for p in models])),
    }
    try:
        print(f"load average {os.getloadavg()[0]:.1f}; µs per call, 200 calls one after another")
        print(f"{'call':<27}{'wall':>8}{'actor CPU':>11}{'caller CPU':>12}")
        for name, fn in calls.items():
            wall, actor_cpu, caller_cpu = per_call_us(fn, pid)
            print(f"{name:<27}{wall:>8,.0f}{actor_cpu:>11,.0f}{caller_cpu:>12,.0f}", flush=True)
    finally:
        loop.close()
        store.close()
        ray.kill(actor, no_restart=True)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
