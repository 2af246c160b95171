"""BFCL v4 multi-turn through both modes with a "perfect" model (the entry's ground truth fed back as the
model's calls; tests/fakes/bfcl_model.py): BFCL's own checker passes every entry, a corrupted call fails
with BFCL's own error types, and a tool name that is code is refused without ever reaching BFCL's eval."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import httpx
import pytest

from tests.fakes.bfcl_model import INJECTED, PerfectModel
from vak_context.farm.bfcl.modes import EntryRun, Target, run_direct, run_engine
from vak_context.farm.bfcl.multiturn import CATEGORIES, Backend, BfclCall, Entry, load_entries, screen

TARGET = Target("http://127.0.0.1:9/v1", "scripted")  # never dialled: the MockTransport answers
ENTRIES = 3


async def both_modes(entries: list[Entry], tmp_path: Path,
                     corrupt: Mapping[str, str] | None = None) -> dict[str, list[EntryRun]]:
    model = PerfectModel(entries, corrupt)
    runs: dict[str, list[EntryRun]] = {"direct": [], "engine": []}
    async with httpx.AsyncClient(transport=httpx.MockTransport(model.handle)) as client:
        for entry in entries:
            runs["direct"].append(await run_direct(entry, TARGET, client))
            run, horizon = await run_engine(entry, TARGET, client, tmp_path / entry.id, window=16_384)
            assert horizon > 0
            runs["engine"].append(run)
    return runs


@pytest.mark.parametrize("category", CATEGORIES)
async def test_the_perfect_model_passes_in_both_modes(tmp_path: Path, category: str) -> None:
    entries = load_entries(category, ENTRIES)
    assert [e.id for e in entries] == [f"{category}_{i}" for i in range(ENTRIES)]  # the fixed first N
    runs = await both_modes(entries, tmp_path)
    for mode, done in runs.items():
        assert [(r.entry_id, r.verdict.valid, r.verdict.error_type) for r in done] == \
            [(e.id, True, "") for e in entries], mode
        assert all(r.refused_calls == 0 and r.sent and all(s.status == 200 for s in r.sent) for r in done)
    # the engine defers the ~28 tool schemas BFCL's handler sends on every request
    direct = sum(r.prompt_tokens for r in runs["direct"])
    engine = sum(r.prompt_tokens for r in runs["engine"])
    assert engine < direct / 2, (engine, direct)


def first_with_calls(entries: list[Entry], at_least: int) -> Entry:
    return next(e for e in entries if len(e.ground_truth[0]) >= at_least)


async def test_corrupted_calls_fail_with_bfcls_own_error_types(tmp_path: Path) -> None:
    entries = load_entries("multi_turn_base", 8)
    wrong = first_with_calls(entries, 1)
    dropped = first_with_calls([e for e in entries if e is not wrong], 2)
    runs = await both_modes([wrong, dropped], tmp_path, corrupt={wrong.id: "argument", dropped.id: "drop"})
    for mode, (spoilt, short) in runs.items():
        assert not spoilt.verdict.valid and spoilt.verdict.error_type.startswith("multi_turn:"), mode
        assert spoilt.verdict.error_type in ("multi_turn:execution_response_mismatch",
                                             "multi_turn:instance_state_mismatch"), (mode, spoilt.verdict)
        assert (short.verdict.valid, short.verdict.error_type) == (False, "multi_turn:instance_state_mismatch"), mode


def test_a_tool_name_that_is_code_is_refused_never_executed() -> None:
    entry = load_entries("multi_turn_base", 1)[0]
    assert "cd" in entry.names
    backend = Backend(entry)
    try:
        backend.begin_turn()
        results = backend.execute([BfclCall("c1", INJECTED, "{}"), BfclCall("c2", "cd", {"folder": "document"}),
                                   BfclCall("c3", "cd", {"folder=__import__('os').getpid(),x": 1}),
                                   BfclCall("c4", "not_offered", "{}"), BfclCall("c5", "cd", "{not json")])
        assert str(os.getpid()) not in "".join(results)  # the injected name would have returned this pid
        assert [r.startswith("refused:") for r in results] == [True, False, True, True, True]
        assert "current_working_directory" in results[1]
        assert backend.decoded == [[["cd(folder='document')"]]]  # only the safe call reaches the checker
        assert backend.refused == 4
    finally:
        backend.close()
    assert screen(BfclCall("x", "cd", {"folder": "a"}), entry.names) == ("cd(folder='a')", "")


async def test_an_injected_call_in_both_modes_is_refused_and_the_entry_goes_on(tmp_path: Path) -> None:
    entry = first_with_calls(load_entries("multi_turn_base", 4), 1)
    runs = await both_modes([entry], tmp_path, corrupt={entry.id: "inject"})
    (direct,), (engine,) = runs["direct"], runs["engine"]
    assert direct.refused_calls == 1  # screened here, before BFCL
    assert engine.refused_calls == 0  # the engine answers a name its surface does not offer itself: never handed out
    for run in (direct, engine):
        assert run.verdict.valid, (run.mode, run.verdict)  # the refused call never ran: the state is the truth's


async def test_the_report_prints_both_categories_in_both_modes_with_the_goals(tmp_path: Path) -> None:
    from vak_context.farm.bfcl.report import figures, run_categories, table

    model = PerfectModel([e for c in CATEGORIES for e in load_entries(c, 2)])
    async with httpx.AsyncClient(transport=httpx.MockTransport(model.handle)) as client:
        run = await run_categories(CATEGORIES, 2, TARGET, client, folder=tmp_path)
    rows = figures(run)
    assert sorted((f.category, f.mode, f.passed, f.entries) for f in rows) == \
        sorted((c, m, 2, 2) for c in CATEGORIES for m in ("direct", "engine"))
    text = table(rows, run.horizon)
    assert "multi_turn_long_context engine: accuracy by largest request / horizon" in text
    goals = [line for line in text.splitlines() if line.startswith("goal ")]
    assert len(goals) == 5 and all(": met (" in g for g in goals), goals


async def test_a_request_that_times_out_fails_its_entry_and_the_run_goes_on(tmp_path: Path) -> None:
    """A model server that never answers (httpx's ReadTimeout) ends the entry as BFCL's handler would end it
    on an error, in both modes; the bench does not crash."""
    entry = first_with_calls(load_entries("multi_turn_base", 4), 1)

    def hang(request: httpx.Request) -> httpx.Response:
        if not request.url.path.endswith("/chat/completions"):
            return httpx.Response(404, json={"error": {"message": "not found"}})
        raise httpx.ReadTimeout("timed out", request=request)

    async with httpx.AsyncClient(transport=httpx.MockTransport(hang)) as client:
        direct = await run_direct(entry, TARGET, client)
        engine, _ = await run_engine(entry, TARGET, client, tmp_path / "e", window=16_384)
    for run in (direct, engine):
        assert not run.verdict.valid and run.sent and run.sent[0].status in (0, 502), (run.mode, run.sent)
