"""A farm runs as a Ray job: `vak farm submit` and `ray job submit -- vak farm run` on a real local head.

The head is ``vak_context.farm.jobs.LocalHead`` (``ray start --head``: GCS, raylet, dashboard and Jobs API on
127.0.0.1, in a private temp folder). Each job runs a small replay farm (tests/fakes/farm_jobs.toml: generated
sessions, no model server) and the test waits on the job's status, then reads the run's results table.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from vak_context.farm.jobs import (
    RAY_CLI,
    REPO,
    LocalHead,
    job_client,
    process_tree,
    wait_for_job,
)

SPEC = REPO / "tests" / "fakes" / "farm_jobs.toml"
JOB_TIMEOUT_S = 600  # a bound on a loaded 2-core box, not an expectation


# ------------------------------------------------------------------ real jobs on a local head


@pytest.fixture(scope="module")
def head() -> Iterator[LocalHead]:
    with LocalHead(num_cpus=2, object_store_mb=128) as h:
        yield h


def listening_addresses(head: LocalHead) -> set[tuple[str, str]]:
    from tests.fakes.sockets import bound_sockets

    assert head.process is not None
    return {(s.address, s.process.rsplit("/", 1)[-1])
            for s in bound_sockets(process_tree(head.process.pid), head.process.pid)}


@pytest.mark.ray
@pytest.mark.slow
def test_a_farm_runs_as_a_job_through_vak_farm_submit_and_ray_job_submit(
        head: LocalHead, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Both at once on one loopback head: `ray job submit --working-dir . -- vak farm run SPEC --out DIR`
    (Ray's own CLI, which waits for its job) exits 0, and `vak farm submit SPEC --address URL` prints the job
    id and the `ray job logs --follow` command, and its job (polled until final) SUCCEEDS. Each leaves the
    run's results table under its --out, every replayed request passing. The working dir Ray unpacked for
    `vak farm submit` holds the project without .venv, .git or vak-data, under 20 MB; every socket of the
    head's process tree (GCS, raylet, dashboard, agents, workers) listens on loopback."""
    from tests.fakes.sockets import is_loopback
    from vak_context.cli.main import main

    env = {**os.environ, "RAY_ADDRESS": head.dashboard_url}
    ray_cli = subprocess.Popen(
        [str(RAY_CLI), "job", "submit", "--working-dir", ".", "--", "vak", "farm", "run", "tests/fakes/farm_jobs.toml",
         "--out", str(tmp_path / "ray-cli"), "--run-id", "raycli", "--no-report"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert main(["farm", "submit", str(SPEC), "--address", head.dashboard_url, "--out", str(tmp_path / "vak"),
                     "--run-id", "submitted"]) == 0
        printed = capsys.readouterr().out
        job_id = next(line.split()[-1] for line in printed.splitlines() if line.startswith("job id"))
        assert f"ray job logs --follow {job_id} --address {head.dashboard_url}" in printed
        client = job_client(head.dashboard_url)
        status = wait_for_job(client, job_id, timeout_s=JOB_TIMEOUT_S)
        assert status == "SUCCEEDED", client.get_job_logs(job_id)[-3000:]
        cli_out, _ = ray_cli.communicate(timeout=JOB_TIMEOUT_S)
    finally:
        if ray_cli.poll() is None:
            ray_cli.kill()
            ray_cli.communicate()
    assert ray_cli.returncode == 0, cli_out[-3000:]
    # The submitted job imported the tree it shipped (py_modules), not the nodes' install.
    code = next(line.split(": ", 1)[1] for line in client.get_job_logs(job_id).splitlines() if line.startswith("code: "))
    assert "runtime_resources/py_modules_files" in code and Path(code, "farm", "jobs.py").is_file(), code
    for run in (tmp_path / "vak" / "submitted", tmp_path / "ray-cli" / "raycli"):
        table = pq.read_table(run / "results.parquet")
        assert table.num_rows > 0 and all(table.column("passed").to_pylist()), run
        assert set(table.column("session").to_pylist()) == {"gen"}

    assert head.root is not None
    uri = client.get_job_info(job_id).runtime_env["working_dir"]  # gcs://_ray_pkg_<hash>.zip
    package = next((head.root / "ray").glob(f"session_*/runtime_resources/working_dir_files/{Path(uri).stem}"))
    shipped = {p.name for p in package.iterdir()}
    assert {"farm", "tests", "pyproject.toml"} <= shipped and not {".venv", ".git", "vak-data"} & shipped
    size = sum(f.stat().st_size for f in package.rglob("*") if f.is_file())
    assert size < 20 * 1024 * 1024, f"the job's working dir is {size / 1e6:.1f} MB"

    sockets = listening_addresses(head)
    assert {"gcs_server", "raylet"} <= {name for _, name in sockets}
    assert [s for s in sockets if not is_loopback(s[0])] == []
