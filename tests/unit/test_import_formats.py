"""The importer on OpenAI chat messages written here, on bad input, and through `vak import`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vak_context.cli.main import main
from vak_context.context.history.turns import TurnIndex
from vak_context.errors import InvalidInput, InvalidRecording, UnknownRecordingFormat
from vak_context.events.payloads import Activity, AssistantStep, Directive, EvidenceBody, ToolResult
from vak_context.importers import import_path, read_recordings
from vak_context.storage.cardindex import CardIndex
from vak_context.storage.ledger import LedgerStore

CHAT = [
    {"role": "system", "content": "You are a travel agent."},
    {"role": "user", "content": "What is the weather in Lisbon and in Porto?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_a",
                "type": "function",
                "function": {"name": "weather", "arguments": '{"city": "Lisbon"}'},
            },
            {
                "id": "call_b",
                "type": "function",
                "function": {"name": "weather", "arguments": '{"city": "Porto"}'},
            },
        ],
    },
    {
        "role": "tool",
        "tool_call_id": "call_b",
        "name": "weather",
        "content": '{"city": "Porto", "temp_c": 17}',
    },
    {
        "role": "tool",
        "tool_call_id": "call_a",
        "name": "weather",
        "content": '{"city": "Lisbon", "temp_c": 21}',
    },
    {"role": "assistant", "content": "Lisbon is 21 °C and Porto 17 °C."},
    {"role": "user", "content": "Thanks! And Faro?"},
    {
        "role": "assistant",
        "content": "Let me check.",
        "tool_calls": [
            {"id": "call_c", "type": "function", "function": {"name": "weather", "arguments": "{not json"}}
        ],
    },
    {"role": "tool", "tool_call_id": "call_c", "content": "Error: bad arguments"},
    {"role": "assistant", "content": "I could not look up Faro."},
]


def _write_jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.mark.parametrize("layout", ["json-list", "json-object", "jsonl"])
def test_openai_chat_messages_become_turns(tmp_path: Path, layout: str) -> None:
    src = tmp_path / "chat.json"
    if layout == "json-list":
        src.write_text(json.dumps(CHAT))
    elif layout == "json-object":
        src.write_text(json.dumps({"messages": CHAT}))
    else:
        src = _write_jsonl(tmp_path / "chat.jsonl", CHAT)
    with LedgerStore(tmp_path / "ledger") as store:
        report = import_path(store, src, session="chat")
        assert report.format == "openai-chat"
        payloads = [store.mapper.payload_of(e) for e in store.entries("chat")]
        index = TurnIndex.build(store.chain_to_root(store.head("chat") or ""))
    assert [type(p).__name__ for p in payloads[:3]] == ["Activity", "Activity", "Directive"]
    assert isinstance(payloads[1], Activity) and payloads[1].detail == {"text": "You are a travel agent."}
    assert [t.directive.text for t in index.turns] == [
        "What is the weather in Lisbon and in Porto?",
        "Thanks! And Faro?",
    ]
    first = index.turns[0]
    # Parallel calls: results answered out of order are matched to their calls by id.
    assert [
        (ex.tool_use_id, json.loads(ex.result.content)["city"]) for ex in first.exchanges if ex.result
    ] == [("call_a", "Lisbon"), ("call_b", "Porto")]
    assert first.final_answer is not None and first.final_answer.text == "Lisbon is 21 °C and Porto 17 °C."
    second = index.turns[1]
    [bad] = list(second.exchanges)
    assert bad.input == {"raw_arguments": "{not json"}  # kept, and counted in the report
    assert (
        report.sessions[0].skipped["tool arguments that are not a JSON object (kept as raw_arguments)"] == 1
    )
    assert report.sessions[0].cards == 2 and index.turns[1].card is not None
    kinds = [type(p) for p in payloads]
    assert kinds.count(EvidenceBody) == kinds.count(ToolResult) == 3
    assert kinds.count(AssistantStep) == 4 and kinds.count(Directive) == 2


def test_broken_json_line_is_a_typed_error_with_its_line(tmp_path: Path) -> None:
    src = tmp_path / "broken.jsonl"
    src.write_text(json.dumps(CHAT[0]) + "\n" + json.dumps(CHAT[1]) + '\n{"role": "assistant", "content\n')
    with LedgerStore(tmp_path / "ledger") as store:
        with pytest.raises(InvalidRecording) as err:
            import_path(store, src)
        assert err.value.line == 3 and "--skip-bad-lines" in str(err.value)
        assert store.sessions() == []  # nothing was written
        report = import_path(store, src, skip_bad_lines=True)
    assert report.skipped["line that is not JSON"] == 1
    assert "skipped 1: line that is not JSON" in report.summary()


def test_unknown_formats_name_what_vak_reads(tmp_path: Path) -> None:
    cases = {
        "notes.txt": "just some notes\n",
        "obj.json": json.dumps({"hello": "world"}),
        "rows.jsonl": json.dumps({"x": 1}) + "\n" + json.dumps({"x": 2}) + "\n",
        "empty.json": "[]",
    }
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
        with pytest.raises(UnknownRecordingFormat) as err:
            read_recordings(tmp_path / name)
        assert "claude-code" in str(err.value) and "tau-bench" in str(err.value), name
    with pytest.raises(InvalidRecording, match="no such file"):
        read_recordings(tmp_path / "missing.json")
    (tmp_path / "latin1.json").write_bytes(b'[{"role": "user", "content": "caf\xe9"}]')
    with pytest.raises(InvalidRecording, match="not UTF-8"):
        read_recordings(tmp_path / "latin1.json")


def test_importing_into_an_existing_session_is_refused(tmp_path: Path) -> None:
    src = tmp_path / "chat.json"
    src.write_text(json.dumps(CHAT))
    with LedgerStore(tmp_path / "ledger") as store:
        import_path(store, src, session="same")
        before = store.count("same")
        with pytest.raises(InvalidInput, match="already exists"):
            import_path(store, src, session="same")
        assert store.count("same") == before


def test_vak_import_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "chat.json"
    src.write_text(json.dumps(CHAT))
    ledger = tmp_path / "ledger"
    assert main(["import", str(src), "--ledger", str(ledger), "--session", "cli-chat"]) == 0
    out, err = capsys.readouterr()
    assert "imported" in out and "2 turns" in out and "3 tool calls" in out
    assert "events" in err  # progress goes to stderr
    assert CardIndex(ledger).search("cli-chat", "weather Porto", 5)  # the cards were indexed
    assert main(["import", str(tmp_path / "nope.json"), "--ledger", str(ledger)]) == 1
    assert "no such file" in capsys.readouterr().err
