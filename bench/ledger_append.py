"""Durable appends per second: the Arrow ledger (in-process and through the LedgerActor) against SQLite.

Every configuration writes the same payloads (canonical JSON of a ~500-byte event) and counts an
append only once it is durable: the ledger after its group commit is synced to the session's tail
(``fsync`` over zero-filled blocks, docs/LEDGER_FORMAT.md), SQLite in WAL mode with
``synchronous=FULL`` after ``COMMIT``. Batch sizes 1, 16 and 256; 1 and 16 concurrent writers.
The threads column runs one OS thread per writer (16 GIL hand-offs per shared commit); the asyncio
column runs the writers as tasks on one event loop, as the LedgerActor does.
All three are measured side by side in one run, because these machines are noisy; read the ratios.

    .venv/bin/python bench/ledger_append.py            # the full table (about three minutes)
    .venv/bin/python bench/ledger_append.py --quick    # a smoke run
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from events.envelope import Mapper
from events.payloads import Nudge
from storage.ledger import LedgerStore

TEXT = ("The tool returned a result that the model will read on its next step; " * 7)[:480]


def _payloads(n: int, w: int) -> list[Nudge]:
    return [Nudge(tag="bench", text=f"{w}:{i}:{TEXT}") for i in range(n)]


def _run_writers(writers: int, seconds: float, batch: int, step: Callable[[int, int], None]) -> float:
    """Run ``step(writer, round)`` in ``writers`` threads for ``seconds``; return entries per second."""
    counts = [0] * writers
    stop = time.perf_counter() + seconds
    barrier = threading.Barrier(writers + 1)

    def loop(w: int) -> None:
        barrier.wait()
        r = 0
        while time.perf_counter() < stop:
            step(w, r)
            counts[w] += batch
            r += 1

    threads = [threading.Thread(target=loop, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    t0 = time.perf_counter()
    barrier.wait()
    for t in threads:
        t.join()
    return sum(counts) / (time.perf_counter() - t0)


def bench_ledger(root: Path, writers: int, batch: int, seconds: float) -> float:
    store = LedgerStore(root)
    pre = [_payloads(batch, w) for w in range(writers)]
    try:
        return _run_writers(writers, seconds, batch, lambda w, r: store.append("bench", pre[w]))
    finally:
        store.close()


def bench_ledger_async(root: Path, writers: int, batch: int, seconds: float) -> float:
    """The same store, with ``writers`` asyncio tasks on one event loop instead of threads."""
    import asyncio

    store = LedgerStore(root)
    pre = [_payloads(batch, w) for w in range(writers)]

    async def run() -> float:
        counts = [0] * writers
        stop = time.perf_counter() + seconds

        async def loop(w: int) -> None:
            while time.perf_counter() < stop:
                await store.append_async("bench", pre[w])
                counts[w] += batch

        t0 = time.perf_counter()
        await asyncio.gather(*[loop(w) for w in range(writers)])
        return sum(counts) / (time.perf_counter() - t0)

    try:
        return asyncio.run(run())
    finally:
        store.close()


def bench_actor(root: Path, writers: int, batch: int, seconds: float) -> float:
    import ray

    from actors.factory import ledger_actor

    actor = ledger_actor(root)
    ray.get(actor.sessions.remote())  # started and ready before the clock runs
    # Passed by value, as a caller would: Ray inlines small arguments and puts large ones in its
    # object store itself.
    pre = [_payloads(batch, w) for w in range(writers)]
    try:
        return _run_writers(writers, seconds, batch, lambda w, r: ray.get(actor.append.remote("bench", pre[w])))
    finally:
        ray.kill(actor, no_restart=True)


def bench_sqlite(path: Path, writers: int, batch: int, seconds: float) -> float:
    mapper = Mapper()
    rows = [[(f"{w}-{i}", None, i, "nudge", mapper.encode_payload(p)[1]) for i, p in enumerate(_payloads(batch, w))]
            for w in range(writers)]
    setup = sqlite3.connect(path)
    setup.execute("pragma journal_mode=wal")
    setup.execute("create table if not exists entries (id text, parent text, seq integer, kind text, payload blob)")
    setup.commit()
    setup.close()
    local = threading.local()

    def step(w: int, r: int) -> None:
        con = getattr(local, "con", None)
        if con is None:
            con = local.con = sqlite3.connect(path, timeout=60, isolation_level=None, check_same_thread=False)
            con.execute("pragma synchronous=FULL")
        con.execute("begin immediate")
        con.executemany("insert into entries values (?, ?, ?, ?, ?)", rows[w])
        con.execute("commit")

    return _run_writers(writers, seconds, batch, step)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a short smoke run")
    ap.add_argument("--seconds", type=float, default=None, help="seconds per configuration")
    ap.add_argument("--rounds", type=int, default=None, help="interleaved rounds per cell (median is shown)")
    ap.add_argument("--no-actor", action="store_true", help="skip the LedgerActor column (no Ray)")
    args = ap.parse_args(argv)
    seconds = args.seconds or (0.3 if args.quick else 1.5)
    args.rounds = args.rounds or (1 if args.quick else 3)
    configs = [(1, 1), (16, 1), (1, 16), (16, 16), (1, 256), (16, 256)]
    if not args.no_actor:
        from farm.localray import start_local_ray

        start_local_ray()
    results = []
    tmp = Path(tempfile.mkdtemp(prefix="vak-bench-"))
    try:
        print(f"durable appends per second: median of {args.rounds} interleaved rounds of {seconds:.1f} s "
              f"(entries of ~{len(TEXT) + 60} bytes)")
        head = (f"{'writers':>7} {'batch':>5} | {'threads':>9} {'asyncio':>9} {'actor':>9} {'sqlite':>9} | "
                f"{'thr/sql':>7} {'aio/sql':>7} {'actor/sql':>9}")
        print(head)
        print("-" * len(head))
        for k, (writers, batch) in enumerate(configs):
            # Interleave the systems round by round and take medians, so a burst of disk or CPU
            # contention hits every column alike instead of whichever ran at that moment.
            runs: dict[str, list[float]] = {"threads": [], "asyncio": [], "actor": [], "sqlite": []}
            for r in range(args.rounds):
                runs["threads"].append(bench_ledger(tmp / f"l{k}-{r}", writers, batch, seconds))
                runs["asyncio"].append(bench_ledger_async(tmp / f"y{k}-{r}", writers, batch, seconds))
                if not args.no_actor:
                    runs["actor"].append(bench_actor(tmp / f"a{k}-{r}", writers, batch, seconds))
                runs["sqlite"].append(bench_sqlite(tmp / f"s{k}-{r}.db", writers, batch, seconds))
            med = {name: statistics.median(v) if v else float("nan") for name, v in runs.items()}
            led, aio, act, sql = med["threads"], med["asyncio"], med["actor"], med["sqlite"]
            row = {"writers": writers, "batch": batch, **med}
            results.append(row)
            print(f"{writers:>7} {batch:>5} | {led:>9,.0f} {aio:>9,.0f} {act:>9,.0f} {sql:>9,.0f} | "
                  f"{led / sql:>6.1f}x {aio / sql:>6.1f}x {act / sql:>8.1f}x")
        goal = next(r for r in results if r["writers"] == 16 and r["batch"] == 1)
        print(f"\ngoal: in-process group commit >= 3x SQLite with 16 concurrent writers (batch 1): "
              f"asyncio {goal['asyncio'] / goal['sqlite']:.1f}x, threads {goal['threads'] / goal['sqlite']:.1f}x")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return results


if __name__ == "__main__":
    main()
