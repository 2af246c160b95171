"""serve/bodies.py and serve/shapes.py on their own (pure): the size limit holds while a body streams (the
parts after the limit are never asked for), a pause is a 408, depth is bounded without recursion, and the
shape checks name the field; every request the protocols' own examples send passes, and a system message after
the history began is read as a message of it (pydantic-ai asks again with one)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from tests.fakes.bad_inputs import ANTHROPIC, OPENAI, BadInput, bad_inputs, good_anthropic, good_openai
from vak_context.errors import InvalidBody, InvalidInput
from vak_context.serve.bodies import check_content_type, depth, parse, read_body
from vak_context.serve.protocol import read_anthropic, read_openai
from vak_context.serve.shapes import check_anthropic, check_openai


def test_a_body_is_refused_at_the_part_that_passes_the_limit() -> None:
    asked: list[int] = []

    async def parts() -> AsyncIterator[bytes]:
        for i in range(1000):  # 1000 KB on offer; the limit is 10 KB
            asked.append(i)
            yield b"x" * 1024

    with pytest.raises(InvalidBody) as refused:
        asyncio.run(read_body(parts(), None, limit=10 * 1024))
    assert refused.value.status == 413
    assert len(asked) == 11  # the eleventh part passed the limit: nothing after it was read


def test_a_declared_length_over_the_limit_is_refused_before_a_byte() -> None:
    async def parts() -> AsyncIterator[bytes]:
        raise AssertionError("read")
        yield b""

    with pytest.raises(InvalidBody) as refused:
        asyncio.run(read_body(parts(), "50000000", limit=1024))
    assert refused.value.status == 413 and "limit" in str(refused.value)


def test_a_pause_in_the_body_is_a_408() -> None:
    async def parts() -> AsyncIterator[bytes]:
        yield b"{"
        await asyncio.Event().wait()  # never set: the client stopped sending
        yield b"}"

    with pytest.raises(InvalidBody) as refused:
        asyncio.run(read_body(parts(), None, idle_s=0.05))
    assert refused.value.status == 408 and "after 1 bytes" in str(refused.value)


def test_depth_is_walked_without_recursion() -> None:
    value: list[object] = []
    inner = value
    for _ in range(200_000):
        inner.append([])
        inner = inner[0]  # type: ignore[assignment]
    assert depth(value) == 200_001
    assert depth({"a": [1, {"b": "[[[["}]}) == 3
    with pytest.raises(InvalidBody, match="levels deep"):
        parse(b"[" * 100_000 + b"]" * 100_000)
    with pytest.raises(InvalidBody, match="65 levels deep"):
        parse(b'{"a": ' + b"[" * 64 + b"]" * 64 + b"}")


@pytest.mark.parametrize("header", [None, "application/json", "application/json; charset=utf-8", "Application/JSON"])
def test_json_or_no_content_type_is_read(header: str | None) -> None:
    check_content_type(header)


def test_the_protocols_own_requests_pass() -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    check_openai(good_openai(
        messages=[{"role": "system", "content": "s"}, {"role": "user", "content": [{"type": "text", "text": "hi"}]},
                  {"role": "assistant", "content": None, "tool_calls": [
                      {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                  {"role": "tool", "tool_call_id": "c1", "content": "42"}],
        tools=[{"type": "function", "function": {"name": "f", "parameters": schema}}], max_tokens=5,
        stream=True, stream_options={"include_usage": True}, temperature=0.2))
    check_anthropic(good_anthropic(
        system=[{"type": "text", "text": "s"}],
        messages=[{"role": "user", "content": "hi"},
                  {"role": "assistant", "content": [{"type": "text", "text": "ok"},
                                                    {"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                                "content": [{"type": "text", "text": "42"}], "is_error": False}]}],
        tools=[{"name": "f", "description": "d", "input_schema": schema}]))


SHAPES = [c for c in bad_inputs(1 << 20)
          if c.status == 400 and c.path in (OPENAI, ANTHROPIC) and not c.headers and "levels deep" not in c.names]


@pytest.mark.parametrize("case", SHAPES, ids=lambda c: c.name)
def test_each_shape_refusal_names_its_field(case: BadInput) -> None:
    with pytest.raises(InvalidInput) as refused:  # InvalidBody, or protocol.py's own InvalidInput (arguments)
        body = parse(case.body)
        (check_openai if case.path == OPENAI else check_anthropic)(body)
        (read_openai if case.path == OPENAI else read_anthropic)(body)
    assert case.names in str(refused.value)
    assert getattr(refused.value, "status", 400) == 400


def test_a_system_message_after_the_history_began_is_a_message_of_it() -> None:
    # pydantic-ai asks again after an empty reply with a system message at the end of the same history.
    request = read_openai({"model": "m", "messages": [
        {"role": "system", "content": "s"}, {"role": "developer", "content": "d"}, {"role": "user", "content": "q"},
        {"role": "system", "content": "Please return text or call a tool."}]})
    assert request.system == "s\n\nd"
    assert [(i.role, i.text) for i in request.items] == [("user", "q"), ("user", "Please return text or call a tool.")]
