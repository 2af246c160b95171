"""The recall tool's pure half: argument parsing, slices, and errors the model can read (issue 4 item 3)."""

from __future__ import annotations

import jsonschema
import pytest

from vak_context.context.evidence.digest import (
    RECALL_TOOL,
    WINDOW_CHARS,
    RecallError,
    RecallRequest,
    parse_recall_args,
    recall_slice,
    unknown_target,
)

EID = "ab" * 32


def test_the_tool_spec_is_named_recall_and_its_schema_accepts_the_three_forms() -> None:
    assert RECALL_TOOL.name == "recall"
    jsonschema.Draft202012Validator.check_schema(RECALL_TOOL.input_schema)
    validator = jsonschema.Draft202012Validator(RECALL_TOOL.input_schema)
    for good in ({"id": EID}, {"id": EID, "range": [3, 9]}, {"turn": 17}, {"presentation": "p1"}):
        assert not list(validator.iter_errors(good)), good
    assert list(validator.iter_errors({"id": EID, "range": [0, 2]}))
    assert list(validator.iter_errors({"id": EID, "bogus": 1}))
    assert "range" in RECALL_TOOL.description and "[evidence:" in RECALL_TOOL.description


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({"id": EID}, RecallRequest(id=EID, range=None, turn=None, presentation=None)),
        ({"id": EID, "range": [3, 9]}, RecallRequest(id=EID, range=(3, 9), turn=None, presentation=None)),
        ({"id": f" evidence:{EID} ", "range": "3-9"}, RecallRequest(EID, (3, 9), None, None)),
        ({"id": EID, "range": [4]}, RecallRequest(EID, (4, 4), None, None)),
        ({"id": EID, "range": 4}, RecallRequest(EID, (4, 4), None, None)),
        ({"id": EID, "range": ["2", 5.0]}, RecallRequest(EID, (2, 5), None, None)),
        ({"id": EID, "range": None, "turn": None}, RecallRequest(EID, None, None, None)),
        ({"turn": 17}, RecallRequest(id=None, range=None, turn=17, presentation=None)),
        ({"turn": "17"}, RecallRequest(None, None, 17, None)),
        ({"turn": "c" * 64}, RecallRequest(None, None, "c" * 64, None)),
        ({"presentation": "a1"}, RecallRequest(id=None, range=None, turn=None, presentation="a1")),
    ],
)
def test_recall_arguments_parse(args: dict, expected: RecallRequest) -> None:
    assert parse_recall_args(args) == expected


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ({}, "exactly one of id, turn or presentation"),
        ({"id": EID, "turn": 3}, "id and turn together"),
        ({"turn": 3, "range": [1, 2]}, "range goes with id"),
        ({"id": EID, "lines": [1, 2]}, "does not take 'lines'"),
        ({"id": ""}, "non-empty string"),
        ({"id": 42}, "non-empty string"),
        ({"id": EID, "range": [0, 3]}, "starts before line 1"),
        ({"id": EID, "range": [9, 3]}, "ends before it starts"),
        ({"id": EID, "range": "all of it"}, "two line numbers"),
        ({"id": EID, "range": [1, 2, 3]}, "two line numbers"),
        ({"id": EID, "range": [True, 2]}, "two line numbers"),
        ({"turn": 0}, "numbered from 1"),
        ({"turn": ""}, "turn must be a turn number"),
        ({"presentation": ["x"]}, "non-empty string"),
    ],
)
def test_bad_recall_arguments_are_tool_errors_that_say_how_to_call(args: dict, says: str) -> None:
    result = parse_recall_args(args)
    assert isinstance(result, RecallError)
    assert says in result.message
    assert str(result) == result.message


def test_arguments_that_are_not_an_object_are_a_tool_error_not_an_exception() -> None:
    result = parse_recall_args(["id", EID])  # type: ignore[arg-type]
    assert isinstance(result, RecallError) and "JSON object" in result.message


BODY = "alpha\r\nbeta\ngamma\r\ndelta"  # mixed endings, no trailing newline


def test_recall_of_the_whole_body_and_of_ranges_returns_the_original_text() -> None:
    assert recall_slice(BODY, EID, None) == BODY
    assert recall_slice(BODY, EID, (1, 1)) == "alpha\r\n"
    assert recall_slice(BODY, EID, (2, 3)) == "beta\ngamma\r\n"
    assert recall_slice(BODY, EID, (4, 4)) == "delta"
    assert recall_slice(BODY, EID, (1, 4)) == BODY


def test_a_range_past_the_end_names_the_lines_that_exist() -> None:
    result = recall_slice(BODY, EID, (3, 10))
    assert isinstance(result, RecallError)
    assert "has 4 lines" in result.message
    assert f'recall({{"id": "{EID}", "range": [3, 4]}})' in result.message
    far = recall_slice(BODY, EID, (10, 12))
    assert isinstance(far, RecallError) and '"range": [4, 4]' in far.message


def test_recall_checks_ranges_even_when_called_without_parsing() -> None:
    assert isinstance(recall_slice(BODY, EID, (0, 2)), RecallError)
    assert isinstance(recall_slice(BODY, EID, (3, 2)), RecallError)
    empty = recall_slice("", EID, (1, 1))
    assert isinstance(empty, RecallError) and "empty" in empty.message


def test_a_recall_result_over_the_limit_is_windowed_under_its_own_id() -> None:
    body = "".join(f"{i:08d}" + "w" * 91 + "\n" for i in range(1, 1001))  # 100,000 chars
    recalled = recall_slice(body, "recall-7", (101, 900))  # 80,000 chars
    assert isinstance(recalled, str) and len(recalled) <= WINDOW_CHARS
    assert recalled.startswith(f"{101:08d}")  # the slice's first line leads
    assert '"id": "recall-7"' in recalled  # the omitted lines are named under the recall's own id
    assert f'"id": "{EID}"' not in recalled
    # and the range it names is in the slice's own line numbers
    assert '"range": [' in recalled
    small = recall_slice(body, "recall-8", (101, 110))
    assert small == "".join(f"{i:08d}" + "w" * 91 + "\n" for i in range(101, 111))


def test_an_unknown_target_gets_an_error_that_says_where_ids_come_from() -> None:
    for args, says in (
        ({"id": "nope"}, "[evidence:<id>"),
        ({"turn": 99}, "turn number the cards show"),
        ({"presentation": "p9"}, '{"presentation": "<id>", "ok": true}'),
    ):
        request = parse_recall_args(args)
        assert isinstance(request, RecallRequest)
        error = unknown_target(request)
        assert isinstance(error, RecallError) and says in error.message
