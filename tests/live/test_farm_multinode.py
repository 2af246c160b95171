"""The farm on a three-node Ray cluster (``ray.cluster_utils.Cluster``, 127.0.0.1 only), losing a node mid-run.

A head without models and two workers that advertise ``vak_model_node``; two local models (SmolLM2 and
Qwen2.5-Coder-0.5B, the bundled ones) and two recorded sessions from ``../shared/data/trajectories``: a replay of each session under
each model and a quick probe of each model, six units. When the first probe reports that it started on a
worker, that worker is removed (its raylet, its workers and the model server on it die). The farm must
still finish: the probe that died with its node runs again on the other worker, every unit's rows are
there once, and units ran on more than one node.

The cluster runs in a child process (this file run as a script), inside a loopback-only network namespace
when ``unshare`` allows one: the test session's own Ray cannot share the process, and the cluster's nodes
must not listen beyond 127.0.0.1. The child prints one JSON summary the test checks.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
MODEL_RESOURCE = "vak_model_node"
SESSIONS = {"swe": "SWE-agent__pydicom__pydicom-1458.traj", "spotter": "spotter__subagent.jsonl"}
NODE_LOSS_WAIT_S = 600  # a guard for a broken run, not a synchronisation


def spec_text(trajectories: Path) -> str:
    sessions = "".join(f'[[sessions]]\nname = "{n}"\npath = "{trajectories / f}"\n' for n, f in SESSIONS.items())
    return f"""
[farm]
name = "multinode"
[[models]]
name = "smol"
model = "smollm2"
n_ctx = 4096
[[models]]
name = "qwen"
model = "qwen"
n_ctx = 4096
{sessions}
[[tasks]]
name = "replay"
kind = "replay"
[[tasks]]
name = "ladder"
kind = "probe"
quick = true
max_sizes = 1
"""


def run_cluster_farm(out: Path, trajectories: Path) -> dict[str, Any]:
    """In this (child) process: the cluster, the farm, the node loss; returns the summary."""
    from vak_context.engine.localray import pin_loopback

    pin_loopback()
    import ray
    from ray.cluster_utils import Cluster

    from vak_context.farm.run import FarmProgress, run_farm
    from vak_context.farm.spec import parse_farm_spec

    # Cluster writes its address to the machine-wide /tmp/ray/ray_current_cluster, which every other Ray user
    # here reads for address="auto": this cluster is private to the test, so it is not advertised.
    ray._private.utils.write_ray_address = lambda *args, **kwargs: None
    temp = Path(tempfile.mkdtemp(prefix="vfarm", dir="/tmp"))
    node_args: dict[str, Any] = {"node_ip_address": "127.0.0.1", "temp_dir": str(temp), "num_cpus": 1,
                                 "object_store_memory": 96 * 1024 * 1024}
    cluster = Cluster(initialize_head=True, head_node_args={
        **node_args, "include_dashboard": False,
        # notice a dead node in about 3 s, not 13
        "_system_config": {"health_check_period_ms": 1000, "health_check_failure_threshold": 3}})
    workers = [cluster.add_node(**node_args, resources={MODEL_RESOURCE: 4}) for _ in range(2)]
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
    by_id = {w.node_id: w for w in workers}
    removed: list[str] = []
    lost = threading.Event()

    finished: set[str] = set()

    def on_progress(p: FarmProgress) -> None:
        # A ladder may start and finish between two of the driver's polls: its start then shows up after its
        # "done" event, and killing its node would kill nothing. Only a ladder not yet finished is a target.
        if p.event.startswith(("done ", "FAILED ")):
            finished.add(p.event.split(" ", 1)[1].split(":", 1)[0])
        if removed:
            return
        for unit, nodes in p.starts.items():
            if unit.startswith("ladder/") and unit not in finished and nodes[-1] in by_id:  # running: kill it
                removed.append(nodes[-1])
                cluster.remove_node(by_id[nodes[-1]], allow_graceful=False)
                lost.set()
                return

    try:
        spec = parse_farm_spec(spec_text(trajectories), base_dir=out)
        result = run_farm(spec, out_dir=out, progress=on_progress)
        listening = _listening_beyond_loopback()
    finally:
        ray.shutdown()
        cluster.shutdown()
        shutil.rmtree(temp, ignore_errors=True)
    return {"run_dir": str(result.run_dir), "table": str(result.table_path), "failed": result.failed_units,
            "starts": result.starts, "workers": sorted(by_id), "removed": removed, "lost": lost.is_set(),
            "listening": listening}


def _listening_beyond_loopback() -> list[str]:
    """TCP listeners of this machine's (or namespace's) processes that are not on 127.0.0.1."""
    try:
        out = subprocess.run(["ss", "-ltnH"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return []
    local = ("127.", "[::ffff:127.", "[::1]")
    return [line.split()[3] for line in out.splitlines() if line.split() and not line.split()[3].startswith(local)]


def _namespace_prefix() -> list[str]:
    """``unshare`` into a loopback-only network namespace, when this machine allows it."""
    probe = subprocess.run(["unshare", "-rn", "true"], capture_output=True) if shutil.which("unshare") else None
    if probe is None or probe.returncode != 0:
        return []
    return ["unshare", "-rn", "sh", "-c", 'ip link set lo up 2>/dev/null; exec "$@"', "sh"]


@pytest.mark.live
@pytest.mark.slow
def test_three_nodes_two_models_and_a_lost_worker(trajectories: Path, tmp_path: Path) -> None:
    """Units run on both workers; the one running when its node died ran again elsewhere; every unit's rows
    are there exactly once (no lost, no duplicated result); no node listened beyond loopback."""
    import pyarrow.parquet as pq

    from vak_context.storage.ledger import LedgerStore

    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0",
           "RAY_AUTH_MODE": "disabled", "PYTHONPATH": str(REPO)}
    env.pop("RAY_ADDRESS", None)
    cmd = [*_namespace_prefix(), sys.executable, str(Path(__file__).resolve()), str(tmp_path / "runs"),
           str(trajectories)]
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=NODE_LOSS_WAIT_S)
    assert done.returncode == 0, done.stderr[-4000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])

    assert summary["lost"] and summary["failed"] == [], json.dumps(summary)
    (removed,) = summary["removed"]
    (other,) = [w for w in summary["workers"] if w != removed]
    retried = {u: nodes for u, nodes in summary["starts"].items() if removed in nodes}
    assert any(u.startswith("ladder/") and nodes[-1] == other for u, nodes in retried.items()), summary["starts"]

    rows = pq.read_table(summary["table"]).to_pylist()
    keys = [(r["task"], r["model"], r["session"], r["request"]) for r in rows]
    assert len(keys) == len(set(keys))  # nothing duplicated
    units = {(r["task"], r["model"], r["session"]) for r in rows}
    models = ("smol", "qwen")
    assert units == {("replay", m, s) for m in models for s in SESSIONS} | {("ladder", m, "") for m in models}
    run_dir = Path(summary["run_dir"])
    for session in SESSIONS:  # nothing lost: one row per recorded request, under each model
        head = json.loads((run_dir / "ledgers" / f"{session}.json").read_text())["source_head"]
        with LedgerStore(run_dir / "ledgers" / session, readonly=True) as store:
            steps = sum(e.kind == "assistant_step" for e in store.chain_to_root(head))
        for m in models:
            assert sorted(r["request"] for r in rows if r["session"] == session and r["model"] == m) == list(range(steps))
    for r in rows:
        if r["task"] == "ladder":
            assert r["node"] != removed  # the rows of a retried unit come from where it finished
    started_on = {node for nodes in summary["starts"].values() for node in nodes}
    assert started_on == set(summary["workers"])  # units ran on both model nodes, never on the head
    assert {r["node"] for r in rows} <= started_on
    assert summary["listening"] == [] or not _namespace_prefix()


if __name__ == "__main__":
    print(json.dumps(run_cluster_farm(Path(sys.argv[1]), Path(sys.argv[2]))))
