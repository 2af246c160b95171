"""Durable appends per second: the Arrow ledger (in-process and through the LedgerActor) against SQLite.

Every configuration writes the same payloads (canonical JSON of a ~500-byte event) and counts an
append only once it is durable: the ledger after its group commit is synced to the session's tail
(``fsync`` over zero-filled blocks, docs/LEDGER_FORMAT.md), SQLite in WAL mode with
``synchronous=FULL`` after ``COMMIT``. Batch sizes 1, 16 and 256; 1 and 16 concurrent writers.
The threads column runs one OS thread per writer; the asyncio column runs the writers as tasks on
one event loop, as the async LedgerActor did; the actor column runs one thread per writer through one
``LedgerClient``, which coalesces concurrent appends into one actor call (actors/ledger/client.py).
``actor_async`` is the same client against the LedgerActor as it was before it became a threaded
actor (an async actor, ``bench/ledger_actor_async.py``): the path before, measured beside it.
Two SQLite columns: ``sqlite`` inserts payload bytes encoded before
the clock starts (the raw baseline); ``sqlite_ledger`` starts from the same event objects as the
ledger and is charged for what a SQLite-based ledger would do: canonical encoding and the ledger's
own chain ids (blake3, ``chain_ids``). All are measured side by side in one run, because these
machines are noisy; read the ratios.

The run says which regime it measured (docs/PERFORMANCE.md): it times an fsync on the disk it writes
to and prints it, and runs the table twice, as the disk is and with a fixed 2 ms added to every
``fsync``/``fdatasync`` of both sides (a cloud volume), through an ``LD_PRELOAD`` shim it builds with
the C compiler; without one it says so and skips that table.

    .venv/bin/python bench/ledger_append.py             # both tables (about six minutes)
    .venv/bin/python bench/ledger_append.py --quick     # a smoke run
    .venv/bin/python bench/ledger_append.py --profile   # where one append's time goes, stage by stage
    .venv/bin/python bench/ledger_append.py --dir /dev/shm   # a disk whose sync costs nothing
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from vak_context.events.envelope import CURRENT_VERSION, Mapper, chain_ids
from vak_context.events.payloads import Nudge
from vak_context.storage.ledger import LedgerStore

TEXT = ("The tool returned a result that the model will read on its next step; " * 7)[:480]
LATENCY_ENV = "VAK_BENCH_SYNC_LATENCY_US"

# Added before the real call, so the data is still synced: the added time stands in for a slower
# device, it never replaces the sync. Both the ledger and SQLite (and Ray's actor process, which
# inherits the environment) go through it.
SHIM_C = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <time.h>
#include <errno.h>

static long added_ns(void) {
    const char *v = getenv("@ENV@");
    return v ? atol(v) * 1000L : 0L;
}

static void pause_added(void) {
    long ns = added_ns();
    struct timespec t = { ns / 1000000000L, ns % 1000000000L };
    while (ns > 0 && nanosleep(&t, &t) == -1 && errno == EINTR) {}
}

int fsync(int fd) {
    static int (*real)(int) = 0;
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    pause_added();
    return real(fd);
}

int fdatasync(int fd) {
    static int (*real)(int) = 0;
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    pause_added();
    return real(fd);
}
""".replace("@ENV@", LATENCY_ENV)


def _payloads(n: int, w: int) -> list[Nudge]:
    return [Nudge(tag="bench", text=f"{w}:{i}:{TEXT}") for i in range(n)]


def time_fsync(folder: Path, rounds: int = 40) -> tuple[float, float]:
    """(median, p90) µs of a 4 KiB overwrite plus ``fsync`` of a file in ``folder``: what one commit pays."""
    path = folder / "_fsync_probe"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, bytes(64 * 1024), 0)
        os.fsync(fd)
        block = os.urandom(4096)
        samples = []
        for i in range(rounds):
            os.pwrite(fd, block, (i % 16) * 4096)
            t0 = time.perf_counter()
            os.fsync(fd)
            samples.append((time.perf_counter() - t0) * 1e6)
    finally:
        os.close(fd)
        path.unlink()
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.9) - 1]


def build_shim(folder: Path) -> Path | None:
    """Compile the fsync latency shim; None when there is no C compiler (or it fails)."""
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        return None
    src, lib = folder / "sync_latency.c", folder / "sync_latency.so"
    src.write_text(SHIM_C)
    done = subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(lib), str(src), "-ldl"],
                          capture_output=True, text=True, check=False)
    return lib if done.returncode == 0 and lib.exists() else None


def _run_writers(writers: int, seconds: float, batch: int, step: Callable[[int, int], object]) -> float:
    """Run ``step(writer, round)`` in ``writers`` threads for ``seconds``; return entries per second."""
    counts = [0] * writers
    stop = time.perf_counter() + seconds
    barrier = threading.Barrier(writers + 1)

    def loop(w: int) -> None:
        barrier.wait()
        r = 0
        # At least one round each: on a loaded machine a thread can start after ``stop``, and a cell with no
        # entries would be a rate of 0 (and a ratio dividing by it).
        while True:
            step(w, r)
            counts[w] += batch
            r += 1
            if time.perf_counter() >= stop:
                break

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
            while True:  # at least one round, as in _run_writers
                await store.append_async("bench", pre[w])
                counts[w] += batch
                if time.perf_counter() >= stop:
                    break

        t0 = time.perf_counter()
        await asyncio.gather(*[loop(w) for w in range(writers)])
        return sum(counts) / (time.perf_counter() - t0)

    try:
        return asyncio.run(run())
    finally:
        store.close()


def bench_actor(root: Path, writers: int, batch: int, seconds: float, *, coalesce: bool = True,
                in_flight: int = 2, preencode: bool = True, async_actor: bool = False) -> float:
    import ray

    from bench.ledger_actor_async import async_ledger_actor
    from vak_context.actors.factory import ledger_actor
    from vak_context.actors.ledger.client import LedgerClient

    actor = async_ledger_actor(root) if async_actor else ledger_actor(root)
    ray.get(actor.sessions.remote())  # started and ready before the clock runs
    client = LedgerClient(str(root), actor, coalesce=coalesce, max_in_flight=in_flight, preencode=preencode)
    # Passed by value, as a caller would: Ray inlines small arguments and puts large ones in its
    # object store itself.
    pre = [_payloads(batch, w) for w in range(writers)]
    try:
        return _run_writers(writers, seconds, batch, lambda w, r: client.append("bench", pre[w]))
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


def bench_sqlite_ledger(path: Path, writers: int, batch: int, seconds: float) -> float:
    """SQLite as a ledger would use it, charged from the same input as the Arrow ledger: the event
    objects. Each append validates and canonically encodes its payloads (``Mapper.encode_payload``,
    the project's encoder) outside the transaction, then, inside ``BEGIN IMMEDIATE`` (which makes
    writers take turns, as the ledger's session lock does), chains them to the head with the
    ledger's own ids (``chain_ids``: blake3 over the canonical header and the payload, each entry
    naming its parent), inserts the rows and commits."""
    mapper = Mapper()
    pre = [_payloads(batch, w) for w in range(writers)]
    setup = sqlite3.connect(path)
    setup.execute("pragma journal_mode=wal")
    setup.execute("create table if not exists entries (id text primary key, parent text, seq integer, "
                  "time integer, kind text, v integer, payload blob)")
    setup.commit()
    setup.close()
    local = threading.local()
    head: list[Any] = [None, 0]  # the chain's head id and next seq; only touched inside a transaction

    def step(w: int, r: int) -> None:
        con = getattr(local, "con", None)
        if con is None:
            con = local.con = sqlite3.connect(path, timeout=60, isolation_level=None, check_same_thread=False)
            con.execute("pragma synchronous=FULL")
        encoded = [mapper.encode_payload(p) for p in pre[w]]
        kinds = [k for k, _ in encoded]
        datas = [d for _, d in encoded]
        vs = [CURRENT_VERSION.get(k, 1) for k in kinds]
        now = time.time_ns() // 1000
        con.execute("begin immediate")
        parent, seq = head
        ids = chain_ids(parent, "bench", seq, now, kinds, vs, datas, [None] * len(datas))
        parents = [parent, *ids[:-1]]
        con.executemany("insert into entries values (?, ?, ?, ?, ?, ?, ?)",
                        [(ids[i], parents[i], seq + i, now, kinds[i], vs[i], datas[i]) for i in range(len(ids))])
        head[0], head[1] = ids[-1], seq + len(ids)
        con.execute("commit")

    return _run_writers(writers, seconds, batch, step)


def run_system(name: str, path: Path, writers: int, batch: int, seconds: float, in_flight: int) -> float:
    if name == "threads":
        return bench_ledger(path, writers, batch, seconds)
    if name == "asyncio":
        return bench_ledger_async(path, writers, batch, seconds)
    if name == "actor":
        return bench_actor(path, writers, batch, seconds, in_flight=in_flight)
    if name == "actor_models":  # the client as it was: models sent, encoded by the actor
        return bench_actor(path, writers, batch, seconds, in_flight=in_flight, preencode=False)
    if name == "actor_async":  # the LedgerActor as it was: an async actor
        return bench_actor(path, writers, batch, seconds, in_flight=in_flight, async_actor=True)
    if name == "actor_raw":
        return bench_actor(path, writers, batch, seconds, coalesce=False)
    if name == "sqlite_ledger":
        return bench_sqlite_ledger(path, writers, batch, seconds)
    return bench_sqlite(path, writers, batch, seconds)


CONFIGS = [(1, 1), (16, 1), (1, 16), (16, 16), (1, 256), (16, 256)]


def run_table(tmp: Path, seconds: float, rounds: int, actor: bool, raw_actor: bool,
              in_flight: int = 2, cells: list[tuple[int, int]] | None = None) -> list[dict[str, Any]]:
    added = int(os.environ.get(LATENCY_ENV, "0") or 0)
    med_us, p90_us = time_fsync(tmp)
    regime = f"with {added / 1000:g} ms added to every sync" if added else "as the disk is"
    print(f"\n== {regime}: fsync of a 4 KiB overwrite on {tmp} (this run): median {med_us:,.0f} µs, "
          f"p90 {p90_us:,.0f} µs")
    print(f"durable appends per second: median of {rounds} interleaved rounds of {seconds:.1f} s "
          f"(entries of ~{len(TEXT) + 60} bytes)")
    names = (["threads", "asyncio"] + (["actor", "actor_async"] if actor else []) + (["actor_raw"] if raw_actor else [])
             + ["sqlite_ledger", "sqlite"])
    ours = names[:-2]
    head = (f"{'writers':>7} {'batch':>5} | " + " ".join(f"{n[:9]:>9}" for n in names) + " | "
            + " ".join(f"{n[:5] + '/sql':>9}" for n in ours) + f" | {'best/sqlL':>9}"
            + (" | actor/thr" if actor else ""))
    print(head)
    print("-" * len(head))
    results = []
    for k, (writers, batch) in enumerate(cells or CONFIGS):
        # Interleave the systems round by round and take medians, so a burst of disk or CPU
        # contention hits every column alike instead of whichever ran at that moment.
        runs: dict[str, list[float]] = {n: [] for n in names}
        for r in range(rounds):
            # The order turns round by round, and the page cache is written back before each run:
            # otherwise whoever runs right after a system that closed (a seal, a checkpoint) pays
            # for its writeback.
            for name in names[r % len(names):] + names[:r % len(names)]:
                os.sync()
                runs[name].append(run_system(name, tmp / f"{name}-{k}-{r}", writers, batch, seconds, in_flight))
        med = {name: statistics.median(v) for name, v in runs.items()}
        sql = med["sqlite"]
        best = max(med["threads"], med["asyncio"])
        results.append({"writers": writers, "batch": batch, "fsync_us": med_us, "added_us": added, **med})
        line = (f"{writers:>7} {batch:>5} | " + " ".join(f"{med[n]:>9,.0f}" for n in names) + " | "
                + " ".join(f"{med[n] / sql:>8.2f}x" for n in ours) + f" | {best / med['sqlite_ledger']:>8.2f}x")
        if actor:
            line += f" | {med['actor'] / med['threads']:>8.2f}x"
        print(line, flush=True)
    _print_goals(results, actor)
    return results


def _print_goals(results: list[dict[str, Any]], actor: bool) -> None:
    """The issue's goals, read off the table: against raw SQLite and against SQLite as a ledger."""
    def best(row: dict[str, Any]) -> float:
        return max(row["threads"], row["asyncio"])

    for row in results:
        if row["writers"] == 16 and row["batch"] == 1:
            print(f"goal: 16 writers, batch 1: in-process {best(row) / row['sqlite']:.1f}x SQLite raw, "
                  f"{best(row) / row['sqlite_ledger']:.1f}x SQLite as a ledger (3x with added latency)"
                  + (f"; actor {row['actor'] / best(row):.2f}x of in-process (within 2x)" if actor else ""))
    for base, label in (("sqlite", "raw"), ("sqlite_ledger", "as a ledger")):
        worst = min(results, key=lambda row: best(row) / row[base])
        print(f"goal: in-process >= 1x SQLite ({label}) in every cell: lowest {best(worst) / worst[base]:.2f}x"
              f" ({worst['writers']} writers, batch {worst['batch']})")


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a short smoke run")
    ap.add_argument("--seconds", type=float, default=None, help="seconds per configuration")
    ap.add_argument("--rounds", type=int, default=None, help="interleaved rounds per cell (median is shown)")
    ap.add_argument("--no-actor", action="store_true", help="skip the LedgerActor column (no Ray)")
    ap.add_argument("--raw-actor", action="store_true",
                    help="add a column of plain actor calls, one per append (no coalescing)")
    ap.add_argument("--in-flight", type=int, default=2, help="actor calls in flight per session (the client's)")
    ap.add_argument("--dir", type=Path, default=None, help="where the ledgers and databases go (default: a temp dir)")
    ap.add_argument("--latency-ms", type=float, default=2.0, help="sync latency added in the second table")
    ap.add_argument("--tables", choices=["both", "as-is", "latency"], default=None,
                    help="which tables to run (default both; --quick: as-is)")
    ap.add_argument("--profile", action="store_true", help="profile one append stage by stage instead")
    ap.add_argument("--cells", default=None,
                    help="only these cells, as writers:batch pairs (e.g. 16:1,16:16); default all six")
    args = ap.parse_args(argv)
    if args.profile:
        from bench.ledger_profile import main as profile_main

        profile_main(args.dir)
        return []
    seconds = args.seconds or (0.3 if args.quick else 1.5)
    rounds = args.rounds or (1 if args.quick else 3)
    tables = args.tables or ("as-is" if args.quick else "both")
    child = LATENCY_ENV in os.environ  # the re-run under the shim: its one table
    if not args.no_actor:
        from vak_context.engine.localray import start_local_ray

        start_local_ray()
    tmp = Path(tempfile.mkdtemp(prefix="vak-bench-", dir=args.dir))
    try:
        results: list[dict[str, Any]] = []
        if child or tables != "latency":
            cells = [(int(w), int(b)) for w, b in (c.split(":") for c in args.cells.split(","))] if args.cells else None
            results = run_table(tmp, seconds, rounds, not args.no_actor, args.raw_actor, args.in_flight, cells)
        if child or tables == "as-is":
            if not child:
                print("\n(the table with added sync latency is skipped: --tables both runs it)")
            return results
        lib = build_shim(tmp)
        if lib is None:
            print("\nno C compiler (cc, gcc, clang) found: the table with added sync latency is skipped")
            return results
        env = {**os.environ, "LD_PRELOAD": str(lib), LATENCY_ENV: str(int(args.latency_ms * 1000))}
        forwarded = list(argv if argv is not None else sys.argv[1:])
        sys.stdout.flush()
        # LD_PRELOAD is read when a process starts, so the table runs again in a child process.
        subprocess.run([sys.executable, str(Path(__file__).resolve()), *forwarded], env=env, check=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return results


if __name__ == "__main__":
    main()
