"""Shared fixtures. Ray tests share one session-scoped local Ray (see farm.localray)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# The shared local model server fixture (`local_model`): one llama.cpp server for every live test.
pytest_plugins = ["tests.fixtures_model", "tests.fixtures_import"]  # + `imported`: the recorded sessions

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("VAK_SHARED", REPO.parent / "shared"))
TRAJECTORIES = SHARED / "data" / "trajectories"


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Any]:
    from farm.localray import start_local_ray

    temp = tempfile.mkdtemp(prefix="vrt", dir="/tmp")
    ctx = start_local_ray(temp_dir=temp)
    import ray

    yield ctx
    ray.shutdown()
    shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture()
def ledger_dir(tmp_path: Path) -> Path:
    return tmp_path / "ledger"


@pytest.fixture(scope="session")
def trajectories() -> Path:
    if not TRAJECTORIES.is_dir():
        pytest.fail(f"the recorded sessions are missing: expected {TRAJECTORIES} (set VAK_SHARED)")
    return TRAJECTORIES
