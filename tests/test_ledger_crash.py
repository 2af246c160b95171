"""Crash safety: SIGKILL a writer at random moments, 50 times; nothing acknowledged is lost."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from storage.ledger import LedgerStore

REPO = Path(__file__).resolve().parent.parent
KILLS = 50


def _run_and_kill(root: Path, seed: int, rng: random.Random) -> list[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, str(REPO / "tests" / "crash_writer.py"), str(root), str(seed)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True)
    acked: list[str] = []
    first = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.strip():
                acked.append(line.strip())
                first.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    if not first.wait(60):
        proc.kill()
        proc.wait()
        raise AssertionError("the writer never acknowledged an append (run tests/crash_writer.py by hand to see why)")
    time.sleep(rng.uniform(0.0, 0.25))
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    reader.join(5)
    assert proc.stdout is not None
    proc.stdout.close()
    return acked


def test_sigkill_loses_nothing_acknowledged(tmp_path: Path) -> None:
    root = tmp_path / "ledger"
    rng = random.Random(1234)
    all_acked: list[str] = []
    torn_repairs = 0
    for k in range(KILLS):
        all_acked += _run_and_kill(root, k, rng)
        with LedgerStore(root) as store:
            for eid in all_acked:
                assert store.get(eid).id == eid
            torn_repairs += sum(1 for r in store.recoveries if r["bytes_dropped"])
            report = store.verify()
            assert report.ok, str(report.first_bad)
            assert report.entries >= len(all_acked)
        # every segment the killed writer left open was sealed (a torn-tail activity entry, if any,
        # went to a segment of the reopened store, which its close() sealed too)
        assert not list((root / "sessions" / "crash").glob("_seg-*.arrow"))
        sealed_after_crash = len(list((root / "sessions" / "crash").glob("seg-*.arrow")))
    # The run must really have exercised crashes mid-write at least sometimes, or it proves little.
    print(f"{KILLS} kills, {len(all_acked)} acknowledged entries, {torn_repairs} torn tails truncated, "
          f"{sealed_after_crash} segments")
    assert len(all_acked) > KILLS
