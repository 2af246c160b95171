"""The exact token count against the real llama.cpp server: the counter's count equals the prompt_tokens the
server reports for the same request (the counter's own rules: tests/unit/test_tokencount.py)."""

from __future__ import annotations

import httpx
import pytest

from tests.fakes.chat_requests import REQUEST
from vak_context.providers.base import RetryPolicy
from vak_context.providers.local.server import LocalModelServer
from vak_context.providers.openai_compat import OpenAICompatProvider
from vak_context.providers.tokencount import LlamaCppTokenCounter


@pytest.mark.live
async def test_the_count_equals_the_real_servers_prompt_tokens(local_model: LocalModelServer) -> None:
    """On the real llama.cpp server (SmolLM2, the project's tool template): the counter's count for a
    step with a tool call, its JSON result and a tool schema equals the usage.prompt_tokens the server
    reports when the same request is sent. (SmolLM2 adds no BOS of its own; the count would include one
    anyway, since /tokenize is asked to add special tokens exactly as the chat endpoint does.)"""
    async with httpx.AsyncClient(trust_env=False) as client:
        provider = OpenAICompatProvider(client, base_url=local_model.base_url, api_key=local_model.api_key,
                                        retry=RetryPolicy(attempts=1))
        counter = LlamaCppTokenCounter(provider)
        counted = await counter.count(REQUEST)
        result = await provider.complete(REQUEST)
    assert counter.exact is True
    assert counted == result.usage.prompt_tokens
