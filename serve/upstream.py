"""Sending each request a turn renders to the upstream model: the auth headers its wire's adapter sends
(``providers/registry.request_headers``; the key from the environment as the adapter reads it, or the
bundled model's per-run key, held in memory only), and the usage its reply bills, read the same way per wire.

A streamed client request streams its upstream requests too where the wire is OpenAI chat completions
(``STREAMED_WIRES``: ``openai-compat``, which ``local:`` models use, ``openai`` and ``openrouter``): posted
with ``"stream": true, "stream_options": {"include_usage": true}``, read as server-sent events, each
delta handed on as it arrives and the chunks assembled (``providers/streaming.StreamAssembler``) into the
body a plain reply would have had, which the turn parses as usual (the same receipt). Other wires
(Anthropic, Gemini, Responses, Ollama's native chat, Bedrock) are sent plain, their text one delta per step.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from vak_context.engine.api import ModelRequest
from vak_context.errors import ProviderRequestError
from vak_context.providers.redaction import Redactor
from vak_context.providers.registry import request_headers
from vak_context.providers.streaming import StreamAssembler
from vak_context.serve.protocol import Usage

STREAMED_WIRES = frozenset({"openai-compat", "openai", "openrouter"})


@dataclass(frozen=True)
class UpstreamReply:
    status: int
    body: Any  # the decoded JSON, or the text of a body that is not JSON
    usage: Usage


class UpstreamClient:
    """Posts rendered requests with this server's own client and the upstream's auth headers."""

    def __init__(self, client: httpx.AsyncClient, api_key: str | None) -> None:
        self._client, self._key = client, api_key
        self.redactor = Redactor(api_key)  # scrubs the key out of text shown while it streams
        self._auth: dict[tuple[str, str], dict[str, str]] = {}  # the adapter's headers, per wire and base URL

    def _headers(self, request: ModelRequest) -> dict[str, str]:
        """The request's own headers over its adapter's auth and version headers (``providers/registry.py``)."""
        base = request.url.removesuffix(request.path)
        auth = self._auth.get((request.wire, base))
        if auth is None:
            auth = self._auth[(request.wire, base)] = request_headers(request.wire, self._client, base, self._key)
        return auth | dict(request.headers)

    async def send(self, request: ModelRequest) -> UpstreamReply:
        response = await self._client.post(request.url, json=request.body, headers=self._headers(request))
        return _whole(response)

    async def stream(self, request: ModelRequest, on_delta: Callable[[str, bool], None]) -> UpstreamReply:
        """``request`` streamed (on a wire of ``STREAMED_WIRES``; others are sent plain, their text handed
        on whole): ``on_delta(text, calling)`` for each chunk (``calling``: a tool-call delta came by
        now); the reply as a plain one would have been. An error status, or a server that answers plain
        JSON, is read whole."""
        if request.wire not in STREAMED_WIRES:
            return await self.send(request)
        body = {**request.body, "stream": True, "stream_options": {"include_usage": True}}
        assembled = StreamAssembler(request.wire)
        async with self._client.stream("POST", request.url, json=body, headers=self._headers(request)) as response:
            if not response.is_success or "text/event-stream" not in response.headers.get("content-type", ""):
                await response.aread()
                return _whole(response)
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue  # comments, event names and keep-alives
                text = assembled.feed(line[5:].strip())
                on_delta(text, bool(assembled.calls))
                if assembled.done:
                    break
        if not (assembled.done or assembled.finish):
            raise ProviderRequestError(f"{request.wire}: the upstream's stream ended before its last chunk; the "
                                       "client may retry the request", provider="upstream")
        reply = assembled.body()
        return UpstreamReply(200, reply, usage_of(reply))


def _whole(response: httpx.Response) -> UpstreamReply:
    try:
        body: Any = response.json()
    except ValueError:
        body = response.text
    return UpstreamReply(response.status_code, body, usage_of(body) if response.is_success else Usage())


def usage_of(body: Any) -> Usage:
    """What one upstream reply billed, from its wire's usage object (OpenAI chat or Responses, Anthropic,
    Gemini): prompt tokens (cached ones included), completion tokens, cached prompt tokens."""
    if not isinstance(body, Mapping):
        return Usage()
    u = body.get("usage") or {}
    if "prompt_tokens" in u:  # OpenAI chat completions and compatible servers
        cached = (u.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
        return Usage(int(u["prompt_tokens"]), int(u.get("completion_tokens") or 0), int(cached))
    if "input_tokens" in u and "output_tokens" in u and "cache_read_input_tokens" in u:  # Anthropic
        cached = int(u.get("cache_read_input_tokens") or 0)
        return Usage(int(u["input_tokens"]) + cached + int(u.get("cache_creation_input_tokens") or 0),
                     int(u["output_tokens"]), cached)
    if "input_tokens" in u:  # OpenAI Responses
        cached = (u.get("input_tokens_details") or {}).get("cached_tokens") or 0
        return Usage(int(u["input_tokens"]), int(u.get("output_tokens") or 0), int(cached))
    g = body.get("usageMetadata") or {}
    return Usage(int(g.get("promptTokenCount") or 0), int(g.get("candidatesTokenCount") or 0),
                 int(g.get("cachedContentTokenCount") or 0))
