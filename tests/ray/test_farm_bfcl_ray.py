"""A farm spec with a BFCL task on the local Ray: two models (the perfect scripted model of
tests/fakes/bfcl_model.py on a loopback server, under two names) and both multi-turn categories, 2 entries
each. Each (model, category) is one unit; every entry runs direct and through the engine and passes BFCL's
own checker; the report shows the modes side by side with the bench's goals."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.fakes.bfcl_model import PerfectModel
from tests.fakes.httpserver import serve
from vak_context.farm.bfcl.multiturn import CATEGORIES, load_entries
from vak_context.farm.report import write_report
from vak_context.farm.rows import RESULTS_SCHEMA
from vak_context.farm.run import run_farm
from vak_context.farm.spec import parse_farm_spec

ENTRIES = 2


@pytest.mark.ray
def test_a_bfcl_task_runs_both_categories_in_both_modes_across_two_models(ray_cluster: Any, tmp_path: Path) -> None:
    model = PerfectModel([e for c in CATEGORIES for e in load_entries(c, ENTRIES)])
    with serve(model.handle) as server:
        models = "".join(f"""
[[models]]
name = "{name}"
kind = "endpoint"
base_url = "{server.base_url}"
model = "scripted"
window = 16384
""" for name in ("alpha", "beta"))
        spec = parse_farm_spec(f"""[farm]
name = "bfcl"
{models}
[[tasks]]
name = "bfcl"
kind = "bfcl"
entries = {ENTRIES}
""", base_dir=tmp_path)
        result = run_farm(spec, out_dir=tmp_path / "runs")
    assert result.failed_units == [] and result.units == 4  # (alpha, beta) x (base, long_context)
    table = pq.read_table(result.table_path)
    assert table.schema.equals(RESULTS_SCHEMA)
    rows = table.to_pylist()
    seen = sorted((r["model"], r["session"], json.loads(r["detail"])["mode"], json.loads(r["detail"])["entry"])
                  for r in rows)
    assert seen == sorted((m, c, mode, f"{c}_{i}") for m in ("alpha", "beta") for c in CATEGORIES
                          for mode in ("direct", "engine") for i in range(ENTRIES))
    assert all(r["kind"] == "bfcl" and r["passed"] and r["reason"] == "" and r["request_tokens"] > 0 for r in rows)

    report = write_report(result.run_dir)[0].read_text(encoding="utf-8")
    assert "## BFCL v4 multi-turn" in report
    for name in ("alpha", "beta"):
        for category in CATEGORIES:
            line = next(x for x in report.splitlines() if x.startswith(f"| bfcl | {name} | {category} |"))
            assert "| 2/2 (100%) / 2/2 (100%) |" in line, line  # direct / engine, side by side
        goals = [x for x in report.splitlines() if x.startswith(f"- bfcl/{name}: goal ")]
        assert len(goals) == 5 and all(": met (" in g for g in goals), goals
