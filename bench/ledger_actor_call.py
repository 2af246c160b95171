"""Where an append through the LedgerActor spends its time (docs/PERFORMANCE.md, "The actor path").

One caller, one call after another, 200 calls each, against the LedgerActor (a threaded actor) and,
interleaved with it, the async actor it was before (``bench/ledger_actor_async.py``): a no-op call;
a read (``head``); an ``append_batch`` carrying one one-entry append, and 16 of them, as the client
sends them (encoded (kind, bytes) pairs); and the same 16 appends in-process (``append_many``), the
baseline in the same run. For each: wall time per call, and the CPU time per call of the actor's
process and of this (the caller's) process, all threads, read from /proc (Linux). On a machine whose
cores are busy, CPU per call is what bounds how many calls a second fit. ``--rounds`` (default 3)
interleaved rounds; the medians are shown.

    .venv/bin/python bench/ledger_actor_call.py
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from vak_context.actors.factory import ledger_actor
from vak_context.engine.localray import start_local_ray
from vak_context.events.envelope import Mapper
from vak_context.events.payloads import Nudge
from vak_context.storage.ledger import LedgerStore

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

    from bench.ledger_actor_async import async_ledger_actor

    rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 3
    start_local_ray()
    tmp = Path(tempfile.mkdtemp(prefix="vak-actor-call-"))
    actors = {"threaded": ledger_actor(tmp / "threaded"), "async": async_ledger_actor(tmp / "async")}
    pids = {name: ray.get(a.pid.remote()) for name, a in actors.items()}  # started before the clock runs
    pairs = [[Mapper().encode_payload(Nudge(tag="b", text=f"{i}:" + "x" * 480))] for i in range(16)]
    for a in actors.values():
        ray.get(a.append_batch.remote("s", [(pairs[0], None)]))  # the session exists
    store = LedgerStore(tmp / "inproc")

    def calls(a: object) -> dict[str, Callable[[], object]]:
        h: Any = a
        return {
            "no-op call": lambda: ray.get(h.pid.remote()),
            "head": lambda: ray.get(h.head.remote("s")),
            "append_batch, 1 append": lambda: ray.get(h.append_batch.remote("s", [(pairs[0], None)])),
            "append_batch, 16 (pairs)": lambda: ray.get(h.append_batch.remote("s", [(p, None) for p in pairs])),
        }

    rows: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    try:
        load = os.getloadavg()[0]
        for r in range(rounds):
            order = list(actors) if r % 2 == 0 else list(reversed(actors))
            for call in calls(None):
                for name in order:
                    rows.setdefault((call, name), []).append(per_call_us(calls(actors[name])[call], pids[name]))
            rows.setdefault(("16 in-process (append_many)", "-"), []).append(
                per_call_us(lambda: store.append_many("s", [(p, None) for p in pairs]), os.getpid()))
        print(f"load average {load:.1f} -> {os.getloadavg()[0]:.1f}; µs per call, 200 calls one after another, "
              f"median of {rounds} interleaved rounds")
        print(f"{'call':<30}{'actor':>9}{'wall':>8}{'actor CPU':>11}{'caller CPU':>12}")
        for (call, name), samples in rows.items():
            wall, actor_cpu, caller_cpu = (statistics.median(col) for col in zip(*samples, strict=True))
            shown = "-" if name == "-" else f"{actor_cpu:,.0f}"
            print(f"{call:<30}{name:>9}{wall:>8,.0f}{shown:>11}{caller_cpu:>12,.0f}", flush=True)
    finally:
        store.close()
        for a in actors.values():
            ray.kill(a, no_restart=True)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
