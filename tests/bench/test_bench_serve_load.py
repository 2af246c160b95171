"""bench/serve_load.py still runs (2 sessions x 3 turns, 1 SIGKILL, the bad-input table; no timing asserts:
the figures go in the issue's closing note), and its ledger audit counts what it says it counts."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.bad_inputs import bad_inputs
from tests.fakes.serve_faults import Acked, audit
from vak_context.events.blocks import TextBlock, ToolUseBlock
from vak_context.events.payloads import Activity, AssistantStep, Directive, ToolResult
from vak_context.storage.ledger import LedgerStore

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load() -> Any:
    spec = importlib.util.spec_from_file_location("bench_serve_load", BENCH / "serve_load.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


def test_the_load_with_a_kill_and_the_bad_inputs(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bench = _load()
    [report] = bench.main(["--sessions", "2", "--turns", "3", "--kills", "1", "--big", "20000", "21000", "--resends", "0",
                           "--progress", "5", "--scratch", str(tmp_path)])
    assert report.sessions == 2 and report.turns == 3 and report.requests_planned == 10  # 2 x (2 + 2 + 1)
    assert report.kills == 1 and len(report.startup_s) == 2  # the first start and the restart
    # A conversation either completed or is named stuck, with why; every request came back or is counted failed.
    assert report.sessions_completed + len(report.stuck) == 2
    assert report.requests_ok + report.requests_failed >= 1
    # Verified after the kill, after the restart and at the end.
    assert len(report.verify) == 3 and report.verify[0].startswith("after kill: ")
    assert report.bad_total == len(bad_inputs(1024)) and report.bad_ok + len(report.bad_wrong) == report.bad_total
    assert report.audit["sessions"] >= 1
    out = capsys.readouterr().out
    for line in ("requests: ", "sessions completed: ", "forks: ", "duplicates: ", "lost acknowledged exchanges: ",
                 "added latency", "after a restart", "start-up", "vak verify after kill", "bad input: ", "requests/s"):
        assert line in out, line


def test_workers_run_or_are_skipped_with_a_reason(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bench = _load()
    reports = bench.main(["--workers", "1", "--sessions", "1", "--turns", "1", "--kills", "0", "--no-bad-inputs",
                          "--scratch", str(tmp_path)])
    out = capsys.readouterr().out
    if bench.has_workers_option():
        assert [r.workers for r in reports] == ["1"] and reports[0].requests_ok >= 1
    else:
        assert reports == [] and "no --workers option" in out


def _step(text: str = "", call: str | None = None) -> AssistantStep:
    blocks: list[Any] = [TextBlock(text=text)] if text else []
    if call:
        blocks.append(ToolUseBlock(id=call, name="web_search", input={"query": "q"}))
    return AssistantStep(blocks=tuple(blocks))


def test_the_audit_counts_forks_duplicates_and_lost_replies(tmp_path: Path) -> None:
    """Conversation 0 held by two sessions (a fork), a reply and a call stored twice (the call's second step
    withdrawn by the server) and one tool result twice, and one acknowledged reply in no session."""
    ledger = tmp_path / "ledger"
    with LedgerStore(ledger) as store:
        first = store.append("load-c00", [Directive(text="[c00-t01] search - please"), _step(call="call_c00-t01_1"),
                                          ToolResult(tool_use_id="call_c00-t01_1", tool_name="web_search", content="r"),
                                          ToolResult(tool_use_id="call_c00-t01_1", tool_name="web_search", content="r"),
                                          _step("Done: c00-t01")])
        # The second copy of the call's step, which the server withdrew: a duplicate it marked.
        again = store.append("load-c00", [_step(call="call_c00-t01_1")])
        store.append("load-c00", [Activity(activity="history.withdrawn", detail={"steps": [again[0]]}),
                                  _step("Done: c00-t01")])
        assert len(first) == 5
        store.append("load-c00.f1", [Directive(text="[c00-t02] ask - please"), _step("Answer: c00-t02")])
        store.append("load-c01", [Directive(text="[c01-t01] ask - please"), _step("Answer: c01-t01")])
    acked = [Acked(0, "c00-t01", "", ("call_c00-t01_1",)), Acked(0, "c00-t01", "Done: c00-t01", ()),
             Acked(0, "c00-t02", "Answer: c00-t02", ()), Acked(1, "c01-t01", "Answer: c01-t01", ()),
             Acked(1, "c01-t02", "Answer: c01-t02", ())]
    found = audit(ledger, acked)
    assert found.sessions == 3
    assert found.extra_sessions == {"c00": ["load-c00", "load-c00.f1"]} and found.not_one_chain == []
    assert found.forks == 1
    assert (found.duplicate_steps, found.duplicate_results) == (2, 1) and found.duplicates_marked == 1
    assert found.lost == 1 and found.lost_examples[0].startswith("c01-t02")
