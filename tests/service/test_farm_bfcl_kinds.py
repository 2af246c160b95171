"""The farm's bfcl_history and bfcl_degrade task kinds (issue 36 item 4) at a tiny size, each unit run in this
process as a Ray worker runs it (``execute_unit``), against the scripted models on loopback servers, then
``vak farm report``'s sections and PNGs from the rows. The Ray path (``vak farm run``) is
tests/ray/test_farm_bfcl_kinds_ray.py."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from vak_context.farm.bfcl.scripted import loopback
from vak_context.farm.bfcl.single import load_single
from vak_context.farm.bfcl.single_model import SingleTurnModel
from vak_context.farm.report import write_report
from vak_context.farm.rows import RESULTS_SCHEMA
from vak_context.farm.run import plan_units
from vak_context.farm.spec import parse_farm_spec
from vak_context.farm.tasks import UnitJob, execute_unit

PNG = b"\x89PNG\r\n\x1a\n"


def test_both_kinds_run_as_units_and_report_accuracy_by_request_size(tmp_path: Path) -> None:
    entries = [*load_single("simple_python", 1), *load_single("multiple", 1)]
    with loopback(SingleTurnModel(entries, 4_096, name="scripted")) as upstream:
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
categories = ["simple_python", "multiple"]
entries = 1
sizes = [6000, 0]

[[tasks]]
name = "degrade"
kind = "bfcl_degrade"
categories = ["multi_turn_base"]
entries = 1
thresholds = [4096]
""", base_dir=tmp_path)
        units, notes = plan_units(spec)
        assert notes == []
        assert sorted(str(u.key) for u in units) == [
            "degrade/degrading-4096/multi_turn_base", "degrade/perfect/multi_turn_base",
            "history/scripted/multiple", "history/scripted/simple_python"]
        run_dir = tmp_path / "run"
        tables = [execute_unit(UnitJob(key=u.key, run_id="kinds", task=u.task, model=u.model,
                                       work=run_dir / u.task.kind / u.key.file_name)) for u in units]
    rows = pa.concat_tables(tables).to_pylist()
    pq.write_table(pa.Table.from_pylist(rows, schema=RESULTS_SCHEMA), run_dir / "results.parquet")
    assert all(r["request"] >= 0 for r in rows), [r["reason"] for r in rows if r["request"] < 0]

    history = {(r["session"], json.loads(r["detail"])["k"], json.loads(r["detail"])["mode"]): r
               for r in rows if r["kind"] == "bfcl_history"}
    assert len(history) == 8  # 2 categories x 2 sizes x 2 modes, one entry each
    for category in ("simple_python", "multiple"):
        assert history[(category, 0, "direct")]["passed"] and history[(category, 0, "engine")]["passed"]
        over = history[(category, 6000, "direct")]
        assert not over["passed"] and over["request_tokens"] > over["horizon"]  # direct past the horizon fails
        kept = history[(category, 6000, "engine")]
        # under T; the engine sizes requests by its own estimate, calibrated by receipts, so a request may
        # pass the probed horizon (just under T) by a few tokens
        assert kept["passed"] and kept["request_tokens"] <= 4_096 and kept["horizon"] <= 4_096
    degrade = {(r["model"], json.loads(r["detail"])["mode"]): r for r in rows if r["kind"] == "bfcl_degrade"}
    assert set(degrade) == {("degrading-4096", "direct"), ("degrading-4096", "engine"), ("perfect", "perfect")}
    assert degrade[("perfect", "perfect")]["passed"] and degrade[("degrading-4096", "engine")]["passed"]
    assert not degrade[("degrading-4096", "direct")]["passed"]  # its schemas alone are over T

    paths = write_report(run_dir)
    report = paths[0].read_text(encoding="utf-8")
    assert "## BFCL single-turn after recorded history" in report and "### history / scripted" in report
    assert "probe at window 8,192: horizon" in report
    assert "accuracy by request size over the measured horizon" in report
    assert "## BFCL multi-turn against a model that degrades past T" in report
    assert "goal multi_turn_base T=4,096 engine accuracy = the perfect model's on the same entries: met" in report
    names = sorted(p.name for p in paths[1:])
    assert names == ["bfcl_degrade_degrade_T4096.png", "bfcl_history_history_scripted.png"]
    assert all(p.read_bytes()[:8] == PNG for p in paths[1:])
