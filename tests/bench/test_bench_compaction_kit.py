"""bench/compaction_kit.py at a reduced size: the engine through the peer kit (``compaction-conformance-kit``)
as a user would run it, and the script's table. Figures are the bench's (its docstring, docs/STATE.md);
asserted here: unbudgeted, the engine's next request holds every canary the kit planted, round after round
(each round re-projects the session's own ledger); at a budget the script prints the fixed cost it added and
one row per compactor for every canary type, and at 30 % of the transcript the engine keeps each type at least
as well as the checklist reference."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest
from compaction_kit import check_compactor

BENCH = Path(__file__).resolve().parents[2] / "bench" / "compaction_kit.py"


def _load() -> Any:
    spec = importlib.util.spec_from_file_location("bench_compaction_kit", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


def test_unbudgeted_the_engines_request_keeps_every_canary_each_round() -> None:
    bench = _load()
    engine = bench.EngineCompactor()
    report = check_compactor(engine, rounds=2)
    assert {f.canary_type: f.final_survival for f in report.findings} == dict.fromkeys(bench.TYPES, 1.0)
    # the compacted text is the engine's own next request: the round's directive last, after its tail
    last = engine.last_body["messages"][-1]
    assert last["role"] == "user" and last["content"][-1]["text"] == bench.ROUND_DIRECTIVE
    assert "<turn_context>" in last["content"][0]["text"]


def test_reduced_benchmark_prints_the_fixed_cost_and_each_type_beside_the_references(
        capsys: pytest.CaptureFixture[str]) -> None:
    bench = _load()
    out = bench.main(["--seeds", "1", "--budgets", "0.3", "--rounds", "2", "--references", "checklist-carrying",
                      "--no-check"])
    fixed = out["fixed"]
    assert fixed.prefix_tokens > 0 and fixed.tail_tokens > 0
    text = capsys.readouterr().out
    assert f"= {fixed.tokens} tokens" in text
    rows = {e["compactor"]: e for e in out["payload"]["entries"]}
    assert set(rows) == {"vak-engine", "checklist-carrying"}
    for name, row in rows.items():
        line = next(line for line in text.splitlines() if line.startswith(name))
        assert len(line.split()) == 1 + len(bench.TYPES) + 2  # the name, a cell per type, overall and output
        assert set(row["randomized"]["final_median_by_type"]) == set(bench.TYPES)
    assert "best reference" in text
    # At 30 % the stated items' room holds every canary: each type at least the checklist's (docs/STATE.md).
    assert "engine >= best reference for every type" in text
