"""The benchmarks still run (tiny sizes, no timing asserts: performance lives in bench/)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.ray
def test_ledger_append_bench_runs(ray_cluster: Any, capsys: pytest.CaptureFixture[str]) -> None:
    # Two of the six cells (the one its goal line reads, and the largest batch from one writer): the cells
    # differ only in their numbers, and each cell costs two new LedgerActors and six synced runs.
    rows = _load("ledger_append").main(["--quick", "--seconds", "0.1", "--cells", "16:1,1:256"])
    assert [(row["writers"], row["batch"]) for row in rows] == [(16, 1), (1, 256)]
    for row in rows:
        assert row["threads"] > 0 and row["asyncio"] > 0 and row["actor"] > 0 and row["sqlite"] > 0
    out = capsys.readouterr().out
    assert "goal: 16 writers, batch 1:" in out and "goal: in-process >= 1x SQLite" in out and "sqlite" in out
