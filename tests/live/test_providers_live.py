"""The OpenAI-compatible adapter against the real local llama.cpp server (SmolLM2-135M on 127.0.0.1).

Asserts only what the server reports about each call (shape, usage, cache, sizes), never what the tiny
model says or whether it follows an instruction: that is what the capacity probe measures.
"""

from __future__ import annotations

import httpx
import pytest

from vak_context.context.request.messages import ChatRequest, Message, ToolSpec
from vak_context.errors import ContextOverflow
from vak_context.events.blocks import TextBlock, ToolResultBlock, ToolUseBlock
from vak_context.providers.base import RetryPolicy
from vak_context.providers.local.server import LocalModelServer
from vak_context.providers.openai_compat import OpenAICompatProvider
from vak_context.providers.registry import make_provider

pytestmark = pytest.mark.live

ACK = ToolSpec(
    name="probe_ack",
    description="Acknowledge. No side effects.",
    input_schema={"type": "object", "properties": {"token": {"type": "string"}}, "required": ["token"]},
)


def adapter(client: httpx.AsyncClient, server: LocalModelServer) -> OpenAICompatProvider:
    return OpenAICompatProvider(client, base_url=server.base_url, api_key=server.api_key, retry=RetryPolicy(attempts=1))


async def test_shape_usage_and_an_identical_repeat_reports_n_minus_1_cached(
    local_model: LocalModelServer,
) -> None:
    # A prompt no other test sends, so the first call is (mostly) a cache miss.
    request = ChatRequest(
        model="smollm2",
        system="You are terse.",
        messages=(Message.user("providers live check: " + "the ledger keeps every turn. " * 12),),
        max_tokens=4,
        temperature=0.0,
    )
    async with httpx.AsyncClient(trust_env=False) as client:
        provider = adapter(client, local_model)
        first = await provider.complete(request)
        second = await provider.complete(request)
    for result in (first, second):
        assert result.provider == "openai-compat" and result.model  # llama.cpp names the served file
        assert isinstance(result.text, str) and result.stop_reason in {"stop", "length"}
        assert result.usage.prompt_tokens > 0 and result.usage.output_tokens > 0
        assert result.latency_ms > 0 and result.raw["object"] == "chat.completion"
        # timings come through, and they agree with usage
        assert result.timings["cache_n"] == result.usage.cache_read_tokens
        assert result.timings["prompt_n"] == result.usage.input_tokens
    assert second.usage.prompt_tokens == first.usage.prompt_tokens
    # llama.cpp re-evaluates only the last prompt token of an identical repeat.
    assert second.usage.cache_read_tokens == second.usage.prompt_tokens - 1
    assert second.usage.input_tokens == 1


async def test_a_whole_tool_exchange_renders_into_a_request_the_server_accepts(
    local_model: LocalModelServer,
) -> None:
    request = ChatRequest(
        model="smollm2",
        system="You are a probe.",
        tools=(ACK,),
        tool_choice="auto",
        messages=(
            Message.user("Look it up."),
            Message(
                role="assistant",
                content=(
                    TextBlock(text="Calling."),
                    ToolUseBlock(id="c1", name="probe_ack", input={"token": "k7"}),
                ),
            ),
            Message(
                role="user",
                content=(
                    ToolResultBlock(tool_use_id="c1", content="[evidence:ab12] ok"),
                    TextBlock(text="Done?"),
                ),
            ),
        ),
        max_tokens=4,
        temperature=0.0,
    )
    async with httpx.AsyncClient(trust_env=False) as client:
        result = await adapter(client, local_model).complete(request)
    assert result.usage.prompt_tokens > 40  # system, tool schema, call and result all reached the prompt
    for call in result.tool_calls:  # whether the model calls is its business; a call it makes is parsed
        assert call.id and call.name


async def test_over_length_is_context_overflow_with_the_served_sizes(local_model: LocalModelServer) -> None:
    async with httpx.AsyncClient(trust_env=False) as client:
        provider, _ = make_provider("openai-compat:smollm2", client, base_url=local_model.base_url,
                                    api_key=local_model.api_key, env={})
        ctx = await provider.model_context("smollm2")
        huge = ChatRequest(
            model="smollm2", messages=(Message.user("word " * (local_model.n_ctx + 200)),), max_tokens=1
        )
        with pytest.raises(ContextOverflow) as info:
            await provider.complete(huge)
    assert ctx.declared_window == local_model.n_ctx and ctx.detail["meta_n_ctx_train"] == 8192
    assert info.value.limit_tokens == local_model.n_ctx == ctx.declared_window
    assert info.value.prompt_tokens is not None and info.value.prompt_tokens > local_model.n_ctx
    assert info.value.status == 400


async def test_a_streamed_completion_equals_the_plain_one_with_usage_and_timings(
    local_model: LocalModelServer,
) -> None:
    """On the real server, ``complete_streaming`` shows the text in more than one delta, the deltas join to
    the result's text, and the result (text, usage, llama.cpp timings) is what the plain call returns for
    the same request at temperature 0."""
    request = ChatRequest(
        model="smollm2",
        system="You are helpful.",
        messages=(Message.user("streaming live check: list three colours, one per line."),),
        max_tokens=24,
        temperature=0.0,
    )
    deltas: list[str] = []
    async with httpx.AsyncClient(trust_env=False) as client:
        provider = adapter(client, local_model)
        plain = await provider.complete(request)
        streamed = await provider.complete_streaming(request, deltas.append)
    assert len(deltas) > 1 and "".join(deltas) == streamed.text
    assert streamed.text == plain.text and streamed.stop_reason == plain.stop_reason
    assert streamed.usage.prompt_tokens == plain.usage.prompt_tokens
    assert streamed.usage.output_tokens == plain.usage.output_tokens > 0
    assert streamed.timings.get("predicted_n") == plain.timings.get("predicted_n")
