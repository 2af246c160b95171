"""bench/evidence.py and bench/planner.py print their ratios against issue 26's goals (no timed asserts:
performance lives in bench/; this checks only that every goal line is there and its figures parse)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _run(*argv: str) -> str:
    done = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_evidence_bench_prints_the_digest_goals() -> None:
    out = _run(str(BENCH / "evidence.py"), "--quick", "--no-trajectories")
    digest = re.compile(r"^goal: (text|search|command) digests at least 0\.5 of json\.loads on the same bytes: "
                        r"([0-9.]+)-([0-9.]+) \(([0-9.]+)x the goal at the lowest; (met|not met)\)$", re.M)
    found = {m[1]: (float(m[2]), float(m[3]), m[5]) for m in digest.finditer(out)}
    assert sorted(found) == ["command", "search", "text"], out
    for low, high, verdict in found.values():
        assert 0 < low <= high and verdict == ("met" if low >= 0.5 else "not met")
    assert re.search(r"^goal: a request digests only the results it has not seen .*\(holds\)$", out, re.M), out
    assert re.search(r"^goal: digest time per request does not grow with the session: .* = [0-9.]+x", out, re.M), out


def test_planner_bench_prints_the_step_exponent_against_its_goal() -> None:
    out = _run(str(BENCH / "planner.py"), "--quick")
    step = re.compile(r"^growth exponent next request (local 8k|mid 32k|frontier 200k) .* last step \([0-9,]+ to "
                      r"[0-9,]+ turns\) (-?[0-9.]+) against the goal 0\.1 \((-?[0-9.]+)x\)$", re.M)
    assert sorted(m[1] for m in step.finditer(out)) == ["frontier 200k", "local 8k", "mid 32k"], out
