"""The farm's notebooks run top to bottom (nbclient) against real parts and show what they claim.

``live.ipynb`` connects to the session's running local Ray (``VAK_RAY_ADDRESS``) and asks the named actors
this test started for a ledger folder (``VAK_LEDGER``); its answers are compared with the same questions
asked here. ``farm.ipynb`` reads a run's Parquet table written by a real (small) farm run.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = REPO / "notebooks"


def run_notebook(name: str, cwd: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> str:
    """Execute notebooks/<name> in ``cwd`` with ``env`` added; return the text of every cell's output."""
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("PYTHONPATH", str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}).execute()
    return "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))


def field_of(outputs: str, label: str) -> list[str]:
    """The words after ``label`` on the first output line that starts with it."""
    match = re.search(rf"^{re.escape(label)} (.+)$", outputs, re.MULTILINE)
    assert match, f"no line starting with {label!r} in the notebook's output"
    return match.group(1).split()


@pytest.mark.ray
def test_live_notebook_queries_the_named_actors_of_a_running_cluster(
        ray_cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """live.ipynb, pointed at this session's running Ray and a ledger whose LedgerActor, PlannerActor and
    EvidenceActor this test started, lists those actors by name (it joined this cluster, not one of its own),
    prints the ledger's head as the LedgerActor reports it, the same plan digest the PlannerActor gives this
    test for the same inputs, and the same recall text as the EvidenceActor gives here; it writes nothing."""
    import ray

    from vak_context.actors.factory import evidence_actor, ledger_actor, ledger_actor_name, planner_actor
    from vak_context.context.capacity.profile import CapacityProfile, Ewma, Horizon, ProfileKey
    from vak_context.sessions.generator import generate_session

    ledger = tmp_path / "ledger"
    ledger.mkdir()
    lg = ledger_actor(ledger)
    planner = planner_actor(ledger, ledger=lg)
    evidence = evidence_actor(ledger, ledger=lg)
    try:
        generate_session(seed=11, turns=6, append=lambda p, b: ray.get(lg.append.remote("nb", [p], None, [b]))[0])
        head = ray.get(lg.head.remote("nb"))
        profile = CapacityProfile(ProfileKey("local", "small-8k"), 8192, Horizon(6000, 0.9, 0.0), Ewma(0.25, 3), 512)
        expected_plan = ray.get(planner.plan.remote("nb", profile, "What did we find so far?", prefix_tokens=800,
                                                    tail_tokens=50, record=False))
        expected_recall = ray.get(evidence.recall.remote("nb", {"turn": 1}))

        outputs = run_notebook("live.ipynb", tmp_path, {
            "VAK_RAY_ADDRESS": ray.get_runtime_context().gcs_address, "VAK_LEDGER": str(ledger)}, monkeypatch)

        assert "connected to the running cluster" in outputs
        listed = set(re.findall(r"^actor vak/(\S+)$", outputs, re.MULTILINE))
        suffix = ledger_actor_name(ledger).removeprefix("ledger-")
        assert {f"ledger-{suffix}", f"planner-{suffix}", f"evidence-{suffix}"} <= listed
        assert field_of(outputs, "head nb") == [head]
        assert field_of(outputs, "plan") == [expected_plan["digest"]]
        assert not expected_recall["is_error"] and expected_recall["content"][:800] in outputs
        assert ray.get(lg.head.remote("nb")) == head  # the notebook only asked
    finally:
        for actor in (evidence, planner, lg):
            ray.kill(actor, no_restart=True)


FARM_SPEC = """
[farm]
name = "nbfarm"
[[models]]
name = "small"
kind = "local"
model = "smollm2"
n_ctx = 8192
horizon = 2500
[[models]]
name = "wide"
kind = "local"
model = "smollm2"
n_ctx = 32768
[[sessions]]
name = "gen"
kind = "generated"
seed = 5
turns = 6
[[tasks]]
name = "replay"
kind = "replay"
[[tasks]]
name = "ladder"
kind = "probe"
models = ["small"]
quick = true
"""


@pytest.mark.ray
@pytest.mark.slow
def test_farm_notebook_reads_a_runs_table_and_draws_the_reports_plots(
        ray_cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """farm.ipynb, given a real farm run (a quick probe ladder on SmolLM2 and a replay of a generated
    session under two profiles, run here with run_farm on the session's Ray), prints the table's row count,
    one replay line per (model, session) from DuckDB whose requests / failed / biggest request / missing
    results equal what pyarrow computes here from the same file, and writes the horizon-curve PNG and the
    session's side-by-side PNG."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from vak_context.farm.run import run_farm
    from vak_context.farm.spec import load_farm_spec

    spec_path = tmp_path / "nb.toml"
    spec_path.write_text(FARM_SPEC)
    result = run_farm(load_farm_spec(spec_path), out_dir=tmp_path / "runs")
    table = pq.read_table(result.table_path)
    replay = table.filter(pc.and_(pc.equal(table["kind"], "replay"), pc.greater_equal(table["request"], 0)))
    assert set(replay.column("model").to_pylist()) == {"small", "wide"}

    outputs = run_notebook("farm.ipynb", tmp_path, {"VAK_FARM_RUN": str(result.run_dir)}, monkeypatch)

    assert field_of(outputs, "rows") == [str(table.num_rows)]
    assert "(DuckDB)" in outputs  # duckdb is a test dependency, so the DuckDB path is the one shown
    for model in ("small", "wide"):
        rows = [r for r in replay.to_pylist() if r["model"] == model]
        words = field_of(outputs, f"replay {model} gen")
        shown = dict(zip(words[::2], words[1::2], strict=True))
        assert shown["requests"] == str(len(rows))
        assert shown["failed"] == str(sum(not r["passed"] for r in rows))
        assert shown["biggest"] == str(max(r["request_tokens"] for r in rows))
        assert shown["missing"] == str(sum(r["missing_results"] or 0 for r in rows))
    for png in ("farm-horizon-curves.png", "farm-session-gen.png"):
        assert (tmp_path / png).stat().st_size > 1000, png
