"""bench/serve.py still runs (tiny sizes, no timing asserts: the figures live in docs/INTEGRATIONS.md)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load() -> Any:
    spec = importlib.util.spec_from_file_location("bench_serve", BENCH / "serve.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


def test_serve_bench_runs_through_vak_serve(capsys: pytest.CaptureFixture[str]) -> None:
    rows = _load().main(["--sizes", "1,3", "--turns", "2"])
    assert [(r.turns, r.mode) for r in rows] == [(1, "plain"), (1, "streaming"), (3, "plain"), (3, "streaming")]
    # Each timed turn is two requests (the call, then the answer), each timed both ways and floored.
    assert all(len(r.samples) == 2 for r in rows)
    assert all(s.serve_ms > 0 and s.direct_ms > 0 and s.floor_ms > 0 for r in rows for s in r.samples)
    # Turn 1's first request holds no result; from its second on, the history holds its 10k-character search.
    assert rows[0].samples[0].body_chars < 10_000 < min(s.body_chars for r in rows[1:] for s in r.samples)
    out = capsys.readouterr().out
    assert "ms added at p50" in out and "x the goal)" in out and "x the floor" in out and out.count("summary:") == 1
