"""Shared fixtures, and the test tiers: each test lives in the folder of what it needs to run.

- ``tests/unit/``: pure code in this process (LedgerStore on tmp_path, httpx.MockTransport); no Ray, no
  server, no child process that starts Ray or a model. Runs anywhere, fast:
  ``RAY_ADDRESS=127.0.0.1:1 python -m pytest tests/unit``.
- ``tests/service/``: starts a loopback fake HTTP server (tests/fakes/httpserver.py) or a child process of
  ours (the `vak` CLI, a Jupyter kernel, the crash writer), but no Ray and no model.
- ``tests/ray/``: needs the shared local Ray (``ray_cluster``) or starts a Ray of its own.
- ``tests/live/``: talks to the real local llama.cpp model server (``local_model``, or one it starts); some
  need Ray too.
- ``tests/bench/``: smoke tests of the scripts in bench/.

Each test gets its folder's marker (``-m unit``, ``-m "not live"``, ...) on top of its own ``ray``/``live``
/``slow`` marks, and a unit or service test that asks for the Ray cluster or the model server, or is
marked ``ray`` or ``live``, stops the collection: it belongs to another tier. What tests share lives in
tests/fakes/; Ray tests share one session-scoped local Ray (see vak_context.engine.localray). No test reaches
beyond loopback: ``loopback_network`` refuses it in this process.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.network import loopback_only

# The shared local model server fixture (`local_model`): one llama.cpp server for every live test.
pytest_plugins = ["tests.fakes.local_model", "tests.fakes.imported"]  # + `imported`: the recorded sessions

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("VAK_SHARED", REPO.parent / "shared"))
TRAJECTORIES = SHARED / "data" / "trajectories"

TESTS = Path(__file__).resolve().parent
TIERS = {
    "unit": "pure code in this process: no Ray, no server, no model (tests/unit)",
    "service": "a loopback fake HTTP server or a child process, no Ray, no model (tests/service)",
    "ray": None,  # registered in pyproject.toml
    "live": None,
    "bench": "a smoke test of a bench/ script (tests/bench)",
}
OTHER_TIERS = {"ray_cluster": "ray", "local_model": "live"}  # fixtures a unit or service test may not use


def pytest_configure(config: pytest.Config) -> None:
    for name, doc in TIERS.items():
        if doc is not None:
            config.addinivalue_line("markers", f"{name}: {doc}")


def _tier(path: Path) -> str | None:
    """The tier folder ``path`` is in, if any (a file directly in tests/ has none)."""
    try:
        first = path.resolve().relative_to(TESTS).parts[0]
    except (ValueError, IndexError):
        return None
    return first if first in TIERS else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with its folder's tier; refuse a unit or service test that needs Ray or the model."""
    misplaced: list[str] = []
    for item in items:
        tier = _tier(item.path)
        if tier is None:
            continue
        item.add_marker(tier)
        if tier in ("unit", "service"):
            needs = sorted({OTHER_TIERS[f] for f in item.fixturenames if f in OTHER_TIERS}
                           | {m.name for m in item.iter_markers() if m.name in ("ray", "live")})
            if needs:
                misplaced.append(f"{item.nodeid} needs {' and '.join(needs)}")
    if misplaced:
        raise pytest.UsageError("tests in the wrong tier folder (move each to tests/ray/ or tests/live/, or "
                                "split it off): " + "; ".join(misplaced))


@pytest.fixture(scope="session", autouse=True)
def loopback_network() -> Iterator[None]:
    """Every test (and every session fixture: it comes first) reaches loopback only, in this process: a
    connect or name lookup for anything else raises OffLoopbackConnection naming the address, before
    anything is sent (tests/fakes/network.py; shown by tests/unit/test_network_guard.py)."""
    with loopback_only():
        yield


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Any]:
    """One local Ray for the session, on loopback even though test modules imported ``ray`` first.

    Its temp files live in a private (0700) folder that ``stop_local_ray`` removes.
    """
    from vak_context.engine.localray import start_local_ray, stop_local_ray

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
