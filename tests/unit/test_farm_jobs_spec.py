"""A farm as a Ray job, before anything is sent: the spec must be inside the project, the entrypoint and the
runtime_env the job gets, and `vak farm submit` without a job server address (the jobs themselves:
tests/ray/test_farm_jobs.py)."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from vak_context.errors import InvalidInput
from vak_context.farm.jobs import REPO, farm_entrypoint, job_runtime_env, spec_in_project

SPEC = REPO / "tests" / "fakes" / "farm_jobs.toml"


def test_a_spec_outside_the_project_is_refused_before_anything_is_sent(tmp_path: Path) -> None:
    """The job receives only the project folder, so a spec outside it is refused with the fix named."""
    outside = tmp_path / "x.toml"
    outside.write_text("")
    with pytest.raises(InvalidInput, match="outside the project folder"):
        spec_in_project(outside)
    assert spec_in_project(SPEC) == "tests/fakes/farm_jobs.toml"


def test_the_job_runs_vak_farm_run_from_its_working_dir_and_writes_outside_it() -> None:
    """The entrypoint runs the uploaded copy (python -m vak_context.cli.main farm run SPEC), quotes what it is given,
    and sends results to --out (default $HOME/vak-data/farm-runs, and ~ too, expanded by the job's shell),
    because the working dir is removed with the job; a relative --out is refused for that reason."""
    assert shlex.split(farm_entrypoint("a b.toml", "/data/runs", "r1")) == \
        ["python", "-m", "vak_context.cli.main", "farm", "run", "a b.toml", "--out", "/data/runs", "--run-id", "r1"]
    default = farm_entrypoint("s.toml")
    assert default.endswith('--out "$HOME"/vak-data/farm-runs')
    home = farm_entrypoint("s.toml", "~/runs")
    for entrypoint, expanded in ((default, "/home/u/vak-data/farm-runs"), (home, "/home/u/runs")):
        out = subprocess.run(["bash", "-c", f"printf '%s\\n' {entrypoint.split('--out ', 1)[1]}"],
                             capture_output=True, text=True, env={"HOME": "/home/u"}, check=True).stdout
        assert out.strip() == expanded
    with pytest.raises(InvalidInput, match="relative"):
        farm_entrypoint("s.toml", "vak-farm")


def test_the_working_dir_leaves_out_venv_ledgers_caches_and_model_files() -> None:
    """runtime_env: the project folder as working_dir, minus .venv, vak-data, .git, caches and big model or
    table files; VAK_SHARED set for `shared:` paths; no pip (the nodes' environment is the project's)."""
    env = job_runtime_env(shared="/mnt/shared")
    assert env["working_dir"] == str(REPO)
    assert {".git", ".venv", "vak-data", "**/__pycache__", "*.gguf", "*.parquet"} <= set(env["excludes"])
    assert env["env_vars"]["VAK_SHARED"] == "/mnt/shared"
    assert "pip" not in env and "uv" not in env


def test_submit_needs_a_job_server_address(monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """Without --address or an http RAY_ADDRESS, `vak farm submit` exits 1 and says which URL to pass."""
    from vak_context.cli.main import main

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert main(["farm", "submit", str(SPEC)]) == 1
    assert "--address http://" in capsys.readouterr().err
