"""bench/session_search.py still runs (tiny sizes, no timing asserts: performance lives in bench/)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "session_search.py"


def test_session_search_bench_runs(capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location("bench_session_search", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rows = module.main(["--turns", "6", "--repeat", "1"])
    assert [r["turns"] for r in rows] == [6] and all(
        r["first"] > 0 and r["reopen"] > 0 and r["first_caught_up"] > 0 and r["one_close"] > 0 for r in rows)
    assert "declaration:" in capsys.readouterr().out
