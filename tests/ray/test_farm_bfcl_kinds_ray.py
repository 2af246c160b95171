"""`vak farm run` with the bfcl_history and bfcl_degrade task kinds on the local Ray, at a tiny size: the
scripted single-turn model (degrading above T = 4,096 tokens) on a loopback server for bfcl_history, the
degrading multi-turn model each bfcl_degrade unit serves itself. Every unit finishes, and `vak farm report`
draws accuracy against request size per task (the figures themselves: tests/service/test_farm_bfcl_kinds.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from vak_context.farm.bfcl.scripted import loopback
from vak_context.farm.bfcl.single import load_single
from vak_context.farm.bfcl.single_model import SingleTurnModel
from vak_context.farm.report import write_report
from vak_context.farm.run import run_farm
from vak_context.farm.spec import parse_farm_spec


@pytest.mark.ray
def test_vak_farm_run_runs_both_kinds_and_reports_them(ray_cluster: Any, tmp_path: Path) -> None:
    with loopback(SingleTurnModel(load_single("simple_python", 1), 4_096, name="scripted")) as upstream:
        spec = parse_farm_spec(f"""[farm]
name = "kinds"

[[models]]
name = "scripted"
kind = "endpoint"
base_url = "{upstream.base_url}"
model = "scripted"
window = 8192

[[tasks]]
name = "history"
kind = "bfcl_history"
categories = ["simple_python"]
entries = 1
sizes = [0, 6000]

[[tasks]]
name = "degrade"
kind = "bfcl_degrade"
categories = ["multi_turn_base"]
entries = 1
thresholds = [4096]
perfect = false
""", base_dir=tmp_path)
        result = run_farm(spec, out_dir=tmp_path / "runs")
    assert result.failed_units == [] and result.units == 2
    rows = pq.read_table(result.table_path).to_pylist()
    seen = sorted((r["kind"], json.loads(r["detail"]).get("k", -1), json.loads(r["detail"])["mode"], r["passed"])
                  for r in rows)
    assert seen == [("bfcl_degrade", -1, "direct", False), ("bfcl_degrade", -1, "engine", True),
                    ("bfcl_history", 0, "direct", True), ("bfcl_history", 0, "engine", True),
                    ("bfcl_history", 6000, "direct", False), ("bfcl_history", 6000, "engine", True)]
    paths = write_report(result.run_dir)
    assert sorted(p.name for p in paths[1:]) == ["bfcl_degrade_degrade_T4096.png", "bfcl_history_history_scripted.png"]
