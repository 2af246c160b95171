"""The card-definition library, its generated tools, identity digests and presentation records (issue 4 item 6)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import blake3
import jsonschema
import pytest

from vak_context.context.history.cards import (
    CARD_KEYWORD,
    LIBRARY_ID,
    CardLibrary,
    card_ack,
    card_tool_name,
    card_tools,
    default_library,
    fence_presentation_record,
    identity_digest,
    is_duplicate,
    load_library,
    payload_digest,
    presentation_recall_text,
    presentation_record,
    validate_payload,
)
from vak_context.errors import InvalidCardDefinition, InvalidPayload, UnknownCardType
from vak_context.events import canonical
from vak_context.events.blocks import ToolUseBlock
from vak_context.events.payloads import Directive, Presentation
from vak_context.storage.ledger import LedgerStore

TURN = "d1" * 32
EV1, EV2 = "e1" * 32, "e2" * 32

EXAMPLES: dict[str, dict[str, Any]] = {
    "metric": {"label": "Temperature in Noida", "value": 29.1, "unit": "°C", "as_of": "2025-09-12 14:00"},
    "research.synthesis": {
        "title": "Fastest way to set up Elixir static analysis",
        "question": "How do I set up credo, dialyxir and mix_audit?",
        "takeaways": ["Add credo and dialyxir as dev deps", "mix_audit scans deps for advisories"],
        "body": "## Credo\n" + "Long synthesis text. " * 150,
        "sources": [
            {
                "title": "Credo docs",
                "url": "https://hexdocs.pm/credo",
                "snippet": "Credo is a static analysis tool",
            },
            {"title": "mix_audit | Hex", "url": "https://hex.pm/packages/mix_audit"},
        ],
    },
    "table": {
        "title": "Flights SFO to JFK",
        "columns": ["flight", "departs", "price"],
        "rows": [["HAT001", "08:00", 451], ["HAT017", "13:30", 389], ["HAT100", "22:10", 299]],
        "caption": "Economy fares",
    },
    "chart": {
        "title": "Daily high",
        "kind": "line",
        "series": [
            {
                "name": "Noida",
                "points": [{"x": "Mon", "y": 31}, {"x": "Tue", "y": 29.1}, {"x": "Wed", "y": 30}],
            },
            {"name": "Delhi", "points": [{"x": "Mon", "y": 32}, {"x": "Tue", "y": 30}]},
        ],
        "accessible_summary": "Noida cooled on Tuesday and warmed again on Wednesday.",
    },
    "entity": {
        "title": "Noida",
        "type": "city",
        "fields": {"State": "Uttar Pradesh", "Population": "1.7 million", "Founded": 1976},
        "summary": "A planned city in the National Capital Region. " * 10,
    },
    "checklist": {
        "title": "Release steps",
        "items": [{"label": "Run tests", "done": True}, {"label": "Tag the release", "note": "use vX.Y.Z"}],
    },
    "timeline": {
        "title": "Project history",
        "items": [
            {"label": "First commit", "when": "2024-01-03", "detail": "the skeleton"},
            {"label": "v1.0", "when": "2024-06-01"},
        ],
    },
}


# ------------------------------------------------------------------ the library and its tools


def test_the_library_has_the_seven_card_types_each_declaring_identity() -> None:
    library = default_library()
    assert sorted(library.defs) == sorted(EXAMPLES)
    for card in library.defs.values():
        assert card.identity, card.semantic_type
        assert card.schema[CARD_KEYWORD]["identity"] == list(card.identity)
        jsonschema.Draft202012Validator.check_schema(dict(card.schema))
    assert default_library() is default_library()  # loaded once
    assert load_library().version == library.version  # deterministic


def test_the_card_tools_are_generated_from_the_library() -> None:
    tools = {t.name: t for t in card_tools()}
    assert sorted(tools) == [
        "emit_chart_card",
        "emit_checklist_card",
        "emit_entity_card",
        "emit_metric_card",
        "emit_research_card",
        "emit_table_card",
        "emit_timeline_card",
    ]
    assert card_tool_name("research.synthesis") == "emit_research_card"
    for semantic_type, example in EXAMPLES.items():
        tool = tools[card_tool_name(semantic_type)]
        schema = tool.input_schema
        assert CARD_KEYWORD not in schema and "$schema" not in schema and "$id" not in schema
        assert schema["type"] == "object" and schema["required"]
        jsonschema.Draft202012Validator.check_schema(schema)
        assert not list(jsonschema.Draft202012Validator(schema).iter_errors(example)), semantic_type
        assert '{"presentation": "<id>", "ok": true}' in tool.description
    assert [t.name for t in card_tools()] == sorted(tools)  # a stable order keeps the request prefix stable


def test_a_card_type_is_found_by_semantic_type_or_tool_name() -> None:
    library = default_library()
    assert library.get("emit_research_card") is library.get("research.synthesis")
    assert library.is_card_tool("emit_metric_card") and not library.is_card_tool("recall")
    with pytest.raises(UnknownCardType, match="emit_weather_card"):
        library.get("emit_weather_card")


# ------------------------------------------------------------------ validation and digests


@pytest.mark.parametrize("semantic_type", sorted(EXAMPLES))
def test_every_example_validates_and_comes_back_canonical(semantic_type: str) -> None:
    example = EXAMPLES[semantic_type]
    payload = validate_payload(semantic_type, example)
    assert payload == example
    assert list(payload) == sorted(payload)  # key-sorted, as the canonical bytes are
    assert canonical.encode(payload) == canonical.encode(example)


def test_an_invalid_payload_names_every_problem_and_the_tool_to_call_again() -> None:
    bad = {"label": "", "value": [1], "colour": "red"}
    with pytest.raises(InvalidPayload) as info:
        validate_payload("emit_metric_card", bad)
    message = str(info.value)
    assert message.startswith("emit_metric_card payload is not a valid metric card: ")
    assert "'colour' was unexpected" in message
    assert "at $.value: [1] is not of type 'number', 'string'" in message
    assert "at $.label: '' should be non-empty" in message
    assert message.endswith("Fix these fields and call emit_metric_card again.")
    with pytest.raises(InvalidPayload, match=r"at \$.rows\[1\]\[0\]"):
        validate_payload("table", {"title": "t", "columns": ["a"], "rows": [["x"], [{"nested": 1}]]})


def test_payload_digest_is_blake3_of_canonical_json_and_ignores_key_order() -> None:
    payload = EXAMPLES["metric"]
    assert payload_digest(payload) == blake3.blake3(canonical.encode(payload)).hexdigest()
    reordered = dict(reversed(list(payload.items())))
    assert payload_digest(reordered) == payload_digest(payload)
    changed = {**payload, "value": 29.2}
    assert payload_digest(changed) != payload_digest(payload)


def test_identity_digests_follow_each_schema() -> None:
    assert identity_digest("metric", EXAMPLES["metric"]) == (
        "as_of: 2025-09-12 14:00\nlabel: Temperature in Noida\nunit: °C\nvalue: 29.1"
    )
    assert identity_digest("research.synthesis", EXAMPLES["research.synthesis"]) == (
        "takeaways:\n- Add credo and dialyxir as dev deps\n- mix_audit scans deps for advisories\n"
        "sources[].{title,url}:\n- Credo docs — https://hexdocs.pm/credo\n- mix_audit | Hex — https://hex.pm/packages/mix_audit"
    )
    assert identity_digest("table", EXAMPLES["table"]) == (
        'title: Flights SFO to JFK\ncolumns:\n- flight\n- departs\n- price\nrows#: 3\nrows[0]: ["HAT001", "08:00", 451]'
    )
    assert identity_digest("chart", EXAMPLES["chart"]) == (
        "title: Daily high\nseries[].name:\n- Noida\n- Delhi\nseries[].points#:\n- 3\n- 2\n"
        "accessible_summary: Noida cooled on Tuesday and warmed again on Wednesday."
    )
    assert identity_digest("entity", EXAMPLES["entity"]) == (
        'title: Noida\ntype: city\nfields: {"Founded": 1976, "Population": "1.7 million", "State": "Uttar Pradesh"}'
    )
    assert identity_digest("checklist", EXAMPLES["checklist"]) == (
        "title: Release steps\nitems[].label:\n- Run tests\n- Tag the release"
    )
    assert identity_digest("timeline", EXAMPLES["timeline"]) == (
        "title: Project history\nitems[].label:\n- First commit\n- v1.0"
    )


def test_identity_digests_leave_out_what_does_not_identify_the_card() -> None:
    research = identity_digest("research.synthesis", EXAMPLES["research.synthesis"])
    assert "Long synthesis text" not in research and "static analysis tool" not in research
    assert len(research) < len(json.dumps(EXAMPLES["research.synthesis"])) / 5
    assert "HAT017" not in identity_digest("table", EXAMPLES["table"])  # only the first row
    assert "29.1" not in identity_digest("chart", EXAMPLES["chart"])  # point counts, not points
    assert "planned city" not in identity_digest("entity", EXAMPLES["entity"])
    assert "use vX.Y.Z" not in identity_digest("checklist", EXAMPLES["checklist"])
    assert "2024-01-03" not in identity_digest("timeline", EXAMPLES["timeline"])


# ------------------------------------------------------------------ acks, duplicates, records


def test_the_card_ack_is_short_json() -> None:
    assert card_ack("a1") == '{"presentation": "a1", "ok": true}'
    assert json.loads(card_ack("f" * 64)) == {"presentation": "f" * 64, "ok": True}


def test_a_second_card_with_the_same_digest_in_a_turn_is_a_duplicate() -> None:
    seen = {payload_digest(EXAMPLES["metric"])}
    assert is_duplicate(payload_digest(dict(reversed(list(EXAMPLES["metric"].items())))), seen)
    assert not is_duplicate(payload_digest(EXAMPLES["entity"]), seen)
    assert not is_duplicate(payload_digest(EXAMPLES["metric"]), set())


def test_a_validated_card_call_becomes_a_presentation_record() -> None:
    tool_use = ToolUseBlock(id="toolu_1", name="emit_research_card", input=EXAMPLES["research.synthesis"])
    record = presentation_record(TURN, tool_use, [EV1, EV2, EV1])
    assert isinstance(record, Presentation)
    assert record.turn_id == TURN
    assert record.source.type == "tool_call" and record.source.tool_use_id == "toolu_1"
    assert record.semantic_type == "research.synthesis"
    assert (record.skill_id, record.skill_version) == (LIBRARY_ID, default_library().version)
    assert record.schema_version == 1
    assert record.payload == EXAMPLES["research.synthesis"] and list(record.payload) == sorted(record.payload)
    assert record.payload_digest == payload_digest(EXAMPLES["research.synthesis"])
    assert record.derived_from == (EV1, EV2)  # in order, repeats dropped
    assert record.title == "Fastest way to set up Elixir static analysis"
    assert record.identity_digest == identity_digest("research.synthesis", EXAMPLES["research.synthesis"])


def test_recalling_a_presentation_returns_its_full_payload() -> None:
    use = ToolUseBlock(id="t", name="emit_research_card", input=EXAMPLES["research.synthesis"])
    record = presentation_record(TURN, use, [EV1])
    text = presentation_recall_text("p" * 64, record)
    header, payload = text.split("\n", 1)
    assert header == (
        f'research.synthesis card "Fastest way to set up Elixir static analysis" (presentation {"p" * 64}); '
        f"derived from evidence {EV1}"
    )
    assert json.loads(payload) == EXAMPLES["research.synthesis"]  # the whole card, body and snippets included


def test_a_metric_card_is_titled_by_its_label_and_a_fence_record_says_so() -> None:
    message_id = "a7" * 32
    record = fence_presentation_record(TURN, message_id, "metric", EXAMPLES["metric"], [])
    assert record.title == "Temperature in Noida"
    assert record.source.type == "fence" and record.source.message_entry_id == message_id
    assert record.source.tool_use_id is None


def test_bad_card_calls_raise_typed_errors() -> None:
    with pytest.raises(UnknownCardType):
        presentation_record(TURN, ToolUseBlock(id="t", name="emit_poem_card", input={}), [])
    with pytest.raises(InvalidPayload, match="emit_table_card"):
        presentation_record(TURN, ToolUseBlock(id="t", name="emit_table_card", input={"title": "x"}), [])
    with pytest.raises(InvalidPayload, match="64-hex entry ids"):
        presentation_record(
            "not-an-id", ToolUseBlock(id="t", name="emit_metric_card", input=EXAMPLES["metric"]), []
        )


def test_a_presentation_record_is_a_ledger_entry(ledger_dir: Path) -> None:
    with LedgerStore(ledger_dir) as store:
        turn = store.append_one("cards", Directive(text="weather in noida?"))
        use = ToolUseBlock(id="toolu_9", name="emit_metric_card", input=EXAMPLES["metric"])
        record = presentation_record(turn, use, [])
        entry = store.append_one("cards", record)
        assert store.payload(entry) == record
        assert [e.id for e in store.chain_to_root(entry)] == [turn, entry]


# ------------------------------------------------------------------ definitions that are wrong


def _schema(semantic_type: str, identity: list[str]) -> dict[str, Any]:
    schema = copy.deepcopy(dict(default_library().get("checklist").schema))
    schema["$id"] = f"test:{semantic_type}"
    schema[CARD_KEYWORD] = {"semantic_type": semantic_type, "identity": identity}
    return schema


def test_a_custom_library_builds_from_schemas() -> None:
    library = CardLibrary.from_schemas([_schema("todo", ["title", "items[].label", "items#"])])
    assert [t.name for t in library.tool_specs()] == ["emit_todo_card"]
    payload = {"title": "x", "items": [{"label": "a"}, {"label": "b"}]}
    assert identity_digest("todo", payload, library) == "title: x\nitems[].label:\n- a\n- b\nitems#: 2"


@pytest.mark.parametrize(
    ("schemas", "says"),
    [
        ([_schema("research.synthesis", ["title"]), _schema("research.notes", ["title"])], "would both be"),
        ([_schema("todo", ["title"]), _schema("todo", ["title"])], "defined twice"),
        ([_schema("todo", ["items[]]"])], "not understood"),
        ([_schema("todo", [])], "non-empty list"),
        ([_schema("Todo Card", ["title"])], "dotted lower-case"),
        ([{**_schema("todo", ["title"]), "type": "no-such-type"}], "not a valid JSON Schema"),
        ([{k: v for k, v in _schema("todo", ["title"]).items() if k != CARD_KEYWORD}], "x-vak-card"),
    ],
)
def test_malformed_definitions_are_refused_when_the_library_loads(
    schemas: list[dict[str, Any]], says: str
) -> None:
    with pytest.raises(InvalidCardDefinition, match=says):
        CardLibrary.from_schemas(schemas)
