"""Exact counts from the hosted APIs that publish a token-count endpoint (providers/tokencount.py).

The fakes answer with the documented bodies: Anthropic ``POST /v1/messages/count_tokens`` ->
``{"input_tokens": N}`` (https://platform.claude.com/docs/en/api/messages/count_tokens), Gemini
``POST /v1beta/models/{model}:countTokens`` -> ``{"totalTokens": N}`` (https://ai.google.dev/api/tokens),
and the chat replies are the documented bodies of tests/fakes/provider_bodies. Each test checks the
request the counter sends (path, body, headers) and that the key reaches no log record.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

import httpx
import pytest

import vak_context
from tests.fakes.chat_requests import REQUEST
from tests.fakes.provider_bodies.wire import body as documented
from vak_context.context.capacity.profile import request_chars
from vak_context.context.request.messages import Message
from vak_context.providers.anthropic import AnthropicProvider
from vak_context.providers.base import RetryPolicy
from vak_context.providers.gemini import GeminiProvider
from vak_context.providers.openai_compat import OpenAIChatProvider
from vak_context.providers.tokencount import (
    AnthropicTokenCounter,
    CharRatioCounter,
    GeminiTokenCounter,
    token_counter,
)

KEY = "sk-ant-test-0123456789abcdef"
ANTHROPIC_ROOT = "http://127.0.0.1:9/v1"
GEMINI_ROOT = "http://127.0.0.1:9/v1beta"
COUNT_PATHS = ("/v1/messages/count_tokens", ":countTokens")


class FakeHostedModel:
    """A hosted API's chat endpoint and its token-count endpoint, keeping every request it was sent.

    The count is ``len(json.dumps(body)) // 4`` unless ``missing`` (then 404, as a proxy without the
    endpoint answers) or ``reply`` (the body to answer instead). The chat reply is the provider's
    documented body, text only, so a turn ends at its first step.
    """

    def __init__(self, provider: str, *, missing: bool = False, reply: Any = None) -> None:
        self.provider, self.missing, self.reply = provider, missing, reply
        self.seen: list[tuple[str, dict[str, Any], httpx.Headers]] = []
        self.counts: list[int] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        body = json.loads(request.content) if request.content else {}
        self.seen.append((path, body, request.headers))
        if path.endswith(COUNT_PATHS):
            if self.missing:
                return httpx.Response(404, json={"type": "error", "error": {"type": "not_found_error",
                                                                              "message": "Not Found"}})
            if self.reply is not None:
                return httpx.Response(200, json=self.reply)
            n = len(json.dumps(body)) // 4
            self.counts.append(n)
            return httpx.Response(200, json={"input_tokens": n} if self.provider == "anthropic" else {"totalTokens": n})
        if self.provider == "anthropic" and path == "/v1/messages":
            message = documented("anthropic", "message")
            message.update(content=[{"type": "text", "text": "Done."}], stop_reason="end_turn")
            return httpx.Response(200, json=message)
        if self.provider == "gemini" and path.endswith(":generateContent"):
            reply = documented("gemini", "generate")
            reply["candidates"][0]["content"]["parts"] = [{"text": "Done."}]
            return httpx.Response(200, json=reply)
        return httpx.Response(404, json={"error": {"message": f"no route {path}"}})

    def of(self, suffix: str) -> list[tuple[str, dict[str, Any], httpx.Headers]]:
        return [s for s in self.seen if s[0].endswith(suffix)]


def _anthropic(client: httpx.AsyncClient, base_url: str = ANTHROPIC_ROOT) -> AnthropicProvider:
    return AnthropicProvider(client, base_url=base_url, api_key=KEY, retry=RetryPolicy(attempts=1))


def _gemini(client: httpx.AsyncClient, base_url: str = GEMINI_ROOT) -> GeminiProvider:
    return GeminiProvider(client, base_url=base_url, api_key=KEY, retry=RetryPolicy(attempts=1))


def _no_key_logged(caplog: pytest.LogCaptureFixture) -> None:
    for record in caplog.records:
        assert KEY not in record.getMessage() and KEY not in str(record.args)


async def test_anthropic_counts_the_messages_body_less_its_generation_settings(
        caplog: pytest.LogCaptureFixture) -> None:
    """The body render sends for /v1/messages, less max_tokens and temperature, goes to
    /v1/messages/count_tokens with the key and version headers; the count is input_tokens."""
    fake = FakeHostedModel("anthropic")
    async with httpx.AsyncClient(transport=httpx.MockTransport(fake.handle)) as client:
        provider = _anthropic(client)
        counter = token_counter(provider, 0.25)
        assert isinstance(counter, AnthropicTokenCounter)
        with caplog.at_level(logging.DEBUG):
            n = await counter.count(REQUEST)
        rendered = provider.render(REQUEST)
    ((path, body, headers),) = fake.seen
    assert path == "/v1/messages/count_tokens"
    assert body == {k: v for k, v in rendered.items() if k not in ("max_tokens", "temperature")}
    assert set(body) == {"model", "system", "tools", "messages"}
    assert headers["x-api-key"] == KEY and headers["anthropic-version"] == "2023-06-01"
    assert n == fake.counts[0] and counter.exact is True
    assert KEY not in repr(counter)
    _no_key_logged(caplog)


async def test_gemini_counts_the_whole_generate_content_request(caplog: pytest.LogCaptureFixture) -> None:
    """models/{model}:countTokens gets {"generateContentRequest": the generateContent body with its model},
    so the system instruction and the function declarations are counted; the key goes in its header, never
    the URL; the count is totalTokens."""
    fake = FakeHostedModel("gemini")
    request = REQUEST.model_copy(update={"model": "gemini-2.5-flash"})
    async with httpx.AsyncClient(transport=httpx.MockTransport(fake.handle)) as client:
        provider = _gemini(client)
        counter = token_counter(provider, 0.25)
        assert isinstance(counter, GeminiTokenCounter)
        with caplog.at_level(logging.DEBUG):
            n = await counter.count(request)
        rendered = provider.render(request)
    ((path, body, headers),) = fake.seen
    assert path == "/v1beta/models/gemini-2.5-flash:countTokens"
    assert body == {"generateContentRequest": {"model": "models/gemini-2.5-flash", **rendered}}
    assert {"systemInstruction", "tools", "contents"} <= set(body["generateContentRequest"])
    assert headers["x-goog-api-key"] == KEY and KEY not in str(fake.seen[0][0])
    assert n == fake.counts[0] and counter.exact is True
    _no_key_logged(caplog)


@pytest.mark.parametrize("provider", ["anthropic", "gemini"])
async def test_an_api_without_the_endpoint_falls_back_to_the_estimate_said_once(
        provider: str, caplog: pytest.LogCaptureFixture) -> None:
    """A 404 (a proxy or gateway without the endpoint) switches to chars × tokens_per_char for good, with
    one warning naming the server (not the key), and the endpoint is not asked again."""
    fake = FakeHostedModel(provider, missing=True)
    notices: list[str] = []
    async with httpx.AsyncClient(transport=httpx.MockTransport(fake.handle)) as client:
        # a server of its own: the log says a fallback once per endpoint in the process
        adapter = _anthropic(client, "http://127.0.0.1:10200/v1") if provider == "anthropic" else _gemini(
            client, "http://127.0.0.1:10200/v1beta")
        counter = token_counter(adapter, 0.5, on_fallback=notices.append)
        with caplog.at_level(logging.DEBUG):
            first, second = await counter.count(REQUEST), await counter.count(REQUEST)
    assert first == second == math.ceil(request_chars(REQUEST) * 0.5)
    assert len(fake.seen) == 1 and counter.exact is False  # type: ignore[attr-defined]
    assert len(notices) == 1 and "HTTP 404" in notices[0] and "127.0.0.1:10200" in notices[0]
    assert [r.getMessage() for r in caplog.records if r.name == "vak.tokencount"] == notices
    _no_key_logged(caplog)


@pytest.mark.parametrize(("provider", "reply", "said"), [
    ("anthropic", {"tokens": 12}, '"input_tokens" integer'),
    ("anthropic", {"input_tokens": "12"}, '"input_tokens" integer'),
    ("gemini", {"totalTokens": True}, '"totalTokens" integer'),
    ("gemini", [1, 2], '"totalTokens" integer'),
    ("anthropic", 401, "HTTP 401"),
    ("gemini", 500, "HTTP 500"),
])
async def test_a_count_that_fails_falls_back_to_the_estimate(provider: str, reply: Any, said: str,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    """A reply without the documented count, a refused key or a server error on the count endpoint: the
    estimate, said once naming what failed, never the key nor a name that is not public."""
    fake = FakeHostedModel(provider, reply=None if isinstance(reply, int) else reply)
    notices: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        if isinstance(reply, int) and request.url.path.endswith(COUNT_PATHS):
            body = documented("anthropic", "auth") if reply == 401 else {"error": {"code": 500, "message": "boom"}}
            return httpx.Response(reply, json=body)
        return fake.handle(request)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handle)) as client:
        adapter = _anthropic(client) if provider == "anthropic" else _gemini(client)
        counter = token_counter(adapter, 0.5, on_fallback=notices.append)
        with caplog.at_level(logging.DEBUG):
            assert await counter.count(REQUEST) == math.ceil(request_chars(REQUEST) * 0.5)
    assert counter.exact is False  # type: ignore[attr-defined]
    [notice] = notices
    assert said in notice and KEY not in notice and "CharRatioCounter" not in notice
    _no_key_logged(caplog)


async def test_the_prefix_probes_blank_message_is_counted_as_one_the_api_accepts() -> None:
    """The assembler sizes the stable prefix with a one-space user message; Anthropic rejects text blocks
    of whitespace only, so the count body carries a one-character text there instead."""
    probe = REQUEST.model_copy(update={"messages": (Message.user(" "),)})
    fake = FakeHostedModel("anthropic")
    async with httpx.AsyncClient(transport=httpx.MockTransport(fake.handle)) as client:
        await token_counter(_anthropic(client)).count(probe)
    assert fake.seen[0][1]["messages"] == [{"role": "user", "content": [{"type": "text", "text": "."}]}]


# ---------------------------------------------------------------- through the public API


SPECS: dict[str, tuple[str, str]] = {
    "anthropic": ("anthropic:claude-sonnet-4-5", ANTHROPIC_ROOT),
    "gemini": ("gemini:gemini-2.5-flash", GEMINI_ROOT),
}


@pytest.mark.parametrize("provider", ["anthropic", "gemini"])
async def test_a_session_sizes_its_requests_with_the_providers_count(provider: str, tmp_path: Path) -> None:
    """An anthropic/gemini session through vak_context.Engine: every request it sends was counted first by
    the provider's endpoint on the very body it sends, and the step's estimate is that count."""
    spec, base_url = SPECS[provider]
    fake = FakeHostedModel(provider)
    steps: list[vak_context.Step] = []
    async with httpx.AsyncClient(transport=httpx.MockTransport(fake.handle)) as client:
        with vak_context.Engine.open(tmp_path / "ledger") as engine:
            async with engine.session("s1", model=spec, base_url=base_url, api_key=KEY, http_client=client,
                                      window=200_000, max_steps=2, on_step=steps.append) as session:
                result = await session.run("What is in the notes?")
    assert result.outcome == "completed" and result.answer == "Done." and len(steps) == 1
    chat = fake.of("/v1/messages" if provider == "anthropic" else ":generateContent")
    counted = fake.of(COUNT_PATHS[0] if provider == "anthropic" else COUNT_PATHS[1])
    assert len(chat) == 1 and len(counted) == len(fake.counts) >= 2  # the prefix, then the request
    sent = chat[0][1]
    if provider == "anthropic":
        expected = {k: v for k, v in sent.items() if k not in ("max_tokens", "temperature")}
    else:
        expected = {"generateContentRequest": {"model": "models/gemini-2.5-flash", **sent}}
    assert counted[-1][1] == expected  # the last count was of the body sent
    assert [s.estimated_tokens for s in steps] == [fake.counts[-1]]  # the step's own size: that count


async def test_the_other_hosted_apis_keep_the_estimate() -> None:
    async with httpx.AsyncClient(transport=httpx.MockTransport(FakeHostedModel("openai").handle)) as client:
        assert isinstance(token_counter(OpenAIChatProvider(client, api_key=KEY)), CharRatioCounter)
