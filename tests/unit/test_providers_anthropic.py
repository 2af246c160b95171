"""Anthropic Messages: blocks, cache_control breakpoints, both cache tiers, over-length, the models rung."""

from __future__ import annotations

import httpx
import pytest

from tests.fakes.provider_bodies.wire import Wire, body, fast_retry
from vak_context.context.request.messages import (
    CacheHints,
    ChatRequest,
    Message,
    ToolSpec,
)
from vak_context.errors import ContextOverflow, InvalidInput, ProviderRequestError, RetryableProviderError
from vak_context.events.blocks import ImageBlock, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock
from vak_context.providers.anthropic import AnthropicProvider

KEY = "sk-ant-test-0123456789"
TOOLS = (
    ToolSpec(name="get_weather", description="Weather."),
    ToolSpec(name="probe_ack", description="Acknowledge."),
)


def turn(i: int) -> tuple[Message, Message]:
    return Message.user(f"question {i}"), Message.assistant(f"answer {i}")


def provider() -> AnthropicProvider:
    return AnthropicProvider(httpx.AsyncClient(), api_key=KEY)


def cached_blocks(sent: dict) -> list[str]:
    """Where cache_control landed, as 'system', 'tool:<name>' or 'msg<i>:<block type>'."""
    out = ["system" for b in sent.get("system", []) if "cache_control" in b]
    out += [f"tool:{t['name']}" for t in sent.get("tools", []) if "cache_control" in t]
    for i, m in enumerate(sent["messages"]):
        out += [f"msg{i}:{b['type']}" for b in m["content"] if "cache_control" in b]
    return out


def test_render_blocks_for_every_part_kind() -> None:
    request = ChatRequest(
        model="claude-sonnet-4-5",
        system="Be brief.",
        tools=TOOLS[:1],
        tool_choice="required",
        max_tokens=256,
        temperature=0.2,
        cache=CacheHints(prefix=False),
        messages=(
            Message(
                role="user",
                content=(
                    TextBlock(text="What is this?"),
                    TextBlock(text=""),
                    ImageBlock(ref="data:image/png;base64,iVBORw0KGgo=", media_type="image/png"),
                    ImageBlock(ref="https://example.com/cat.jpg", media_type="image/jpeg"),
                ),
            ),
            Message(
                role="assistant",
                content=(
                    ThinkingBlock(thinking="signed", signature="sig-1"),
                    ThinkingBlock(thinking="from another provider"),
                    ToolUseBlock(id="toolu_1", name="get_weather", input={"location": "SF"}),
                ),
            ),
            Message(
                role="user", content=(ToolResultBlock(tool_use_id="toolu_1", content="boom", is_error=True),)
            ),
        ),
    )
    sent = provider().render(request)
    assert sent["model"] == "claude-sonnet-4-5" and sent["max_tokens"] == 256 and sent["temperature"] == 0.2
    assert sent["system"] == [{"type": "text", "text": "Be brief."}]
    assert sent["tools"] == [
        {
            "name": "get_weather",
            "description": "Weather.",
            "input_schema": {"type": "object", "properties": {}},
        }
    ]
    assert sent["tool_choice"] == {"type": "any"}
    assert sent["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
                },
                {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "signed", "signature": "sig-1"},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"location": "SF"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "boom", "is_error": True}
            ],
        },
    ]
    assert cached_blocks(sent) == []


def test_prefix_breakpoint_goes_on_system_which_covers_the_tools() -> None:
    request = ChatRequest(model="m", system="sys", tools=TOOLS, messages=turn(0))
    assert cached_blocks(provider().render(request)) == ["system"]


def test_prefix_breakpoint_without_system_goes_on_the_last_tool() -> None:
    request = ChatRequest(model="m", tools=TOOLS, messages=turn(0))
    assert cached_blocks(provider().render(request)) == ["tool:probe_ack"]


def test_at_most_four_breakpoints_keeping_the_latest() -> None:
    messages = tuple(m for i in range(4) for m in turn(i))  # 8 messages
    request = ChatRequest(
        model="m", system="sys", messages=messages, cache=CacheHints(breakpoints=(1, 3, 5, 7, 6))
    )
    sent = provider().render(request)
    assert cached_blocks(sent) == ["system", "msg5:text", "msg6:text", "msg7:text"]
    assert all(
        b.get("cache_control") in (None, {"type": "ephemeral"})
        for m in sent["messages"]
        for b in m["content"]
    )


def test_breakpoint_skips_thinking_blocks() -> None:
    message = Message(
        role="assistant",
        content=(TextBlock(text="a"), ThinkingBlock(thinking="t", signature="s")),
    )
    request = ChatRequest(
        model="m", messages=(Message.user("q"), message), cache=CacheHints(breakpoints=(1,))
    )
    assert cached_blocks(provider().render(request)) == ["msg1:text"]


def test_breakpoint_outside_the_messages_is_a_clear_error() -> None:
    request = ChatRequest(model="m", messages=turn(0), cache=CacheHints(breakpoints=(2,)))
    with pytest.raises(InvalidInput, match="breakpoint 2 is not a message index"):
        provider().render(request)


def test_parse_thinking_text_tool_use_and_both_cache_tiers() -> None:
    result = provider().parse(body("anthropic", "message"), latency_ms=9.0)
    assert result.text == "I'll check the current weather in San Francisco for you."
    assert result.thinking.startswith("The user wants the weather")
    (call,) = result.tool_calls
    assert (call.id, call.name, call.arguments) == (
        "toolu_01A09q90qw90lq917835lq9",
        "get_weather",
        {"location": "San Francisco, CA", "unit": "celsius"},
    )
    usage = result.usage
    assert (usage.input_tokens, usage.cache_read_tokens, usage.cache_write_tokens, usage.output_tokens) == (
        21,
        1920,
        188086,
        393,
    )
    assert usage.prompt_tokens == 21 + 1920 + 188086
    assert result.stop_reason == "tool_use" and result.model == "claude-sonnet-4-5-20250929"


async def test_complete_sends_version_and_key_headers() -> None:
    wire = Wire((200, body("anthropic", "message")))
    async with wire.client() as client:
        await AnthropicProvider(client, api_key=KEY).complete(ChatRequest(model="m", messages=turn(0)))
    sent = wire.requests[0]
    assert str(sent.url) == "https://api.anthropic.com/v1/messages"
    assert sent.headers["x-api-key"] == KEY and sent.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in sent.headers


async def test_prompt_too_long_is_an_overflow_with_sizes() -> None:
    wire = Wire((400, body("anthropic", "overflow")))
    async with wire.client() as client:
        with pytest.raises(ContextOverflow) as info:
            await AnthropicProvider(client, api_key=KEY).complete(ChatRequest(model="m", messages=turn(0)))
    assert (info.value.prompt_tokens, info.value.limit_tokens) == (208310, 200000)


async def test_overloaded_529_is_retried_and_413_is_an_overflow() -> None:
    retry, sleeps = fast_retry(attempts=2)
    wire = Wire(
        (529, body("anthropic", "overloaded")),
        (529, body("anthropic", "overloaded")),
        (413, body("anthropic", "too_large")),
    )
    async with wire.client() as client:
        adapter = AnthropicProvider(client, api_key=KEY, retry=retry)
        with pytest.raises(RetryableProviderError, match="Overloaded"):
            await adapter.complete(ChatRequest(model="m", messages=turn(0)))
        with pytest.raises(ContextOverflow) as info:
            await adapter.complete(ChatRequest(model="m", messages=turn(0)))
    assert len(sleeps.waits) == 1 and info.value.status == 413


async def test_auth_and_not_found_are_request_errors_with_next_steps() -> None:
    wire = Wire((401, body("anthropic", "auth")), (404, body("anthropic", "not_found")))
    async with wire.client() as client:
        adapter = AnthropicProvider(client, api_key=KEY)
        with pytest.raises(ProviderRequestError, match="check ANTHROPIC_API_KEY"):
            await adapter.complete(ChatRequest(model="m", messages=turn(0)))
        with pytest.raises(ProviderRequestError, match="check the model name"):
            await adapter.complete(ChatRequest(model="claude-9", messages=turn(0)))


async def test_model_context_from_the_models_endpoint() -> None:
    wire = Wire((200, body("anthropic", "model")))
    async with wire.client() as client:
        ctx = await AnthropicProvider(client, api_key=KEY).model_context("claude-sonnet-4-5-20250929")
    assert str(wire.requests[0].url) == "https://api.anthropic.com/v1/models/claude-sonnet-4-5-20250929"
    assert (ctx.declared_window, ctx.output_limit) == (200000, 64000)
    assert "max_input_tokens" in ctx.source


DEFERRED = (ToolSpec(name="sql_query", description="Run SQL."), ToolSpec(name="send_mail", description="Mail."))


def _loaded_result(*names: str) -> str:
    from vak_context.context.request.surface import ToolDecl, find_tools_result

    return find_tools_result([ToolDecl(t) for t in DEFERRED if t.name in names], "sql")


async def test_deferred_tools_go_with_defer_loading_and_the_beta_header() -> None:
    """Deferred tools follow the loaded ones with ``defer_loading: true`` (never a cache breakpoint), and the
    request names the deferred-tools beta; a request without deferred tools names no beta."""
    wire = Wire((200, body("anthropic", "message")), (200, body("anthropic", "message")))
    request = ChatRequest(model="m", system="S", messages=turn(0), tools=TOOLS, deferred_tools=DEFERRED,
                          cache=CacheHints(prefix=True))
    async with wire.client() as client:
        p = AnthropicProvider(client, api_key=KEY)
        await p.complete(request)
        await p.complete(request.model_copy(update={"deferred_tools": ()}))
    import json

    sent = json.loads(wire.requests[0].content)
    assert [(t["name"], t.get("defer_loading", False)) for t in sent["tools"]] == [
        ("get_weather", False), ("probe_ack", False), ("sql_query", True), ("send_mail", True)]
    assert not any("cache_control" in t for t in sent["tools"] if t.get("defer_loading"))
    assert wire.requests[0].headers["anthropic-beta"] == "advanced-tool-use-2025-11-20"
    assert "anthropic-beta" not in wire.requests[1].headers


def test_a_find_tools_result_of_deferred_tools_becomes_tool_references() -> None:
    """The projection marks what a find_tools result loaded; Anthropic sends it as tool_reference blocks
    when every loaded tool is deferred in the request, else as the schemas' text (as every other adapter)."""
    from vak_context.context.request.toolrefs import tools_loaded_by

    text = _loaded_result("sql_query")
    assert tools_loaded_by(text) == ("sql_query",) and tools_loaded_by("no tool matches 'x'") == ()
    result = Message(role="user", content=(ToolResultBlock(tool_use_id="t1", content=text, loads=("sql_query",)),))
    call = Message(role="assistant", content=(ToolUseBlock(id="t1", name="find_tools", input={"query": "sql"}),))
    base = ChatRequest(model="m", messages=(Message.user("q"), call, result), tools=TOOLS)
    with_refs = provider().render(base.model_copy(update={"deferred_tools": DEFERRED}))
    assert with_refs["messages"][2]["content"][0]["content"] == [{"type": "tool_reference", "tool_name": "sql_query"}]
    plain = provider().render(base)
    assert plain["messages"][2]["content"][0]["content"] == text
