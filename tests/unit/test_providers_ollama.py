"""Ollama native /api/chat: keep_alive and num_ctx on every request, counts and durations, /api/show."""

from __future__ import annotations

import httpx
import pytest

from tests.fakes.provider_bodies.wire import Wire, body
from vak_context.context.request.messages import (
    ChatRequest,
    Message,
    ToolSpec,
)
from vak_context.errors import ContextOverflow, InvalidInput, ProviderRequestError
from vak_context.events.blocks import ImageBlock, TextBlock, ToolResultBlock, ToolUseBlock
from vak_context.providers.ollama import OllamaProvider

ROOT = "http://127.0.0.1:11434"
REQUEST = ChatRequest(
    model="qwen3:8b",
    system="Be brief.",
    tools=(ToolSpec(name="get_weather", description="Weather."),),
    max_tokens=32,
    temperature=0.1,
    extra={"options": {"seed": 7}, "think": True},
    messages=(
        Message(
            role="user",
            content=(TextBlock(text="Weather in Tokyo?"), ImageBlock(ref="data:image/png;base64,iVBORw0KGgo=")),
        ),
        Message(
            role="assistant",
            content=(
                TextBlock(text=""),
                ToolUseBlock(id="call_0", name="get_weather", input={"city": "Tokyo"}),
            ),
        ),
        Message(role="user", content=(ToolResultBlock(tool_use_id="call_0", content="18C"),)),
    ),
)


def test_render_sends_keep_alive_num_ctx_and_no_truncation() -> None:
    sent = OllamaProvider(httpx.AsyncClient(), keep_alive="1h", num_ctx=16384).render(REQUEST)
    assert sent["stream"] is False and sent["truncate"] is False and sent["keep_alive"] == "1h"
    assert sent["options"] == {"num_predict": 32, "num_ctx": 16384, "temperature": 0.1, "seed": 7}
    assert sent["think"] is True
    assert sent["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Tokyo?", "images": ["iVBORw0KGgo="]},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Tokyo"}}}],
        },
        {"role": "tool", "content": "18C", "tool_name": "get_weather"},
    ]
    assert sent["tools"][0]["function"]["name"] == "get_weather"


def test_url_images_are_refused_with_a_next_step() -> None:
    request = ChatRequest(
        model="m", messages=(Message(role="user", content=(ImageBlock(ref="https://x/y.png"),)),)
    )
    with pytest.raises(InvalidInput, match="Ollama fetches no URLs"):
        OllamaProvider(httpx.AsyncClient()).render(request)


def test_parse_tool_calls_thinking_counts_and_durations() -> None:
    result = OllamaProvider(httpx.AsyncClient()).parse(body("ollama", "chat"), latency_ms=3300.0)
    (call,) = result.tool_calls
    assert (call.id, call.name, call.arguments) == ("call_0", "get_weather", {"city": "Tokyo"})
    assert result.thinking == "The user wants the weather; call the tool." and result.text == ""
    assert (result.usage.input_tokens, result.usage.output_tokens, result.usage.cache_read_tokens) == (
        180,
        30,
        0,
    )
    assert result.timings == {
        "prompt_n": 180,
        "predicted_n": 30,
        "prompt_ms": 243.0,
        "predicted_ms": 2980.0,
        "load_ms": 12.0,
        "total_ms": 3240.0,
    }
    assert result.stop_reason == "stop" and result.model == "qwen3:8b"


async def test_complete_posts_to_api_chat() -> None:
    wire = Wire((200, body("ollama", "chat")))
    async with wire.client() as client:
        await OllamaProvider(client, base_url=ROOT).complete(REQUEST)
    assert str(wire.requests[0].url) == "http://127.0.0.1:11434/api/chat"
    assert wire.sent()["keep_alive"] == "30m"  # sent by default: Ollama's own 5 minutes unloads between turns


@pytest.mark.parametrize(
    ("name", "prompt", "limit"),
    [("overflow", 8889, 4096), ("overflow_shift", None, None), ("overflow_embed", None, None)],
)
async def test_over_length_400s_are_overflows(name: str, prompt: int | None, limit: int | None) -> None:
    wire = Wire((400, body("ollama", name)))
    async with wire.client() as client:
        with pytest.raises(ContextOverflow) as info:
            await OllamaProvider(client).complete(REQUEST)
    assert (info.value.prompt_tokens, info.value.limit_tokens) == (prompt, limit)


async def test_missing_model_says_to_pull_it() -> None:
    wire = Wire((404, body("ollama", "not_found")))
    async with wire.client() as client:
        with pytest.raises(ProviderRequestError, match="ollama pull"):
            await OllamaProvider(client).complete(REQUEST)


async def test_model_context_from_api_show() -> None:
    wire = Wire(
        (200, body("ollama", "show")), (200, body("ollama", "show")), (200, body("ollama", "show_no_num_ctx"))
    )
    async with wire.client() as client:
        modelfile = await OllamaProvider(client).model_context("llama3.1:8b")
        capped = await OllamaProvider(client, num_ctx=200_000).model_context("llama3.1:8b")
        default = await OllamaProvider(client).model_context("gemma3:270m")
    assert (
        str(wire.requests[0].url) == "http://127.0.0.1:11434/api/show" and wire.requests[0].method == "POST"
    )
    assert wire.sent(0) == {"model": "llama3.1:8b"}
    assert modelfile.declared_window == 16384 and "parameters num_ctx" in modelfile.source
    assert modelfile.detail == {
        "architecture": "llama",
        "context_length": 131072,
        "parameters_num_ctx": 16384,
    }
    assert capped.declared_window == 131072 and "options.num_ctx" in capped.source
    assert default.declared_window == 131072 and "server default applies" in default.source


def test_num_ctx_must_be_positive() -> None:
    with pytest.raises(InvalidInput, match="num_ctx"):
        OllamaProvider(httpx.AsyncClient(), num_ctx=0)
