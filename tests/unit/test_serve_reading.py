"""serve/reading.py: a body read on from its conversation's last one gives exactly what reading it whole
gives (``parse``, the shape checks, the protocol's reader, ``with_text_exchanges``), the same request or the
same refusal, for a history that grows, one that edits, drops or retypes a message the last body held, a
text-form exchange split across the two bodies, and a new message that is malformed or too deep; what the
last body held is not read again (its items are handed on as they were)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.fakes.bad_inputs import ANTHROPIC, OPENAI, bad_inputs
from vak_context.errors import InvalidBody, InvalidInput
from vak_context.serve.bodies import MAX_DEPTH, parse
from vak_context.serve.protocol import ClientRequest, Protocol, read_anthropic, read_openai
from vak_context.serve.reading import Reader
from vak_context.serve.shapes import CHECKS
from vak_context.serve.textform import with_text_exchanges

SMOL = "Calling tools:\n" + str([{"id": "s1", "type": "function", "function": {"name": "lookup", "arguments": {"k": 1}}}])


def whole(protocol: Protocol, data: bytes) -> ClientRequest:
    """The request as the server read every body before serve/reading.py."""
    body = parse(data)
    CHECKS[protocol](body, 0)
    return with_text_exchanges((read_openai if protocol == "openai" else read_anthropic)(body))


def outcome(read: Any, *args: Any) -> Any:
    try:
        return read(*args)
    except (InvalidBody, InvalidInput) as exc:
        return type(exc).__name__, str(exc), getattr(exc, "status", None)


def same(reader: Reader, protocol: Protocol, body: dict[str, Any], header: str | None = "s", **dumps: Any) -> Any:
    data = json.dumps(body, **dumps).encode()
    got = outcome(reader.read, protocol, data, header)
    assert got == outcome(whole, protocol, data)
    return got


def openai(*messages: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "system", "content": "You are an agent."}, *messages],
            "tools": [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}], **more}


def call(i: str, **arguments: Any) -> dict[str, Any]:
    return {"id": i, "type": "function", "function": {"name": "lookup", "arguments": json.dumps(arguments)}}


HISTORY = [
    {"role": "user", "content": "Find k1."},
    {"role": "assistant", "content": None, "tool_calls": [call("c1", k=1)]},
    {"role": "tool", "tool_call_id": "c1", "content": "k1 is " + "x" * 5000},
    {"role": "assistant", "content": "k1 is x."},
    {"role": "user", "content": [{"type": "text", "text": "And k2?"}]},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "c2", "function": {"name": "lookup", "arguments": {"k": 2}}}]},
    {"role": "tool", "tool_call_id": "c2", "content": "k2 is y"},
    {"role": "system", "content": "Please return text or call a tool."},  # after the history began: the user's
    {"role": "assistant", "content": "k2 is y."},
]


def test_a_growing_history_reads_as_it_does_whole_and_hands_the_held_items_on() -> None:
    reader = Reader()
    last = None
    for n in range(1, len(HISTORY) + 1):
        request = same(reader, "openai", openai(*HISTORY[:n], stream=n % 2 == 0))
        if last is not None:  # the items the last body read are the same objects, not read again
            assert all(a is b for a, b in zip(request.items, last.items[:-1], strict=False))
        last = request
    assert same(reader, "openai", openai(*HISTORY)) == last  # a resend


@pytest.mark.parametrize("change", ["edit", "drop", "retype", "reorder", "key order", "other tools"])
def test_a_history_that_changes_what_the_last_body_held_reads_as_it_does_whole(change: str) -> None:
    reader = Reader()
    same(reader, "openai", openai(*HISTORY))
    history = [dict(m) for m in HISTORY] + [{"role": "user", "content": "Thanks."}]
    body = openai(*history)
    if change == "edit":
        history[2]["content"] = "k1 is z"
    elif change == "drop":
        del history[3]
    elif change == "retype":  # equal in Python (1 == 1.0), another value in JSON
        history[5] = {**history[5], "tool_calls": [{"id": "c2", "function": {"name": "lookup", "arguments": {"k": 2.0}}}]}
    elif change == "reorder":
        history[3], history[4] = history[4], history[3]
    elif change == "key order":
        history[0] = {"content": "Find k1.", "role": "user"}
    else:
        body["tools"] = []
    body["messages"][1:] = history
    request = same(reader, "openai", body)
    if change == "retype":
        assert request.items[5].calls[0].arguments == {"k": 2.0} and isinstance(request.items[5].calls[0].arguments["k"], float)


def test_a_text_form_exchange_split_across_two_bodies_is_read_as_one() -> None:
    reader = Reader()
    first = [{"role": "user", "content": "Look k1 up."}, {"role": "assistant", "content": SMOL}]
    held = same(reader, "openai", openai(*first))
    assert held.items[-1].calls == ()  # no result yet: the reply stays as written
    request = same(reader, "openai", openai(*first, {"role": "user", "content": "Observation:\nk1 is x"}))
    assert [i.role for i in request.items] == ["user", "assistant", "tool"] and request.items[1].calls[0].id == "s1"


@pytest.mark.parametrize("bad", [
    {"role": "tool", "content": "no call id"},
    {"role": "assistant", "tool_calls": [{"id": "x"}]},
    {"role": "wizard", "content": "hi"},
    {"role": "user", "content": 5},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "x", "function": {"name": "f", "arguments": "[1]"}}]},
    {"role": "user", "content": [{"type": "text", "text": "deep", "x": json.loads("[" * (MAX_DEPTH + 2) + "]" * (MAX_DEPTH + 2))}]},
])
def test_a_bad_new_message_is_refused_as_it_is_whole_and_the_next_body_reads_on(bad: dict[str, Any]) -> None:
    reader = Reader()
    same(reader, "openai", openai(*HISTORY))
    refused = same(reader, "openai", openai(*HISTORY, bad))
    assert isinstance(refused, tuple)
    assert same(reader, "openai", openai(*HISTORY, {"role": "user", "content": "Next."})).items[-1].text == "Next."


def anthropic(*messages: dict[str, Any]) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 100, "system": "You are an agent.", "messages": list(messages)}


ANTHROPIC_HISTORY = [
    {"role": "user", "content": "Find k1."},
    {"role": "assistant", "content": [{"type": "text", "text": "Looking."},
                                      {"type": "tool_use", "id": "t1", "name": "lookup", "input": {"k": 1}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "no such key", "is_error": True},
                                 {"type": "text", "text": "Try k2."}]},
]


def test_anthropic_histories_read_on_and_a_retyped_flag_is_refused_as_whole() -> None:
    reader = Reader()
    for n in range(1, len(ANTHROPIC_HISTORY) + 1):
        same(reader, "anthropic", anthropic(*ANTHROPIC_HISTORY[:n]))
    retyped = json.loads(json.dumps(ANTHROPIC_HISTORY))
    retyped[2]["content"][0]["is_error"] = 1  # == True in Python; a number, refused, in the body
    refused = same(reader, "anthropic", anthropic(*retyped, {"role": "assistant", "content": "k2?"}))
    assert isinstance(refused, tuple) and "is_error" in refused[1]


def test_a_body_only_json_parses_reads_as_json_reads_it() -> None:
    reader = Reader()
    same(reader, "openai", openai(*HISTORY))
    data = json.dumps(openai(*HISTORY, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "n", "function": {"name": "lookup", "arguments": {"k": float("nan"), "big": 2 ** 70}}}]})).encode()
    got = reader.read("openai", data, "s")
    assert got.items[-1].calls[0].arguments["big"] == 2 ** 70 and got == whole("openai", data)


def test_every_bad_input_is_refused_as_it_is_whole_by_a_fresh_reader_and_a_used_one() -> None:
    used = Reader()
    same(used, "openai", openai(*HISTORY), None)
    for case in bad_inputs(64 * 1024):
        if case.path not in (OPENAI, ANTHROPIC) or case.status not in (400, 413) or len(case.body) > 64 * 1024:
            continue
        protocol: Protocol = "openai" if case.path == OPENAI else "anthropic"
        for reader in (Reader(), used):
            assert outcome(reader.read, protocol, case.body, None) == outcome(whole, protocol, case.body), case.name


def test_it_keeps_the_most_recent_conversations_within_its_bytes() -> None:
    reader = Reader(keys=2, kept_chars=10 ** 9)
    for name in ("a", "b", "c"):
        same(reader, "openai", openai(*HISTORY), name)
    assert [k[1] for k in reader._last] == ["b", "c"]
    small = Reader(kept_chars=1000)
    same(small, "openai", openai(*HISTORY), "a")  # over 1000 characters of messages: not kept
    assert not small._last


@pytest.mark.parametrize("dumps", [{}, {"indent": 2}, {"ensure_ascii": False}, {"separators": (",", ":")}],
                         ids=["default", "indented", "utf-8", "compact"])
def test_any_spelling_of_the_json_reads_on_as_it_does_whole(dumps: dict[str, Any]) -> None:
    reader = Reader()
    history = [*HISTORY, {"role": "user", "content": "Grüße, 東京 \u2028 \"quoted\" \\ back"}]
    last = None
    for n in range(1, len(history) + 1):
        request = same(reader, "openai", openai(*history[:n]), **dumps)
        if last is not None:
            assert request.items[0] is last.items[0]  # read on, not whole
        last = request


def test_two_headerless_conversations_with_one_system_prompt_each_read_on() -> None:
    reader = Reader()
    one, two = [{"role": "user", "content": "Task one."}], [{"role": "user", "content": "Task two."}]
    held = {}
    for step in range(4):
        for name, history in (("one", one), ("two", two)):
            history.append({"role": "assistant" if step % 2 == 0 else "user", "content": f"{name} {step}"})
            request = same(reader, "openai", openai(*history), None)
            if name in held:
                assert request.items[0] is held[name].items[0]
            held[name] = request


@pytest.mark.parametrize("text", [
    '{"model": "m", "messages": [%s, {"role": "user", "content": "x"}], "model": "n"}',  # a member twice
    '{"model": "m", "messages": [%s, {"role": "user", "content": "x"}], "messages": [{"role": "user", "content": "y"}]}',
    '{"model": "m", "messages": [%s, {"role": "user", "content": "x"}]} trailing',
    '{"model": "m", "messages": [%s, {"role": "user", "content": "x"}',
    '{"model": "m", "messages": [%s, {"role": "user", "content": "x"},]}',
    '{"model": "m", "messages": [%s {"role": "user", "content": "x"}]}',
    '{"model": "m", "messages": [%s, {"role": "user", "content": "x"}] "tools": []}',
    '{"model": "m", "messages": [%s, {"role": "user", "content": NaN}], "n": 123456789012345678901234567890}',
    '{"model": "m", "messages": [%s, {"role": "user", "content": "\\ud800"}]}\n\t ',
    '{"model": "m", "messages": [%s]}',
])
def test_what_follows_the_held_messages_parses_as_json_does(text: str) -> None:
    held = json.dumps({"role": "user", "content": "Find k1."})
    reader = Reader()
    first = '{"model": "m", "messages": [%s]}'.replace("%s", held).encode()
    assert outcome(reader.read, "openai", first, "s") == outcome(whole, "openai", first)
    data = text.replace("%s", held).encode()
    assert outcome(reader.read, "openai", data, "s") == outcome(whole, "openai", data)


def test_a_body_that_is_not_utf_8_or_not_an_object_is_refused_as_whole() -> None:
    reader = Reader()
    same(reader, "openai", openai(*HISTORY))
    for data in (json.dumps(openai(*HISTORY)).encode("utf-16"), b"[]", b"", b"  ", b'"x"', b"{}", b'{"messages": 5}'):
        assert outcome(reader.read, "openai", data, "s") == outcome(whole, "openai", data)


def test_a_client_that_moves_its_cache_marks_reads_as_whole_and_its_unchanged_messages_are_not_parsed_again() -> None:
    """An Anthropic client marks its newest message ``cache_control`` and drops the mark from the one before:
    each body changes a message the last one held, so it is read whole, but parsed on from the messages
    before that one (the kept parse of them is taken as it is)."""
    reader = Reader()
    history: list[dict[str, Any]] = []
    kept: list[Any] = []
    for n in range(6):
        for m in history:
            for block in m["content"]:
                block.pop("cache_control", None)
        history.append({"role": "user" if n % 2 == 0 else "assistant",
                        "content": [{"type": "text", "text": f"message {n} " + "x" * 300, "cache_control": {"type": "ephemeral"}}]})
        same(reader, "anthropic", anthropic(*json.loads(json.dumps(history))))
        (last,) = reader._last.values()  # one body kept under the session's header
        if kept:
            assert all(a is b for a, b in zip(last.messages[:len(kept) - 1], kept[:-1], strict=True))
        kept = last.messages
