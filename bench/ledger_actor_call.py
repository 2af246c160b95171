"""Where an append through the LedgerActor spends its time (docs/PERFORMANCE.md, "Results").

Medians of 60, one caller, one call after another: a no-op actor call's round trip; an ``append_batch``
call carrying 16 one-entry appends, as the client sends them (encoded (kind, bytes) pairs) and as
models; and the same 16 appends in-process (``append_many_async``), the baseline in the same run.

    .venv/bin/python bench/ledger_actor_call.py
"""

from __future__ import annotations

import asyncio
import shutil
import statistics
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


def median_us(fn: Callable[[], object], n: int = 60) -> float:
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(samples)


def main() -> None:
    import ray

    start_local_ray()
    tmp = Path(tempfile.mkdtemp(prefix="vak-actor-call-"))
    actor = ledger_actor(tmp / "actor")
    ray.get(actor.sessions.remote())  # started before the clock runs
    models = [[Nudge(tag="b", text=f"{i}:" + "x" * 480)] for i in range(16)]
    pairs = [[Mapper().encode_payload(p[0])] for p in models]
    store = LedgerStore(tmp / "inproc")
    try:
        noop = median_us(lambda: ray.get(actor.pid.remote()))
        as_pairs = median_us(lambda: ray.get(actor.append_batch.remote("s", [(p, None) for p in pairs])))
        as_models = median_us(lambda: ray.get(actor.append_batch.remote("s", [(p, None) for p in models])))
        inproc = median_us(lambda: asyncio.run(store.append_many_async("s", [(p, None) for p in models])))
    finally:
        store.close()
        ray.kill(actor, no_restart=True)
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"no-op actor call {noop:,.0f} µs; append_batch of 16 one-entry appends: encoded pairs {as_pairs:,.0f} µs, "
          f"models {as_models:,.0f} µs; the same 16 in-process (append_many_async) {inproc:,.0f} µs (medians of 60)")


if __name__ == "__main__":
    main()
