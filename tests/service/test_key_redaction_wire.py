"""A canary key over a real loopback socket: httpcore logs every response header at DEBUG, and a key the
server echoes in one is not among what it logs (every adapter over httpx.MockTransport:
tests/unit/test_key_redaction.py)."""

from __future__ import annotations

import json
import logging

import httpx
import pytest

from tests.fakes.canary import CANARY, reveals
from tests.fakes.httpserver import serve
from tests.fakes.provider_bodies.wire import fast_retry
from vak_context.context.request.messages import ChatRequest, Message
from vak_context.providers.registry import make_provider

REQUEST = ChatRequest(model="m", system="sys", messages=(Message.user("hello"),), max_tokens=16)

# A chat completion with a tool call, in the documented shape.
CHAT = {
    "id": "chatcmpl-1", "object": "chat.completion", "model": "m",
    "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": "echo hidden end", "reasoning_content": "fine",
        "tool_calls": [{"id": "call_1", "type": "function",
                        "function": {"name": "get_weather", "arguments": json.dumps({"city": "Oslo"})}}]}}],
    "usage": {"prompt_tokens": 10, "completion_tokens": 2},
}


def _echo_key(request: httpx.Request) -> httpx.Response:
    """Answers every POST with a chat completion and the caller's bearer key echoed in a header."""
    key = request.headers.get("authorization", "").removeprefix("Bearer ")
    return httpx.Response(200, headers={"content-type": "application/json", "x-echo-key": key},
                          content=json.dumps(CHAT).encode())


async def test_key_echoed_in_a_header_stays_out_of_httpcore_debug_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Over a real loopback socket httpcore logs every response header at DEBUG; the key is not among them."""
    with serve(_echo_key) as server:
        caplog.set_level(logging.DEBUG)
        async with httpx.AsyncClient() as client:
            retry, _ = fast_retry(attempts=1)
            provider = make_provider(
                "openai-compat:m", client, api_key=CANARY, base_url=server.base_url, retry=retry
            )
            result = await provider.provider.complete(REQUEST)
    assert result.tool_calls[0].name == "get_weather"
    header_records = [r for r in caplog.records if "receive_response_headers.complete" in r.getMessage()]
    assert header_records, "httpcore logged no response headers: the test checks nothing"
    assert "x-echo-key" in header_records[0].getMessage()
    assert not [r.name for r in caplog.records if reveals(r.getMessage())]
