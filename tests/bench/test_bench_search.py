"""bench/search.py runs at a tiny size and prints its goal lines with sane numbers (no timed asserts:
performance lives in bench/; this only checks that the values parse and are positive)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "search.py"
GOAL = re.compile(r"^goal: (?P<what>.+): measured (?P<x>[0-9.]+) ms.*, ratio (?P<r>[0-9.]+) \((?:met|not met)\)$")


def test_search_bench_prints_its_goals(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(BENCH), "--quick", "--cache", str(tmp_path / "cache")],
                          capture_output=True, text=True, timeout=300, env={**os.environ}, check=False)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    goals = [GOAL.match(line) for line in out.splitlines() if line.startswith("goal: ")]
    assert len(goals) == 6 and all(goals), out
    whats = [g["what"] for g in goals if g]
    assert sum("append" in w for w in whats) == 3
    assert any("100k documents" in w for w in whats) and any("restart" in w for w in whats)
    assert all(float(g["x"]) > 0 and float(g["r"]) > 0 for g in goals if g)
    # each table's rows: every cell after the first is a positive number
    for title in ("a. append", "b. query latency", "c. first query after a restart"):
        assert title in out, out
    rows = re.findall(r"^\s+([0-9,]+)\s+((?:[0-9.]+\s*){7})$", out, re.M)
    assert [r[0] for r in rows] == ["100", "400"], out
    assert all(float(v) > 0 for _docs, cells in rows for v in cells.split())
    assert re.search(r"lazy catch-up .*: [0-9.]+ ms per result", out)
    # the corpus is cached: a second run of the parts that read it (b and c) finds it and writes nothing
    cached = subprocess.run([sys.executable, str(BENCH), "--quick", "--parts", "bc", "--cache", str(tmp_path / "cache")],
                            capture_output=True, text=True, timeout=300, check=False)
    assert cached.returncode == 0 and "written" not in cached.stderr, cached.stderr
