"""A farm run on the real local Ray, a real llama.cpp server (SmolLM2) and a recorded session.

One run holds: a replay of a SWE-agent recording under two profiles, a quick probe and a small live task
on SmolLM2, and a probe of a model whose weights do not exist. It checks what run_farm promises: one row
per recorded request, every replay check passed, one Parquet table with the declared schema, the model
server started once per node and model and shared by its units, a model that cannot be served failing
only its own units with the reason, nothing left running after the run, and a rerun of the same spec
skipping every finished unit.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import ray

from vak_context.errors import FarmSpecError
from vak_context.events.payloads import AssistantStep, Directive, TextBlock
from vak_context.farm.rows import RESULTS_SCHEMA, UNIT_FAILED
from vak_context.farm.run import FarmProgress, run_farm
from vak_context.farm.spec import load_farm_spec
from vak_context.storage.ledger import LedgerStore

SWE = "SWE-agent__pydicom__pydicom-1458.traj"


def write_spec(tmp_path: Path, trajectories: Path, *, seed_note: str = "") -> Path:
    ledger = tmp_path / "mine"
    if not ledger.exists():
        with LedgerStore(ledger) as store:  # a one-turn session: a live run on it is a short prefill
            store.append("hello", [Directive(text="Say hello."), AssistantStep(blocks=(TextBlock(text="Hello."),))])
    spec = tmp_path / "farm.toml"
    spec.write_text(f"""
[farm]
name = "runtest"
# {seed_note}
[[models]]
name = "small"
model = "smollm2"
n_ctx = 4096
[[models]]
name = "wide"
model = "smollm2"
n_ctx = 8192
[[models]]
name = "broken"
model = "weights/missing.gguf"
[[sessions]]
name = "swe"
path = "{trajectories / SWE}"
[[sessions]]
name = "hello"
kind = "ledger"
path = "mine"
[[tasks]]
name = "replay"
kind = "replay"
models = ["small", "wide"]
sessions = ["swe"]
[[tasks]]
name = "ladder"
kind = "probe"
models = ["small", "broken"]
quick = true
max_sizes = 1
[[tasks]]
name = "hi"
kind = "live"
models = ["small"]
session = "hello"
directives = ["Say hi again."]
repeats = 2
require = 1
max_steps = 1
max_tokens = 16
""", encoding="utf-8")
    return spec


def named_farm_actors() -> list[str]:
    return [a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a["name"].startswith("farmmodel-")]


@pytest.mark.ray
@pytest.mark.live
@pytest.mark.slow
def test_a_farm_run_on_local_ray(ray_cluster: Any, trajectories: Path, tmp_path: Path) -> None:
    """Rows, checks, schema, server reuse, a failing model, cleanup and resume (see the module docstring)."""
    spec = load_farm_spec(write_spec(tmp_path, trajectories))
    events: list[FarmProgress] = []
    result = run_farm(spec, out_dir=tmp_path / "runs", progress=events.append)

    # the model that cannot be served fails its own unit, with the reason; the rest ran
    assert [u for u, _ in result.failed_units] == ["ladder/broken"]
    reason = result.failed_units[0][1]
    assert "ModelServerError" in reason and "cannot be served" in reason and "missing.gguf" in reason
    table = pq.read_table(result.table_path)
    assert table.schema.equals(RESULTS_SCHEMA)
    rows = table.to_pylist()
    keys = [(r["task"], r["model"], r["session"], r["request"]) for r in rows]
    assert len(keys) == len(set(keys)) == result.rows

    # replay: one row per recorded model request, each passing every check
    mat = json.loads((result.run_dir / "ledgers" / "swe.json").read_text())
    with LedgerStore(result.run_dir / "ledgers" / "swe", readonly=True) as store:
        steps = sum(e.kind == "assistant_step" for e in store.chain_to_root(mat["source_head"]))
    for model in ("small", "wide"):
        mine = [r for r in rows if r["task"] == "replay" and r["model"] == model]
        assert sorted(r["request"] for r in mine) == list(range(steps))
        assert all(r["passed"] and r["missing_results"] == 0 for r in mine), [r["reason"] for r in mine]
        assert all(r["request_tokens"] <= r["budget"] for r in mine)
    assert max(r["request_tokens"] for r in rows if r["model"] == "wide" and r["kind"] == "replay") > 4096

    # one server for (node, smollm2 'small'), shared by the probe and both live runs; gone after the run
    used = [r for r in rows if r["model"] == "small" and r["kind"] in ("probe", "live")]
    assert {r["kind"] for r in used} == {"probe", "live"} and len([r for r in used if r["kind"] == "live"]) == 2
    pids = {json.loads(r["detail"])["server_pid"] for r in used}
    assert len(pids) == 1 and None not in pids
    pid = pids.pop()
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()
    assert named_farm_actors() == []
    broken = [r for r in rows if r["model"] == "broken"]
    assert len(broken) == 1 and broken[0]["request"] == UNIT_FAILED and not broken[0]["passed"]

    # progress: per model, ending with every unit accounted for
    last = events[-1].models
    assert last["small"].done == 3 and last["wide"].done == 1 and last["broken"].failed == 1
    assert any(e.models["small"].running for e in events)

    # the same spec again: finished units are skipped; only the failed one runs again
    again = run_farm(spec, out_dir=tmp_path / "runs")
    assert (again.run_id, again.ran, again.skipped) == (result.run_id, 1, 4)
    assert again.rows == result.rows

    # a run folder is one spec's: another spec under the same run id is refused
    other = load_farm_spec(write_spec(tmp_path, trajectories, seed_note="edited"))
    other = type(other)(name=other.name, models=other.models[:1], sessions=other.sessions, tasks=other.tasks[:1])
    with pytest.raises(FarmSpecError, match="another spec"):
        run_farm(other, out_dir=tmp_path / "runs", run_id=result.run_id)
    assert os.listdir(result.run_dir / "units")  # untouched


# ------------------------------------------------------------------ the replay checks and forks, without Ray


@pytest.mark.live
@pytest.mark.slow
def test_an_openai_compatible_endpoint_is_probed_with_the_key_its_variable_names(
    local_model: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model of kind ``endpoint`` is reached at its base_url with the key read, on the node that runs the
    unit, from the variable ``api_key_env`` names: unset, the unit fails saying which variable; set, the probe
    runs; the key is in no row."""
    from vak_context.farm.run import plan_units
    from vak_context.farm.spec import parse_farm_spec
    from vak_context.farm.tasks import UnitJob, execute_unit

    spec = parse_farm_spec(f"""
[[models]]
name = "ep"
kind = "endpoint"
base_url = "{local_model.base_url}"
model = "smollm2"
api_key_env = "FARM_TEST_KEY"
[[tasks]]
name = "ladder"
kind = "probe"
quick = true
max_sizes = 1
""")
    (unit,), _notes = plan_units(spec)
    job = UnitJob(key=unit.key, run_id="t", task=unit.task, model=unit.model)
    monkeypatch.delenv("FARM_TEST_KEY", raising=False)
    (failed,) = execute_unit(job).to_pylist()
    assert failed["request"] == UNIT_FAILED and "ConfigError" in failed["reason"] and "$FARM_TEST_KEY" in failed["reason"]
    monkeypatch.setenv("FARM_TEST_KEY", local_model.api_key)
    rows = execute_unit(job).to_pylist()
    assert rows and all(r["request"] >= 0 and r["kind"] == "probe" and r["model"] == "ep" for r in rows)
    assert rows[0]["window"] == 8192 and rows[0]["request_tokens"] > 0  # the server's own n_ctx, read by the probe
    assert local_model.api_key not in json.dumps(rows)
