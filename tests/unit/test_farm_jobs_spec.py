"""A farm as a Ray job, before anything is sent: the spec must be inside the project, the entrypoint and the
runtime_env the job gets, and `vak farm submit` without a job server address (the jobs themselves:
tests/ray/test_farm_jobs.py)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from vak_context.errors import InvalidInput
from vak_context.farm.jobs import REPO, farm_entrypoint, job_runtime_env, spec_in_project, stage_namespace

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


def test_the_staged_namespace_is_the_submitted_tree_and_imports_ahead_of_the_install(tmp_path: Path) -> None:
    """stage_namespace lays a tree out as installed (every package-dir folder inside vak_context/); a process
    with it on its path imports that copy, an edit made in the copy included, ahead of the editable install."""
    tree = tmp_path / "tree"
    shutil.copytree(REPO, tree, ignore=shutil.ignore_patterns(".git", ".venv", "build", "vak-data", "__pycache__",
                                                             "*.egg-info", ".*_cache", "tests", "notebooks", "bench"))
    (tree / "farm" / "jobs.py").write_text((tree / "farm" / "jobs.py").read_text() + "\nSUBMITTED = 'this tree'\n")
    code = stage_namespace(tree, tmp_path / "staged")
    assert code == tmp_path / "staged" / "vak_context" and (code / "errors.py").is_file()
    assert {"events", "storage", "actors", "context", "farm", "cli"} <= {p.name for p in code.iterdir()}
    probe = ("import vak_context.farm.jobs as j, vak_context.context.history.turns as t; "
             "print(j.SUBMITTED, j.__file__, t.__file__, sep='|')")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(code.parent)}, cwd=tmp_path).stdout.strip().split("|")
    assert out[0] == "this tree" and all(Path(f).is_relative_to(code) for f in out[1:]), out
    assert job_runtime_env(tree, code=code)["py_modules"] == [str(code)]


def test_submit_needs_a_job_server_address(monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """Without --address or an http RAY_ADDRESS, `vak farm submit` exits 1 and says which URL to pass."""
    from vak_context.cli.main import main

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert main(["farm", "submit", str(SPEC)]) == 1
    assert "--address http://" in capsys.readouterr().err
