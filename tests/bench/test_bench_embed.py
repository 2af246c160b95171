"""bench/embed.py still runs (tiny sizes, no timing asserts: the figures live in docs/EMBEDDING.md)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load() -> Any:
    spec = importlib.util.spec_from_file_location("bench_embed", BENCH / "embed.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


def test_embed_bench_runs_in_process(capsys: pytest.CaptureFixture[str]) -> None:
    (row,) = _load().main(["--sizes", "10", "--turns", "1", "--repeat", "2"])
    assert row.turns == 10 and row.steps == 2 and row.engine_ms > 0 and row.floor_ms > 0
    # Two runs of the same turns, each on its own copy of the built ledger: the row is the fastest.
    assert len(row.runs) == 2 and row.engine is min(row.runs, key=lambda r: r.ms)
    assert [r.steps for r in row.runs] == [2, 2] and all(r.plan_bytes > 0 for r in row.runs)
    # The split: every step's entries are written, and synced once per model call; the rest is everything else.
    assert row.engine.commits == row.steps and 0 < row.engine.append_ms < row.engine_ms
    assert row.rest_ms == pytest.approx(row.engine_ms - row.engine.append_ms)
    assert row.engine.cpu_ms > 0 and row.engine.plan_bytes > 0
    out = capsys.readouterr().out
    assert "the JSON floor (goal <= 2x)" in out and "ms a step durable appends" in out and out.count("summary:") == 1
    assert "(goal <= 5 ms" in out and "(goal <= 1.5x" in out and "commits per step: 1.00 at most" in out
    assert "load average" in out and "runs (ms a step; the fastest is the row's): in-process " in out


@pytest.mark.ray
def test_embed_bench_runs_on_ray(ray_cluster: Any, capsys: pytest.CaptureFixture[str]) -> None:
    (row,) = _load().main(["--sizes", "10", "--turns", "1", "--ray", "--repeat", "2"], start_ray=lambda: None)
    assert row.ray_ms is not None and row.loopback_ms is not None and row.ray_added_ms is not None
    assert len(row.ray_runs) == len(row.loopback_runs) == 2 and row.ray is min(row.ray_runs, key=lambda r: r.ms)
    # Through the public API on Ray: the LedgerActor made the durable commits.
    assert row.ray is not None and row.ray.commits >= row.ray.steps and row.ray.append_ms > 0
    out = capsys.readouterr().out
    assert "ms per step over in-process (goal <= 5 ms)" in out
    # Beside it, Ray's own calls with nothing in them (bench/raycall.py): the floor under the Ray column here.
    assert "Ray's own calls here: an empty actor call " in out and "the floor of Ray's own calls here " in out
