"""Crash safety: SIGKILL a writer 50 times, at random moments and at exact points of a commit.

Nothing acknowledged is lost; a read-only verify() of the just-killed ledger (before any writer
repairs it) passes, with a note for a torn or empty tail; and the kills that land mid-write are
repaired, every one of them, by the next writer.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import threading
import time
from pathlib import Path

from tests.fakes.crash_writer import run_piped
from vak_context.storage.ledger import LedgerStore

KILLS = 50
# Every fifth run is killed from outside at a random moment; the rest kill themselves at an exact
# point of a commit (tests/fakes/crash_writer.py), so mid-write kills happen on every run of this test.
PLAN = ["random", "header", "midbody", "marker", "random"]


# Each writer is a process of its own, forked from a forkserver that imported the writer (and the ledger)
# once: a fresh interpreter per kill paid about 2 s of imports, 50 times (tests/fakes/crash_writer.py).
_WRITERS = multiprocessing.get_context("forkserver")
_WRITERS.set_forkserver_preload(["tests.fakes.crash_writer"])


def _run_and_kill(root: Path, seed: int, mode: str, rng: random.Random) -> list[str]:
    """Run the writer until it dies (killed by us after a random delay, or by itself); its acked ids."""
    acks_before_kill = 0 if mode == "header" else rng.randint(1, 8)
    ours, theirs = _WRITERS.Pipe(duplex=False)
    proc = _WRITERS.Process(target=run_piped, args=(theirs, str(root), seed, mode, acks_before_kill), daemon=True)
    proc.start()
    theirs.close()  # the writer holds the only sending end: its death ends the reader
    acked: list[str] = []
    first = threading.Event()

    def read() -> None:
        while True:
            try:
                lines = ours.recv_bytes().decode()
            except EOFError:
                return
            acked.extend(line.strip() for line in lines.splitlines() if line.strip())
            first.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        if mode == "random":
            if not first.wait(60):
                raise AssertionError("the writer never acknowledged an append (run tests/fakes/crash_writer.py by hand)")
            time.sleep(rng.uniform(0.0, 0.25))  # the random moment itself; the test waits on events only
            os.kill(proc.pid, signal.SIGKILL)  # type: ignore[arg-type]
        proc.join(120)
        if proc.exitcode is None:
            raise AssertionError(f"the {mode!r} writer never reached its kill point")
        assert proc.exitcode == -signal.SIGKILL, f"the {mode!r} writer exited with {proc.exitcode}, not killed"
        reader.join(5)
    finally:
        if proc.exitcode is None:
            proc.kill()
            proc.join()
        proc.close()
        ours.close()
    return acked


def test_sigkill_loses_nothing_acknowledged(tmp_path: Path) -> None:
    """No acknowledged entry is lost over 50 kills; read-only verify passes on each just-killed ledger
    (a torn or empty tail is a note); each mid-write kill is truncated by the next writer."""
    root = tmp_path / "ledger"
    rng = random.Random(1234)
    all_acked: list[str] = []
    torn_repairs = 0
    mid_write_kills = 0
    for k in range(KILLS):
        mode = PLAN[k % len(PLAN)]
        all_acked += _run_and_kill(root, k, mode, rng)
        with LedgerStore(root, readonly=True) as before_repair:  # what `vak verify` sees right after the kill
            report = before_repair.verify()
            assert report.ok, f"kill {k} ({mode}): {report.first_bad}"
            if mode in ("header", "midbody", "marker"):
                assert any("torn tail" in note for note in report.notes), (mode, report.notes)
        with LedgerStore(root) as store:
            for eid in all_acked:
                assert store.get(eid).id == eid
            repaired = [r for r in store.recoveries if r["bytes_dropped"]]
            torn_repairs += len(repaired)
            if mode in ("midbody", "marker"):  # the killed commit's bytes are dropped, and said so
                mid_write_kills += 1
                assert len(repaired) == 1, (mode, store.recoveries)
            if mode == "header":  # the empty tail is sealed; no bytes to drop
                assert [r["bytes_dropped"] for r in store.recoveries] == [0], store.recoveries
            report = store.verify()
            assert report.ok, str(report.first_bad)
            assert report.entries >= len(all_acked)
        # every segment the killed writer left open was sealed (a torn-tail activity entry, if any,
        # went to a segment of the reopened store, which its close() sealed too)
        assert not list((root / "sessions" / "crash").glob("_seg-*.arrow"))
    print(f"{KILLS} kills, {len(all_acked)} acknowledged entries, {torn_repairs} torn tails truncated")
    assert mid_write_kills == 2 * KILLS // len(PLAN)
    assert torn_repairs >= mid_write_kills
    assert len(all_acked) > KILLS
