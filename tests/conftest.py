"""Shared fixtures. Ray tests share one session-scoped local Ray (see vak_context.farm.localray)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# The shared local model server fixture (`local_model`): one llama.cpp server for every live test.
pytest_plugins = ["tests.fakes.local_model", "tests.fakes.imported"]  # + `imported`: the recorded sessions

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("VAK_SHARED", REPO.parent / "shared"))
TRAJECTORIES = SHARED / "data" / "trajectories"


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Any]:
    """One local Ray for the session, on loopback even though test modules imported ``ray`` first.

    Its temp files live in a private (0700) folder that ``stop_local_ray`` removes.
    """
    from vak_context.farm.localray import start_local_ray, stop_local_ray

    ctx = start_local_ray()
    yield ctx
    stop_local_ray()


@pytest.fixture()
def ledger_dir(tmp_path: Path) -> Path:
    return tmp_path / "ledger"


@pytest.fixture(scope="session")
def trajectories() -> Path:
    if not TRAJECTORIES.is_dir():
        pytest.fail(f"the recorded sessions are missing: expected {TRAJECTORIES} (set VAK_SHARED)")
    return TRAJECTORIES
