"""Importing every recorded session in ../shared/data/trajectories: counts match the folder's README."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from tests.fakes.imported import TOKENS_PER_CHAR, Imported
from vak_context.context.evidence.digest import WINDOW_CHARS, recall_call
from vak_context.context.history.turns import TurnIndex
from vak_context.events.payloads import AssistantStep, Compaction, EvidenceBody, Nudge, Receipt, ToolResult


def _index(imp: Imported, session: str) -> TurnIndex:
    head = imp.store.head(session)
    assert head is not None
    return TurnIndex.build(imp.store.chain_to_root(head), TOKENS_PER_CHAR)


def _payloads(imp: Imported, session: str) -> list[object]:
    return [imp.store.mapper.payload_of(e) for e in imp.store.entries(session)]


def _largest(index: TurnIndex) -> int:
    return max((m.chars for m in index.evidence.values()), default=0)


def test_claude_code_session_counts(imported: Imported) -> None:
    [session] = imported.sessions("spotter")
    report = imported.reports["spotter"].sessions[0]
    index = _index(imported, session)
    # README: 2 directives + 1 control + 1 compaction summary; 157 API responses; 197 tool calls (8 errors).
    assert len(index.turns) == 2
    assert [t.directive.text for t in index.turns] == [
        "Work on bead spotter-a0y. Run bd show spotter-a0y to see the issue details and bd ready to find "
        "available subtasks. Start with the first ready task.",
        "continue until all are done",
    ]
    assert [c.tag for c in index.controls] == ["task-notification"]
    assert len(index.summaries) == 1
    assert index.summaries[0].summary.startswith(
        "This session is being continued from a previous conversation"
    )
    assert (index.summaries[0].first_ordinal, index.summaries[0].last_ordinal) == (1, 2)
    steps = [s for t in index.turns for s in t.steps]
    assert len(steps) == report.steps == report.receipts == 157
    calls = [ex for t in index.turns for ex in t.exchanges]
    assert len(calls) == 197 and all(ex.result is not None for ex in calls)
    assert sum(1 for ex in calls if ex.result and ex.result.is_error) == 8
    names = Counter(ex.tool_name for ex in calls)
    assert names == Counter(Bash=76, Edit=50, Read=33, Write=12, Grep=12, Glob=11, Task=2, TaskOutput=1)
    assert _largest(index) == 32_986
    # The results over 30,000 characters are carried as windows naming the recall call for the rest.
    windowed = [ex.result for ex in calls if ex.result and ex.result.windowed]
    assert len(windowed) == 4
    for result in windowed:
        assert len(result.content) <= WINDOW_CHARS
        assert f'recall({{"id": "{result.evidence_id}", "range": [' in result.content
    assert report.skipped["progress record (UI/telemetry, not sent to the model)"] == 1332


def test_claude_code_subagent_session(imported: Imported) -> None:
    [session] = imported.sessions("subagent")
    index = _index(imported, session)
    assert len(index.turns) == 2  # the slash command, then "create the beads"
    assert "websearch to learn how to fastest setup credo" in index.turns[0].directive.text
    assert index.turns[1].directive.text == "create the beads"
    assert sorted(c.tag for c in index.controls) == ["interrupt", "meta"]
    assert sum(len(t.steps) for t in index.turns) == 12
    calls = Counter(ex.tool_name for t in index.turns for ex in t.exchanges)
    assert calls == Counter(
        WebSearch=5, Bash=4, WebFetch=1, Glob=1, Read=1, AskUserQuestion=1, Task=1, Write=1, ExitPlanMode=1
    )
    # 9,961 characters in two text blocks, kept apart by one newline.
    assert _largest(index) == 9_961 + 1
    assert index.turns[0].card is not None and index.turns[0].card.outcome == "cancelled"
    assert index.turns[1].card is not None and index.turns[1].card.outcome == "completed"


def test_tau_bench_sessions(imported: Imported, trajectories: Path) -> None:
    sessions = imported.sessions("tau")
    assert len(sessions) == 200
    totals = imported.reports["tau"].totals()
    assert (totals["turns"], totals["steps"], totals["tool_calls"], totals["tool_results"]) == (
        1490,
        2454,
        1164,
        1164,
    )
    indexes = [_index(imported, s) for s in sessions]
    turns = [len(ix.turns) for ix in indexes]
    assert min(turns) == 3 and max(turns) == 30
    assert len(indexes[159].turns) == 30  # task 9, trial 3
    assert len(indexes[196].turns) == 13 and sum(1 for t in indexes[196].turns for _ in t.exchanges) == 18
    assert max(_largest(ix) for ix in indexes) == 8_117
    # The recordings reuse some call ids within a session; each gets a unique one so requests stay valid.
    assert totals["renamed_calls"] == 73
    for ix in indexes:
        ids = [ex.tool_use_id for t in ix.turns for ex in t.exchanges]
        assert len(ids) == len(set(ids)) and all(
            ex.result is not None for t in ix.turns for ex in t.exchanges
        )
    # Every result body is the recorded tool message, byte for byte, in order.
    recorded = json.loads((trajectories / "tau-bench__gpt-4o-airline.json").read_text())
    for item, session in zip(recorded[:20], sessions[:20], strict=True):
        want = [m["content"] for m in item["traj"] if m["role"] == "tool"]
        got = [(e.blob or b"").decode() for e in imported.store.entries(session) if e.kind == "evidence_body"]
        assert got == want
    errors = sum(
        1
        for s in sessions
        for e in imported.store.entries(s)
        if e.kind == "evidence_body" and (e.blob or b"").startswith(b"Error:")
    )
    assert errors == 73


def test_openhands_sessions(imported: Imported) -> None:
    sessions = imported.sessions("openhands")
    assert len(sessions) == 3
    indexes = [_index(imported, s) for s in sessions]
    assert [len(ix.turns) for ix in indexes] == [1, 1, 1]
    assert [sum(1 for _ in ix.turns[0].exchanges) for ix in indexes] == [23, 33, 49]
    assert [_largest(ix) for ix in indexes] == [20_740, 13_172, 20_425]
    # The two `error` observations answer no call: the model saw them as messages.
    assert [[c.tag for c in ix.controls] for ix in indexes] == [[], ["tool-error"], ["tool-error"]]
    # The first two sessions end on a `finish` call, which has no observation; the third has none.
    unanswered = [[ex.tool_name for ex in ix.turns[0].exchanges if ex.result is None] for ix in indexes]
    assert unanswered == [["finish"], ["finish"], []]
    exits: Counter[str] = Counter()
    for s in sessions:
        for e in imported.store.entries(s):
            if e.kind == "evidence_body" and b"[The command completed with exit code" in (e.blob or b""):
                code = (e.blob or b"").rsplit(b"exit code ", 1)[1].split(b".")[0]
                exits[s] += code != b"0"
    assert [exits[s] for s in sessions] == [5, 2, 12]


def test_mini_swe_agent_session(imported: Imported) -> None:
    [session] = imported.sessions("mini")
    index = _index(imported, session)
    assert len(index.turns) == 1
    steps = index.turns[0].steps
    assert len(steps) == 51
    # 51 responses: 49 with exactly one action were run; 2 had two actions and got a format error.
    assert sum(1 for _ in index.turns[0].exchanges) == 49
    assert [c.tag for c in index.controls] == ["format-error", "format-error"]
    assert _largest(index) == 151_582
    bodies = [e.blob or b"" for e in imported.store.entries(session) if e.kind == "evidence_body"]
    codes = Counter(
        b.split(b"</returncode>")[0].removeprefix(b"<returncode>")
        for b in bodies
        if b.startswith(b"<returncode>")
    )
    assert codes == Counter({b"0": 42, b"1": 6})
    assert all(s.usage is not None for s in steps)  # every response recorded its usage: a receipt each
    assert (
        sum(1 for s in steps if any(b.type == "thinking" for b in s.payload.blocks)) == 1
    )  # one had reasoning


def test_swe_agent_session(imported: Imported) -> None:
    [session] = imported.sessions("swe")
    index = _index(imported, session)
    assert len(index.turns) == 1
    assert index.turns[0].directive.text.startswith("We're currently solving the following issue")
    assert [c.tag for c in index.controls] == ["demonstration"]
    names = Counter(ex.tool_name for ex in index.turns[0].exchanges)
    assert names == Counter(edit=5, python=2, create=1, find_file=1, open=1, rm=1, submit=1)
    assert all(ex.result is not None for ex in index.turns[0].exchanges)
    assert _largest(index) == 5_158  # the 5,036-char observation as the model saw it, with the prompt wrapper


def test_every_imported_entry_kind_and_link(imported: Imported) -> None:
    """Each tool result names its evidence body; bodies hold the whole result; receipts name their step."""
    for key in ("spotter", "openhands", "mini"):
        for session in imported.sessions(key):
            entries = imported.store.entries(session)
            by_id = {e.id: e for e in entries}
            for e in entries:
                payload = imported.store.mapper.payload_of(e)
                if isinstance(payload, ToolResult):
                    body = by_id[payload.evidence_id or ""]
                    meta = imported.store.mapper.payload_of(body)
                    assert isinstance(meta, EvidenceBody) and meta.tool_use_id == payload.tool_use_id
                    assert len(body.blob or b"") == meta.bytes
                    if not payload.windowed:
                        assert payload.content.encode() == body.blob
                    else:
                        assert recall_call(payload.evidence_id or "", None)[:20] in payload.content
                elif isinstance(payload, Receipt):
                    step = imported.store.mapper.payload_of(by_id[payload.step_id or ""])
                    assert isinstance(step, AssistantStep)
    kinds = Counter(type(p).__name__ for p in _payloads(imported, imported.sessions("spotter")[0]))
    assert kinds["Compaction"] == 1 and kinds["Nudge"] == 1 and kinds["TurnCard"] == 2
    assert Compaction.__name__ in kinds and Nudge.__name__ in kinds
