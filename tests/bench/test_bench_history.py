"""bench/history.py runs (the tau-bench file and one generated session: the default run, every recorded
file and three generated sessions, takes about 40 s) and ends with the one line a script reads. No
figure is asserted here beyond the line's form: the goals are tests/unit/test_history_shape.py's."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "history.py"
LAST = re.compile(r"^median card \d+ tokens; 31-turn sessions over 3,000 tokens: \d+ of \d+; "
                  r"cards larger than their record: \d+$")


def _load() -> Any:
    spec = importlib.util.spec_from_file_location("bench_history", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


def test_history_bench_prints_each_session_and_ends_with_the_summary_line(
        trajectories: Path, capsys: pytest.CaptureFixture[str]) -> None:
    figures = _load().main(["--trajectories", str(trajectories), "--files", "tau-bench*", "--generated", "1"])
    out = capsys.readouterr().out.rstrip("\n").splitlines()
    assert LAST.match(out[-1]), out[-1]
    recorded = [f for f in figures if f.recorded]
    assert len(recorded) >= 30 and len(figures) == len(recorded) + 1
    assert all(any(line.startswith(f.name[:40]) for line in out) for f in figures)  # one row a session
    assert out[-1].endswith(f"cards larger than their record: {sum(f.larger for f in recorded)}")
