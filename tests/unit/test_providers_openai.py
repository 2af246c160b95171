"""The OpenAI-shaped adapters: OpenAI-compatible chat (llama.cpp, vLLM), OpenAI, OpenRouter, Bedrock, Responses."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.fakes.provider_bodies.conversation import CONVERSATION, LOCAL, SCHEMA
from tests.fakes.provider_bodies.wire import Wire, body
from vak_context.context.request.messages import (
    ChatRequest,
    Message,
)
from vak_context.errors import ContextOverflow, InvalidInput, ProviderRequestError
from vak_context.events.blocks import ToolUseBlock
from vak_context.providers.bedrock import BedrockProvider
from vak_context.providers.openai_compat import OpenAIChatProvider, OpenAICompatProvider
from vak_context.providers.openai_responses import OpenAIResponsesProvider
from vak_context.providers.openrouter import OpenRouterProvider

# ---------------------------------------------------------------- OpenAI-compatible chat: render


def test_render_chat_messages_tools_and_tool_results() -> None:
    sent = OpenAICompatProvider(httpx.AsyncClient(), base_url=LOCAL).render(CONVERSATION)
    assert sent["model"] == "gpt-4o-mini"
    assert sent["messages"] == [
        {"role": "system", "content": "You are terse."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Weather in Boston?"},
                {"type": "image_url", "image_url": {"url": "https://example.com/map.png"}},
            ],
        },
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"location": "Boston"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "12C, rain"},
        {"role": "user", "content": "And tomorrow?"},
    ]
    assert sent["tools"] == [
        {
            "type": "function",
            "function": {"name": "get_weather", "description": "Weather for a place.", "parameters": SCHEMA},
        }
    ]
    assert sent["tool_choice"] == "auto" and sent["max_tokens"] == 64 and sent["temperature"] == 0.0
    assert "prompt_cache_key" not in sent  # llama.cpp and strict servers: off unless the adapter is told


def test_assistant_with_only_tool_calls_has_null_content_and_extra_passes_through() -> None:
    request = ChatRequest(
        model="m",
        messages=(Message(role="assistant", content=(ToolUseBlock(id="c", name="t", input={}),)),),
        extra={"cache_prompt": True, "top_k": 1},
    )
    sent = OpenAICompatProvider(httpx.AsyncClient(), base_url=LOCAL, prompt_cache_key=True).render(request)
    assert sent["messages"][0]["content"] is None
    assert sent["cache_prompt"] is True and sent["top_k"] == 1
    assert "prompt_cache_key" not in sent  # no session key, nothing to send


def test_openai_renders_prompt_cache_key_and_max_completion_tokens() -> None:
    sent = OpenAIChatProvider(httpx.AsyncClient()).render(CONVERSATION)
    assert sent["prompt_cache_key"] == "sess-42"
    assert sent["max_completion_tokens"] == 64 and "max_tokens" not in sent


# ---------------------------------------------------------------- parse


def test_parse_llamacpp_usage_cache_tier_and_timings() -> None:
    provider = OpenAICompatProvider(httpx.AsyncClient(), base_url=LOCAL)
    result = provider.parse(body("openai_compat", "llamacpp_chat_repeat"), latency_ms=12.5)
    assert result.text == "I'm here to help with any kind"
    assert result.stop_reason == "length"
    assert (result.usage.input_tokens, result.usage.cache_read_tokens, result.usage.output_tokens) == (
        1,
        21,
        8,
    )
    assert result.usage.prompt_tokens == 22
    assert result.timings["cache_n"] == 21 and result.timings["prompt_ms"] == 8.654
    assert result.latency_ms == 12.5 and result.provider == "openai-compat"
    assert result.model == "SmolLM2-135M-Instruct.Q4_1.gguf"


def test_parse_openai_tool_call_and_every_usage_tier() -> None:
    provider = OpenAICompatProvider(httpx.AsyncClient(), base_url=LOCAL)
    result = provider.parse(body("openai_compat", "openai_chat_tool_call"), latency_ms=1.0)
    assert result.text == "" and result.stop_reason == "tool_calls"
    (call,) = result.tool_calls
    assert (call.id, call.name, call.arguments) == (
        "call_abc123",
        "get_current_weather",
        {"location": "Boston, MA"},
    )
    assert call.raw_arguments == '{\n"location": "Boston, MA"\n}'
    usage = result.usage
    assert (usage.input_tokens, usage.cache_read_tokens, usage.cache_write_tokens) == (86, 1920, 0)
    assert (usage.output_tokens, usage.reasoning_tokens, usage.prompt_tokens) == (300, 64, 2006)


def test_malformed_tool_arguments_keep_the_raw_text() -> None:
    reply = body("openai_compat", "openai_chat_tool_call")
    reply["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = '{"location": "Bos'
    result = OpenAICompatProvider(httpx.AsyncClient(), base_url=LOCAL).parse(reply, latency_ms=0)
    assert result.tool_calls[0].arguments == {} and result.tool_calls[0].raw_arguments == '{"location": "Bos'


def test_tool_arguments_nested_too_deep_to_decode_are_malformed_not_a_crash() -> None:
    """Arguments nested 100,000 deep (json.loads raises RecursionError) parse as ``{}`` with the raw text kept,
    like any other malformed arguments; the loop then answers the call with its schema error."""
    deep = '{"a":' * 100_000 + "1" + "}" * 100_000
    reply = body("openai_compat", "openai_chat_tool_call")
    reply["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = deep
    result = OpenAICompatProvider(httpx.AsyncClient(), base_url=LOCAL).parse(reply, latency_ms=0)
    assert result.tool_calls[0].arguments == {} and result.tool_calls[0].raw_arguments == deep


def test_reasoning_content_becomes_thinking() -> None:
    reply = body("openai_compat", "llamacpp_chat_repeat")
    reply["choices"][0]["message"]["reasoning_content"] = "let me think"
    assert OpenAICompatProvider(httpx.AsyncClient(), base_url=LOCAL).parse(reply, latency_ms=0).thinking == (
        "let me think"
    )


# ---------------------------------------------------------------- over-length


@pytest.mark.parametrize(
    ("name", "prompt", "limit"),
    [
        ("llamacpp_overflow", 1521, 1024),
        ("openai_overflow", 130541, 128000),
        ("openai_overflow_with_completion", 3120, 4097),
        ("vllm_overflow", 2000, 2048),
    ],
)
async def test_overflow_bodies_become_context_overflow_with_sizes(name: str, prompt: int, limit: int) -> None:
    wire = Wire((400, body("openai_compat", name)))
    async with wire.client() as client:
        with pytest.raises(ContextOverflow) as info:
            await OpenAICompatProvider(client, base_url=LOCAL).complete(CONVERSATION)
    assert len(wire.requests) == 1  # never retried: the same prompt would fail again
    assert (info.value.prompt_tokens, info.value.limit_tokens, info.value.status) == (prompt, limit, 400)
    assert f"({prompt} prompt tokens > {limit} limit)" in str(info.value)


async def test_other_400_is_a_request_error_not_an_overflow() -> None:
    wire = Wire((400, {"error": {"message": "'messages' is required", "type": "invalid_request_error"}}))
    async with wire.client() as client:
        with pytest.raises(ProviderRequestError) as info:
            await OpenAICompatProvider(client, base_url=LOCAL).complete(CONVERSATION)
    assert not isinstance(info.value, ContextOverflow) and "'messages' is required" in str(info.value)


# ---------------------------------------------------------------- complete() and the metadata rung


async def test_complete_posts_the_rendered_body_to_chat_completions() -> None:
    wire = Wire((200, body("openai_compat", "openai_chat_tool_call")))
    async with wire.client() as client:
        provider = OpenAICompatProvider(client, base_url=LOCAL, api_key="k")
        result = await provider.complete(CONVERSATION)
    sent = wire.requests[0]
    assert str(sent.url) == "http://127.0.0.1:8080/v1/chat/completions" and sent.method == "POST"
    assert sent.headers["authorization"] == "Bearer k"
    assert wire.sent() == provider.render(CONVERSATION)
    assert result.tool_calls[0].name == "get_current_weather" and result.latency_ms > 0


async def test_llamacpp_model_context_from_props() -> None:
    wire = Wire(
        (200, body("openai_compat", "llamacpp_props")), (200, body("openai_compat", "llamacpp_models"))
    )
    async with wire.client() as client:
        ctx = await OpenAICompatProvider(client, base_url=LOCAL).model_context(
            "SmolLM2-135M-Instruct.Q4_1.gguf"
        )
    assert [str(r.url) for r in wire.requests] == [
        "http://127.0.0.1:8080/props",
        "http://127.0.0.1:8080/v1/models",
    ]
    assert ctx.declared_window == 1024 and ctx.source == "/props default_generation_settings.n_ctx"
    assert ctx.detail["meta_n_ctx_train"] == 8192 and ctx.detail["meta_n_ctx"] == 1024


async def test_model_context_falls_back_to_models_meta() -> None:
    wire = Wire(
        (404, {"error": {"message": "Not Found"}}), (200, body("openai_compat", "llamacpp_models_old"))
    )
    async with wire.client() as client:
        ctx = await OpenAICompatProvider(client, base_url=LOCAL).model_context("model.gguf")
    assert ctx.declared_window == 8192 and "n_ctx_train" in ctx.source


async def test_model_context_of_a_server_that_publishes_none_says_so() -> None:
    wire = Wire((404, {"error": {"message": "Not Found"}}), (200, body("openai_compat", "openai_models")))
    async with wire.client() as client:
        ctx = await OpenAICompatProvider(client, base_url=LOCAL).model_context("gpt-4o-mini")
    assert ctx.declared_window is None and ctx.source.startswith("none:")


async def test_openai_model_context_is_none_said_plainly_without_a_request() -> None:
    wire = Wire()
    async with wire.client() as client:
        ctx = await OpenAIChatProvider(client, api_key="k").model_context("gpt-4o")
    assert wire.requests == []
    assert ctx.declared_window is None and "OpenAI publishes no context length" in ctx.source


# ---------------------------------------------------------------- OpenRouter


def test_openrouter_renders_session_id_alongside_prompt_cache_key_and_no_middle_out() -> None:
    sent = OpenRouterProvider(httpx.AsyncClient()).render(CONVERSATION)
    assert sent["prompt_cache_key"] == "sess-42" and sent["session_id"] == "sess-42"
    assert sent["transforms"] == []
    assert sent["messages"][0] == {"role": "system", "content": "You are terse."}


def test_openrouter_usage_with_cache_writes_and_reasoning() -> None:
    result = OpenRouterProvider(httpx.AsyncClient()).parse(body("openrouter", "chat"), latency_ms=3.0)
    usage = result.usage
    assert (usage.input_tokens, usage.cache_read_tokens, usage.cache_write_tokens) == (1000, 6000, 3000)
    assert usage.prompt_tokens == 10000 and usage.output_tokens == 120 and usage.reasoning_tokens == 40
    assert result.thinking == "The user asks a simple question." and result.text == "The answer is 42."
    assert result.provider == "openrouter"


async def test_openrouter_model_context_from_catalogue() -> None:
    wire = Wire((200, body("openrouter", "models")), (200, body("openrouter", "models")))
    async with wire.client() as client:
        provider = OpenRouterProvider(client, api_key="k")
        ctx = await provider.model_context("anthropic/claude-sonnet-4")
        missing = await provider.model_context("nobody/nothing")
    assert str(wire.requests[0].url) == "https://openrouter.ai/api/v1/models"
    assert (ctx.declared_window, ctx.output_limit) == (200000, 64000)
    assert "context_length" in ctx.source
    assert missing.declared_window is None and "not in OpenRouter's /models" in missing.source


async def test_openrouter_overflow_and_payment_errors() -> None:
    wire = Wire((400, body("openrouter", "overflow")), (402, body("openrouter", "no_credits")))
    async with wire.client() as client:
        provider = OpenRouterProvider(client, api_key="k")
        with pytest.raises(ContextOverflow) as over:
            await provider.complete(CONVERSATION)
        with pytest.raises(ProviderRequestError, match="Insufficient credits") as paid:
            await provider.complete(CONVERSATION)
    assert (over.value.prompt_tokens, over.value.limit_tokens) == (140123, 128000)
    assert paid.value.status == 402


# ---------------------------------------------------------------- Bedrock


async def test_bedrock_url_from_region_bearer_key_and_openai_body() -> None:
    wire = Wire((200, body("openai_compat", "openai_chat_tool_call")))
    async with wire.client() as client:
        provider = BedrockProvider(client, region="us-west-2", api_key="bedrock-key")
        result = await provider.complete(CONVERSATION)
    sent = wire.requests[0]
    assert str(sent.url) == "https://bedrock-runtime.us-west-2.amazonaws.com/openai/v1/chat/completions"
    assert sent.headers["authorization"] == "Bearer bedrock-key"
    assert (
        wire.sent()["messages"]
        == OpenAICompatProvider(client, base_url=LOCAL).render(CONVERSATION)["messages"]
    )
    assert result.provider == "bedrock" and result.usage.cache_read_tokens == 1920


async def test_bedrock_overflow_message_and_no_published_window() -> None:
    wire = Wire(
        (
            400,
            {"error": {"message": "Input is too long for requested model.", "type": "invalid_request_error"}},
        )
    )
    async with wire.client() as client:
        provider = BedrockProvider(client, region="eu-central-1", api_key="k")
        with pytest.raises(ContextOverflow):
            await provider.complete(CONVERSATION)
        ctx = await provider.model_context("openai.gpt-oss-20b-1:0")
    assert ctx.declared_window is None and ctx.source.startswith("none:")


def test_bedrock_needs_a_real_region() -> None:
    with pytest.raises(InvalidInput, match="AWS region"):
        BedrockProvider(httpx.AsyncClient(), region="mars")
    with pytest.raises(InvalidInput, match="region="):
        BedrockProvider(httpx.AsyncClient())


# ---------------------------------------------------------------- OpenAI Responses


def test_responses_render_input_items_in_order() -> None:
    sent = OpenAIResponsesProvider(httpx.AsyncClient()).render(CONVERSATION)
    assert sent["instructions"] == "You are terse."
    assert sent["input"] == [
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "Weather in Boston?"},
                {"type": "input_image", "image_url": "https://example.com/map.png"},
            ],
        },
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "get_weather",
            "arguments": '{"location": "Boston"}',
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "12C, rain"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "And tomorrow?"}]},
    ]
    assert sent["tools"] == [
        {
            "type": "function",
            "name": "get_weather",
            "description": "Weather for a place.",
            "parameters": SCHEMA,
        }
    ]
    assert (
        sent["max_output_tokens"] == 64 and sent["prompt_cache_key"] == "sess-42" and sent["store"] is False
    )


def test_responses_parse_text_reasoning_summary_call_and_usage() -> None:
    result = OpenAIResponsesProvider(httpx.AsyncClient()).parse(
        body("openai_responses", "response"), latency_ms=2
    )
    assert result.text == "Let me look that up."
    assert result.thinking.startswith("**Checking the weather**")
    (call,) = result.tool_calls
    assert (call.id, call.name, call.arguments) == (
        "call_12345xyz",
        "get_weather",
        {"location": "Boston, MA"},
    )
    usage = result.usage
    assert (usage.input_tokens, usage.cache_read_tokens, usage.output_tokens, usage.reasoning_tokens) == (
        952,
        2048,
        300,
        256,
    )
    assert result.stop_reason == "completed" and result.model == "o4-mini-2025-04-16"
    incomplete = OpenAIResponsesProvider(httpx.AsyncClient()).parse(
        body("openai_responses", "incomplete"), latency_ms=0
    )
    assert incomplete.stop_reason == "max_output_tokens"


async def test_responses_complete_overflow_and_model_context() -> None:
    wire = Wire((200, body("openai_responses", "response")), (400, body("openai_responses", "overflow")))
    async with wire.client() as client:
        provider = OpenAIResponsesProvider(client, api_key="k")
        await provider.complete(CONVERSATION)
        with pytest.raises(ContextOverflow) as info:
            await provider.complete(CONVERSATION)
        ctx = await provider.model_context("gpt-4.1")
    assert str(wire.requests[0].url) == "https://api.openai.com/v1/responses"
    assert json.loads(wire.requests[0].content)["input"][0]["role"] == "user"
    assert info.value.prompt_tokens is None  # OpenAI's newer message carries no numbers
    assert ctx.declared_window is None and "publishes no context length" in ctx.source
    assert len(wire.requests) == 2  # model_context asked nothing
