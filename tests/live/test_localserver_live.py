"""The OpenAI-compatible adapter against the real local model: shape, usage, cache, overflow, metadata.

Never asserts what the 135M model *says* or whether it follows an instruction: only what the
server reports about the call.
"""

from __future__ import annotations

import httpx
import pytest

from vak_context.context.request.messages import ChatRequest, Message, ToolSpec
from vak_context.errors import ContextOverflow
from vak_context.events.blocks import ToolResultBlock, ToolUseBlock
from vak_context.providers.base import RetryPolicy
from vak_context.providers.local.server import LocalModelServer
from vak_context.providers.openai_compat import OpenAICompatProvider

pytestmark = pytest.mark.live

ACK = ToolSpec(
    name="probe_ack",
    description="Acknowledge. No side effects.",
    input_schema={"type": "object", "properties": {"token": {"type": "string"}}, "required": ["token"]},
)


def _provider(client: httpx.AsyncClient, server: LocalModelServer) -> OpenAICompatProvider:
    return OpenAICompatProvider(client, base_url=server.base_url, api_key=server.api_key, retry=RetryPolicy(attempts=1))


async def test_a_completion_has_the_normalized_shape_and_usage(local_model: LocalModelServer) -> None:
    request = ChatRequest(
        model="smollm2",
        system="You are terse.",
        messages=(Message.user("Name one colour."),),
        tools=(ACK,),
        max_tokens=8,
        temperature=0.0,
    )
    async with httpx.AsyncClient(trust_env=False) as client:
        result = await _provider(client, local_model).complete(request)
    assert result.stop_reason in {"stop", "length", "tool_calls"}
    assert result.usage.prompt_tokens > 20  # the system turn lists the tool schema
    assert 0 < result.usage.output_tokens <= 8
    assert result.latency_ms > 0
    # llama.cpp timings: the prompt tokens it evaluated plus the ones it reused from cache.
    assert result.timings["prompt_n"] + result.timings["cache_n"] == result.usage.prompt_tokens
    for call in result.tool_calls:  # if the model called, the server parsed it into a real tool call
        assert call.name


async def test_an_identical_repeat_reports_cached_tokens(local_model: LocalModelServer) -> None:
    text = "Here is a note about caching prompts. " * 20 + "Reply with one word."
    request = ChatRequest(model="smollm2", messages=(Message.user(text),), max_tokens=2, temperature=0.0)
    async with httpx.AsyncClient(trust_env=False) as client:
        provider = _provider(client, local_model)
        await provider.complete(request)
        second = await provider.complete(request)
    assert second.usage.prompt_tokens > 100
    # An identical repeat re-evaluates only the last prompt token.
    assert second.usage.cache_read_tokens >= second.usage.prompt_tokens - 2


async def test_a_prompt_over_n_ctx_is_context_overflow_with_sizes(local_model: LocalModelServer) -> None:
    huge = "word " * (local_model.n_ctx + 500)
    request = ChatRequest(model="smollm2", messages=(Message.user(huge),), max_tokens=1)
    async with httpx.AsyncClient(trust_env=False) as client:
        with pytest.raises(ContextOverflow) as info:
            await _provider(client, local_model).complete(request)
    assert info.value.limit_tokens == local_model.n_ctx
    assert info.value.prompt_tokens is not None and info.value.prompt_tokens > local_model.n_ctx


async def test_model_context_reads_the_served_window(local_model: LocalModelServer) -> None:
    async with httpx.AsyncClient(trust_env=False) as client:
        ctx = await _provider(client, local_model).model_context("smollm2")
    assert ctx.declared_window == local_model.n_ctx
    assert "props" in ctx.source


async def test_the_tools_template_renders_tools_calls_and_results(local_model: LocalModelServer) -> None:
    # What the server feeds the model (its own /apply-template), so no model judgement is involved.
    request = ChatRequest(
        model="smollm2",
        system="You are a probe.",
        messages=(
            Message.user("Look it up."),
            Message(role="assistant", content=(ToolUseBlock(id="c1", name="probe_ack", input={"token": "k7"}),)),
            Message(role="user", content=(ToolResultBlock(tool_use_id="c1", content="[evidence:ab12] ok"),)),
        ),
        tools=(ACK,),
    )
    async with httpx.AsyncClient(trust_env=False) as client:
        body = _provider(client, local_model).render(request)
        reply = await client.post(local_model.root_url + "/apply-template", headers=local_model.auth_headers(),
                                  json={"messages": body["messages"], "tools": body["tools"]})
    prompt = reply.json()["prompt"]
    assert prompt.startswith("<|im_start|>system\nYou are a probe.")
    assert '"name": "probe_ack"' in prompt.split("\n</tools>")[0]  # the tool list
    assert '<tool_call>\n{"name": "probe_ack", "arguments": {"token": "k7"}}\n</tool_call>' in prompt
    assert "<tool_response>\n[evidence:ab12] ok\n</tool_response>" in prompt
    assert prompt.endswith("<|im_start|>assistant\n")
