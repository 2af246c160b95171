"""Google Gemini generateContent: contents/parts, function calls, thoughts, usageMetadata, errors, models.get."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.fakes.provider_bodies.wire import Wire, body, fast_retry
from vak_context.context.request.messages import (
    ChatRequest,
    Message,
    ToolSpec,
)
from vak_context.errors import ContextOverflow, ProviderRequestError, RetryableProviderError
from vak_context.events.blocks import ImageBlock, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock
from vak_context.providers.gemini import GeminiProvider

KEY = "AIza-test-0123456789"
REQUEST = ChatRequest(
    model="gemini-2.5-flash",
    system="Be brief.",
    tools=(ToolSpec(name="get_weather", description="Weather."),),
    tool_choice="required",
    max_tokens=128,
    temperature=0.5,
    messages=(
        Message(
            role="user",
            content=(
                TextBlock(text="Weather here?"),
                ImageBlock(ref="data:image/jpeg;base64,/9j/4AAQ", media_type="image/jpeg"),
                ImageBlock(ref="gs://bucket/map.png", media_type="image/png"),
            ),
        ),
        Message(
            role="assistant",
            content=(
                ThinkingBlock(thinking="plan", signature="sig-A"),
                ToolUseBlock(id="call_0", name="get_weather", input={"location": "Boston"}),
            ),
        ),
        Message(role="user", content=(ToolResultBlock(tool_use_id="call_0", content="12C"),)),
    ),
)


def gemini(client: httpx.AsyncClient | None = None, **kw: object) -> GeminiProvider:
    return GeminiProvider(
        client or httpx.AsyncClient(),
        base_url="https://generativelanguage.googleapis.com/v1beta",
        api_key=KEY,
        **kw,  # type: ignore[arg-type]
    )


def test_render_contents_parts_tools_and_config() -> None:
    sent = gemini().render(REQUEST)
    assert sent["systemInstruction"] == {"parts": [{"text": "Be brief."}]}
    assert sent["contents"] == [
        {
            "role": "user",
            "parts": [
                {"text": "Weather here?"},
                {"inlineData": {"mimeType": "image/jpeg", "data": "/9j/4AAQ"}},
                {"fileData": {"mimeType": "image/png", "fileUri": "gs://bucket/map.png"}},
            ],
        },
        {
            "role": "model",
            "parts": [
                {
                    "functionCall": {"id": "call_0", "name": "get_weather", "args": {"location": "Boston"}},
                    "thoughtSignature": "sig-A",
                }
            ],
        },
        {
            "role": "user",
            "parts": [
                {"functionResponse": {"id": "call_0", "name": "get_weather", "response": {"result": "12C"}}}
            ],
        },
    ]
    assert sent["tools"] == [
        {
            "functionDeclarations": [
                {
                    "name": "get_weather",
                    "description": "Weather.",
                    "parameters": {"type": "object", "properties": {}},
                }
            ]
        }
    ]
    assert sent["toolConfig"] == {"functionCallingConfig": {"mode": "ANY"}}
    assert sent["generationConfig"] == {"maxOutputTokens": 128, "temperature": 0.5}


def test_parse_separates_thoughts_text_and_calls_with_every_usage_tier() -> None:
    result = gemini().parse(body("gemini", "generate"), latency_ms=4.0)
    assert result.text == "Checking the weather. "
    assert result.thinking == "**Planning the lookup** I need the weather tool."
    (call,) = result.tool_calls
    assert (call.id, call.name, call.arguments) == ("call_abc123_0", "get_weather", {"location": "Boston"})
    usage = result.usage
    assert (usage.input_tokens, usage.cache_read_tokens, usage.output_tokens, usage.reasoning_tokens) == (
        904,
        4096,
        140,
        100,
    )
    assert usage.prompt_tokens == 5000
    assert result.stop_reason == "STOP" and result.model == "gemini-2.5-flash"


async def test_complete_url_and_key_header_never_in_the_url() -> None:
    wire = Wire((200, body("gemini", "generate")))
    async with wire.client() as client:
        await gemini(client).complete(REQUEST.model_copy(update={"model": "models/gemini-2.5-flash"}))
    sent = wire.requests[0]
    assert str(sent.url) == (
        "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:generateContent"
    )
    assert sent.headers["x-goog-api-key"] == KEY and KEY not in str(sent.url)


async def test_token_count_400_is_an_overflow_and_a_bad_key_400_is_not() -> None:
    wire = Wire((400, body("gemini", "overflow")), (400, body("gemini", "bad_key")))
    async with wire.client() as client:
        adapter = gemini(client)
        with pytest.raises(ContextOverflow) as info:
            await adapter.complete(REQUEST)
        with pytest.raises(ProviderRequestError, match="API key not valid") as bad:
            await adapter.complete(REQUEST)
    assert (info.value.prompt_tokens, info.value.limit_tokens) == (1200293, 1048576)
    assert not isinstance(bad.value, ContextOverflow)


async def test_429_honours_the_retry_info_delay() -> None:
    retry, sleeps = fast_retry(attempts=3)
    limited = (429, body("gemini", "rate_limited"))
    wire = Wire(limited, limited, limited)
    async with wire.client() as client:
        with pytest.raises(RetryableProviderError) as info:
            await gemini(client, retry=retry).complete(REQUEST)
    assert sleeps.waits == [7.0, 7.0] and info.value.retry_after == 7.0


async def test_model_context_from_models_get_and_not_found() -> None:
    wire = Wire((200, body("gemini", "model")), (404, body("gemini", "not_found")))
    async with wire.client() as client:
        adapter = gemini(client)
        ctx = await adapter.model_context("gemini-2.5-flash")
        with pytest.raises(ProviderRequestError, match="check the model name"):
            await adapter.model_context("gemini-9")
    assert (
        str(wire.requests[0].url)
        == "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash"
    )
    assert wire.requests[0].method == "GET"
    assert (ctx.declared_window, ctx.output_limit) == (1048576, 65536)
    assert "inputTokenLimit" in ctx.source


def test_calls_without_ids_get_ids_unique_across_steps_and_their_responses_keep_their_names() -> None:
    """An older model sends no call id: two steps' calls (no responseId either) must not both be "call_0", or
    the next request would name the first step's functionResponse after the second step's tool."""
    reply = body("gemini", "generate")
    reply.pop("responseId")
    first = gemini().parse(reply, latency_ms=1.0).tool_calls[0]
    second_body = json.loads(json.dumps(reply))
    second_body["candidates"][0]["content"]["parts"][2]["functionCall"] = {"name": "get_time", "args": {}}
    second = gemini().parse(second_body, latency_ms=1.0).tool_calls[0]
    assert first.id != second.id and first.id.startswith("call_") and second.id.endswith("_0")
    request = ChatRequest(model="gemini-2.5-flash", messages=(
        Message(role="user", content=(TextBlock(text="weather and time?"),)),
        Message(role="assistant", content=(ToolUseBlock(id=first.id, name=first.name, input=first.arguments),)),
        Message(role="user", content=(ToolResultBlock(tool_use_id=first.id, content="12C"),)),
        Message(role="assistant", content=(ToolUseBlock(id=second.id, name=second.name, input={}),)),
        Message(role="user", content=(ToolResultBlock(tool_use_id=second.id, content="09:00"),)),
    ))
    sent = gemini().render(request)
    responses = [p["functionResponse"] for c in sent["contents"] for p in c["parts"] if "functionResponse" in p]
    assert [(r["id"], r["name"]) for r in responses] == [(first.id, "get_weather"), (second.id, "get_time")]
