"""One writer's appends in-process under each commit mode of ``LedgerStore.inline_commits``, beside SQLite.

Adaptive (None, the default: inline while the last commit's write and sync took under 0.2 ms), the
same with a 0.5 ms bound, through
the committer thread (False), and inline in the writer's own thread (True; for one writer this is also
what ``append_many``'s leader/follower form does), at batches of 1, 16 and 256, 3 interleaved rounds of
1.5 s, against raw SQLite (``bench/ledger_append.py``'s ``sqlite`` column). The fsync median is printed
first: which mode wins depends on it (docs/PERFORMANCE.md, "Where a goal was not met").

    .venv/bin/python bench/ledger_inline_modes.py [--dir FOLDER]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.ledger_append import _payloads, _run_writers, bench_sqlite, time_fsync
from vak_context.storage.ledger import LedgerStore

# name: (inline_commits, the adaptive mode's bound on the last commit's write and sync, None: the default)
MODES: dict[str, tuple[bool | None, float | None]] = {
    "adaptive": (None, None), "adaptive_0.5ms": (None, 0.0005), "committer": (False, None), "inline": (True, None)}


def run_mode(mode: tuple[bool | None, float | None], root: Path, batch: int, seconds: float) -> float:
    store = LedgerStore(root)
    store.inline_commits, bound = mode
    if bound is not None:
        store.inline_max_write_s = bound
    payloads = _payloads(batch, 0)
    try:
        return _run_writers(1, seconds, batch, lambda w, r: store.append("bench", payloads))
    finally:
        store.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, default=None, help="where the ledgers and databases go")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="vak-inline-", dir=args.dir))
    try:
        med_us, p90_us = time_fsync(tmp)
        print(f"fsync median {med_us:,.0f} µs, p90 {p90_us:,.0f} µs; load average {os.getloadavg()[0]:.1f}")
        names = [*MODES, "sqlite"]
        for batch in (1, 16, 256):
            runs: dict[str, list[float]] = {n: [] for n in names}
            for r in range(3):
                for name in names[r % len(names):] + names[:r % len(names)]:
                    os.sync()
                    root = tmp / f"{name}-{batch}-{r}"
                    runs[name].append(bench_sqlite(root, 1, batch, 1.5) if name == "sqlite"
                                      else run_mode(MODES[name], root, batch, 1.5))
            med = {n: statistics.median(v) for n, v in runs.items()}
            print(f"1 writer, batch {batch:>3}: " + ", ".join(
                f"{n} {v:,.0f}/s ({v / med['sqlite']:.2f}x)" for n, v in med.items()), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
