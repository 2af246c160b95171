"""bench/bfcl_history.py end to end, as a user runs it, on 2 entries (simple_python_0, multiple_0) with the
scripted model (farm/bfcl/single_model.py: BFCL's answers while a request is at most T = 4,096 tokens,
degraded above), probed first: at K = 0 both modes pass (K = 1,000, whose cut is K = 0's, left out); after 6k tokens of recorded tau-bench history direct's
requests are over T and fail BFCL's checker, while the engine, knowing T only from its probe, keeps its
requests under it and passes. No timing asserts."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_engine_keeps_its_k0_accuracy_after_long_history(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "bfcl_history.py"), "--model", "scripted",
                           "--threshold", "4096", "--entries", "1", "--category", "simple_python", "--category",
                           "multiple", "--sizes", "0", "1000", "6000", "--out", str(tmp_path / "out"),
                           "--plot", str(tmp_path / "acc.png")],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    probe = re.search(r"probe at window 8,192: horizon ([\d,]+) tokens", out)
    assert probe is not None and 3_500 < int(probe.group(1).replace(",", "")) <= 4_096, out[-3000:]
    # K, history tokens, then per mode: passed/n, %, [lo,hi], mean tokens
    rows = {int(r[0].replace(",", "")): r for line in out.splitlines()
            if re.match(r"^\s+[\d,]+\s+[\d,]+\s+\d+/\d+", line) and (r := line.split())}
    assert rows[0][2] == "2/2" and rows[0][6] == "2/2", rows[0]  # direct, engine at K = 0
    assert 5_000 < int(rows[6000][1].replace(",", "")) <= 6_000  # the history's own size
    assert rows[6000][2] == "0/2" and rows[6000][6] == "2/2", rows[6000]
    assert int(rows[6000][5].replace(",", "")) > 4_096 >= int(rows[6000][9].replace(",", ""))  # request sizes
    assert "[0%,66%]" in rows[6000][4]  # Wilson 95% of 0/2
    goals = [line for line in out.splitlines() if line.startswith("goal ")]
    assert len(goals) == 2 and all(": met (" in g for g in goals), goals
    runs = (tmp_path / "out" / "runs.jsonl").read_text().splitlines()
    assert len(runs) == 8  # 2 entries x 2 sizes x 2 modes
    # K = 1,000 holds no history (the recorded system prompt alone is over it): said, and not run again as K = 0
    assert "K=1,000: its history is K=0's (0 tokens, 0 messages" in out and 1000 not in rows
    assert (tmp_path / "acc.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
