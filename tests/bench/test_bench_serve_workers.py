"""bench/serve_workers.py still runs (1 and 2 workers, 2 sessions of 2 turns; no timing asserts: the figures
live in docs/INTEGRATIONS.md)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"

pytestmark = pytest.mark.ray


def _load() -> Any:
    spec = importlib.util.spec_from_file_location("bench_serve_workers", BENCH / "serve_workers.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


def test_serve_workers_bench_runs(capsys: pytest.CaptureFixture[str]) -> None:
    results = _load().main(["--workers", "1,2", "--sessions", "2", "--turns", "2"])
    assert [r.workers for r in results] == [1, 2]
    assert all(r.requests == 4 and r.cpu_s > 0 and r.by_role["serve workers"] > 0 for r in results)
    assert results[0].leases == "" and "session leases:" in results[1].leases  # one worker takes no lease
    out = capsys.readouterr().out
    assert "requests/s" in out and "CPU per request" in out
