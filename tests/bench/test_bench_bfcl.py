"""bench/bfcl.py end to end, as a user runs it, in front of the perfect scripted model on loopback: it starts
vak serve itself, runs one entry of each category direct and through the server, and reads the serve mode's
request sizes from the server's receipts (one per upstream call). No timing asserts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.fakes.bfcl_model import PerfectModel
from tests.fakes.httpserver import serve
from vak_context.farm.bfcl.multiturn import CATEGORIES, load_entries

ROOT = Path(__file__).resolve().parents[2]


def test_bfcl_bench_runs_direct_and_through_vak_serve() -> None:
    model = PerfectModel([e for c in CATEGORIES for e in load_entries(c, 1)])
    with serve(model.handle) as upstream:
        done = subprocess.run([sys.executable, str(ROOT / "bench" / "bfcl.py"), "--entries", "1", "--model",
                               "openai-compat:perfect", "--base-url", upstream.base_url], cwd=ROOT,
                              capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    rows = [r for line in out.splitlines() if line.startswith("multi_turn_")
            and len(r := line.split()) == 12 and r[1] in ("direct", "serve")]  # the table's rows, not the bands
    assert sorted((r[0], r[1], r[2]) for r in rows) == sorted((c, m, "1/1") for c in CATEGORIES for m in ("direct", "serve"))
    served = {r[0]: r for r in rows if r[1] == "serve"}
    direct = {r[0]: r for r in rows if r[1] == "direct"}
    for category in CATEGORIES:  # max tokens per request: one upstream call each, never a client request's sum
        assert int(served[category][5]) < int(direct[category][5])
    goals = [line for line in out.splitlines() if line.startswith("goal ")]
    assert len(goals) == 5 and all(" serve " in g for g in goals), goals
    assert "vak serve at http://127.0.0.1:" in out
