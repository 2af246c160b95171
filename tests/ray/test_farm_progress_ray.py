"""The farm's progress actor on the shared local Ray: one per cluster, shared by the runs (vak_context.farm.progress;
the reader and the actor class in this process: tests/unit/test_farm_progress.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from vak_context.farm.progress import PROGRESS_ACTOR

SPEC = """
[[models]]
name = "m"
kind = "endpoint"
base_url = "http://127.0.0.1:9/v1"
model = "m"
window = 200000
[[sessions]]
name = "gen"
kind = "generated"
seed = 1
turns = 2
[[tasks]]
name = "replay"
kind = "replay"
"""


@pytest.mark.ray
def test_runs_share_one_progress_actor_and_each_run_drops_its_log(ray_cluster: Any, tmp_path: Path) -> None:
    """Two runs on one cluster use the same progress actor (no new worker process per run), each run's
    starts reach its result, and each run's log is gone from the actor once the run ends."""
    import ray

    from vak_context.actors.factory import NAMESPACE
    from vak_context.farm.run import run_farm
    from vak_context.farm.spec import parse_farm_spec

    spec = parse_farm_spec(SPEC, base_dir=tmp_path)
    first = run_farm(spec, out_dir=tmp_path / "runs", run_id="one")
    actor = ray.get_actor(PROGRESS_ACTOR, namespace=NAMESPACE)
    pid = ray.get(actor.__ray_call__.remote(lambda self: __import__("os").getpid()))
    second = run_farm(spec, out_dir=tmp_path / "runs", run_id="two")
    assert first.starts == second.starts == {"replay/m/gen": [first.nodes[0]]}
    again = ray.get_actor(PROGRESS_ACTOR, namespace=NAMESPACE)
    assert ray.get(again.__ray_call__.remote(lambda self: __import__("os").getpid())) == pid
    assert ray.get(again.since.remote("one", 0))[1] == [] and ray.get(again.since.remote("two", 0))[1] == []
