"""bench/serve_bind.py still runs (a tiny ledger, no timing asserts: the figures are the issue's closing note)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load() -> Any:
    spec = importlib.util.spec_from_file_location("bench_serve_bind", BENCH / "serve_bind.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("crash", [False, True])
def test_serve_bind_bench_runs_both_ledgers_and_prints_its_goals(crash: bool, capsys: pytest.CaptureFixture[str]) -> None:
    out = _load().main(["--sessions", "2", "--turns", "1", "--mb", "0.5", "--new", "2", "--no-scan",
                        *(["--crash"] if crash else [])])
    assert len(out["new_ms"]["big"]) == len(out["new_ms"]["empty"]) == 2
    assert out["mb"] >= 0.5 and out["filler_entries"] > 0 and out["resume_s"] > 0 and out["again_s"] > 0
    printed = capsys.readouterr().out
    assert printed.count("summary:") == 1 and "over the empty ledger (goal <= 50 ms" in printed
    assert "2 resumed in" in printed and ("a crash image" if crash else "a clean stop") in printed
