"""What every adapter shares: backoff, Retry-After, error mapping, key hygiene, image loading."""

from __future__ import annotations

import base64
import random
import socket
from datetime import UTC, datetime
from email.utils import format_datetime
from pathlib import Path

import httpx
import pytest

from tests.fakes.provider_bodies.wire import Wire, body, fast_retry
from vak_context.context.request.messages import (
    ChatRequest,
    Message,
    ToolSpec,
)
from vak_context.errors import ContextOverflow, InvalidInput, ProviderRequestError, RetryableProviderError
from vak_context.events.blocks import ImageBlock, TextBlock, ToolResultBlock, ToolUseBlock
from vak_context.providers.anthropic import AnthropicProvider
from vak_context.providers.base import RetryPolicy, load_images, parse_retry_after
from vak_context.providers.bedrock import BedrockProvider
from vak_context.providers.gemini import GeminiProvider
from vak_context.providers.ollama import OllamaProvider
from vak_context.providers.openai_compat import OpenAIChatProvider, OpenAICompatProvider
from vak_context.providers.openai_responses import OpenAIResponsesProvider
from vak_context.providers.openrouter import OpenRouterProvider

KEY = "sk-test-SECRET-0123456789"
LOCAL = "http://127.0.0.1:8080/v1"
REQUEST = ChatRequest(model="m", system="sys", messages=(Message.user("hello"),), max_tokens=16)


# ---------------------------------------------------------------- RetryPolicy


def test_backoff_doubles_and_is_capped_with_bounded_jitter() -> None:
    policy = RetryPolicy(attempts=10, base_delay_s=0.5, max_delay_s=4.0, jitter=0.2, rng=random.Random(1))
    for attempt, nominal in enumerate([0.5, 1.0, 2.0, 4.0, 4.0, 4.0]):
        wait = policy.delay(attempt)
        assert wait is not None and nominal * 0.8 <= wait <= nominal * 1.2


def test_no_jitter_gives_exact_backoff_and_none_after_last_attempt() -> None:
    policy = RetryPolicy(attempts=3, base_delay_s=0.5, jitter=0.0)
    assert [policy.delay(0), policy.delay(1), policy.delay(2)] == [0.5, 1.0, None]


def test_retry_after_replaces_backoff_and_too_long_a_wait_is_not_retried() -> None:
    policy = RetryPolicy(attempts=3, max_retry_after_s=30.0)
    assert policy.delay(0, retry_after=12.0) == 12.0
    assert policy.delay(0, retry_after=31.0) is None


@pytest.mark.parametrize("kwargs", [{"attempts": 0}, {"jitter": 1.5}])
def test_bad_policy_is_a_clear_error(kwargs: dict[str, float]) -> None:
    with pytest.raises(InvalidInput, match="RetryPolicy"):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


def test_parse_retry_after_forms() -> None:
    assert parse_retry_after({"retry-after": "7"}) == 7.0
    assert parse_retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    now = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    date = format_datetime(datetime(2026, 1, 1, 12, 0, 30, tzinfo=UTC), usegmt=True)
    assert parse_retry_after({"retry-after": date}, now=now.timestamp()) == 30.0
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None


# ---------------------------------------------------------------- retries through complete()


async def test_429_with_retry_after_is_retried_then_raises_retryable() -> None:
    limited = (429, body("openai_compat", "openai_rate_limit"), {"Retry-After": "2"})
    wire = Wire(limited, limited, limited)
    retry, sleeps = fast_retry(attempts=3)
    async with wire.client() as client:
        provider = OpenAICompatProvider(client, base_url=LOCAL, retry=retry)
        with pytest.raises(RetryableProviderError) as info:
            await provider.complete(REQUEST)
    assert len(wire.requests) == 3
    assert sleeps.waits == [2.0, 2.0]
    assert info.value.status == 429 and info.value.retry_after == 2.0
    assert "Rate limit reached" in str(info.value)


async def test_500_is_retried_with_backoff_then_succeeds() -> None:
    wire = Wire((500, {"error": {"message": "boom"}}), (200, body("openai_compat", "llamacpp_chat_repeat")))
    retry, sleeps = fast_retry(attempts=3, base_delay_s=0.5, jitter=0.2)
    async with wire.client() as client:
        result = await OpenAICompatProvider(client, base_url=LOCAL, retry=retry).complete(REQUEST)
    assert len(wire.requests) == 2
    assert len(sleeps.waits) == 1 and 0.4 <= sleeps.waits[0] <= 0.6
    assert result.text == "I'm here to help with any kind"


async def test_read_timeout_is_retried_and_the_last_one_propagates_typed() -> None:
    timeouts = [httpx.ReadTimeout("slow") for _ in range(3)]
    wire = Wire(*timeouts)
    retry, sleeps = fast_retry(attempts=3)
    async with wire.client() as client:
        provider = OpenAICompatProvider(client, base_url=LOCAL, retry=retry, timeout_s=5)
        with pytest.raises(RetryableProviderError, match="ReadTimeout after 5s") as info:
            await provider.complete(REQUEST)
    assert len(wire.requests) == 3 and len(sleeps.waits) == 2
    assert isinstance(info.value.__cause__, httpx.ReadTimeout)


async def test_timeout_then_success() -> None:
    wire = Wire(httpx.ReadTimeout("slow"), (200, body("openai_compat", "llamacpp_chat_repeat")))
    retry, _ = fast_retry()
    async with wire.client() as client:
        result = await OpenAICompatProvider(client, base_url=LOCAL, retry=retry).complete(REQUEST)
    assert result.usage.cache_read_tokens == 21


async def test_connection_refused_names_the_server() -> None:
    wire = Wire(httpx.ConnectError("refused"))
    retry, _ = fast_retry(attempts=1)
    async with wire.client() as client:
        with pytest.raises(RetryableProviderError, match=r"127\.0\.0\.1:8080/v1 is running"):
            await OpenAICompatProvider(client, base_url=LOCAL, retry=retry).complete(REQUEST)


async def test_5xx_html_from_a_proxy_is_still_retryable() -> None:
    wire = Wire((502, "<html>Bad gateway</html>"), (502, "<html>Bad gateway</html>"))
    retry, _ = fast_retry(attempts=2)
    async with wire.client() as client:
        with pytest.raises(RetryableProviderError, match="Bad gateway"):
            await OpenAICompatProvider(client, base_url=LOCAL, retry=retry).complete(REQUEST)


async def test_200_that_is_not_json_is_a_request_error() -> None:
    wire = Wire((200, "<html>login page</html>"))
    async with wire.client() as client:
        with pytest.raises(ProviderRequestError, match="not JSON"):
            await OpenAICompatProvider(client, base_url=LOCAL).complete(REQUEST)


async def test_401_is_not_retried_and_says_what_to_do() -> None:
    wire = Wire((401, body("openai_compat", "openai_bad_key")))
    retry, sleeps = fast_retry()
    async with wire.client() as client:
        provider = OpenAIChatProvider(client, api_key=KEY, retry=retry)
        with pytest.raises(ProviderRequestError) as info:
            await provider.complete(REQUEST)
    assert len(wire.requests) == 1 and sleeps.waits == []
    text = str(info.value)
    assert info.value.status == 401 and "Next step: check OPENAI_API_KEY" in text
    assert KEY not in text and "[redacted]" in text  # the body echoed the key back; it is scrubbed


async def test_404_points_at_model_name_and_base_url() -> None:
    wire = Wire((404, body("openai_compat", "openai_model_not_found")))
    async with wire.client() as client:
        with pytest.raises(ProviderRequestError, match="check the model name and base_url"):
            await OpenAICompatProvider(client, base_url=LOCAL).complete(REQUEST)


async def test_413_is_an_overflow_without_sizes() -> None:
    wire = Wire((413, {"error": {"message": "Request Entity Too Large"}}))
    async with wire.client() as client:
        with pytest.raises(ContextOverflow) as info:
            await OpenAICompatProvider(client, base_url=LOCAL).complete(REQUEST)
    assert info.value.status == 413 and info.value.prompt_tokens is None


# ---------------------------------------------------------------- API keys stay in headers

RICH = ChatRequest(
    model="m",
    system="sys",
    tools=(ToolSpec(name="probe_ack", description="ack"),),
    messages=(
        Message.user("hi"),
        Message(role="assistant", content=(ToolUseBlock(id="c1", name="probe_ack", input={"a": 1}),)),
        Message(role="user", content=(ToolResultBlock(tool_use_id="c1", content="ok"),)),
    ),
)


@pytest.mark.parametrize(
    ("cls", "header", "kwargs"),
    [
        (OpenAICompatProvider, "authorization", {"base_url": LOCAL}),
        (OpenAIChatProvider, "authorization", {}),
        (OpenAIResponsesProvider, "authorization", {}),
        (OpenRouterProvider, "authorization", {}),
        (BedrockProvider, "authorization", {"region": "us-west-2"}),
        (AnthropicProvider, "x-api-key", {}),
        (GeminiProvider, "x-goog-api-key", {"base_url": "https://generativelanguage.googleapis.com/v1beta"}),
        (OllamaProvider, "authorization", {}),
    ],
)
async def test_key_goes_in_headers_only(cls: type, header: str, kwargs: dict[str, str]) -> None:
    # The provider echoes the key back in its reply; neither the result nor any text may carry it.
    def echo(request: httpx.Request) -> httpx.Response:
        return httpx.Response(401, json={"error": {"message": f"bad key {KEY}"}})

    wire = Wire(echo)
    retry, _ = fast_retry(attempts=1)
    async with wire.client() as client:
        provider = cls(client, api_key=KEY, retry=retry, **kwargs)
        assert KEY not in repr(provider)
        assert KEY not in str(provider.render(RICH))
        with pytest.raises(ProviderRequestError) as info:
            await provider.complete(RICH)
    sent = wire.requests[0]
    assert KEY in sent.headers[header]
    assert KEY not in str(sent.url) and KEY not in sent.content.decode()
    assert KEY not in str(info.value) and KEY not in repr(info.value.args)


async def test_key_echoed_in_a_successful_body_is_redacted_from_raw() -> None:
    reply = body("openai_compat", "llamacpp_chat_repeat")
    reply["choices"][0]["message"]["content"] = f"your key is {KEY}"
    wire = Wire((200, reply))
    async with wire.client() as client:
        result = await OpenAICompatProvider(client, base_url=LOCAL, api_key=KEY).complete(REQUEST)
    assert KEY not in result.model_dump_json()
    assert result.text == "your key is [redacted]"


def test_base_url_must_be_http() -> None:
    with pytest.raises(InvalidInput, match="http"):
        OpenAICompatProvider(httpx.AsyncClient(), base_url="127.0.0.1:8080")


# ---------------------------------------------------------------- images


def test_load_images_turns_paths_into_data_urls(tmp_path: Path) -> None:
    png = tmp_path / "dot.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\nfake")
    request = ChatRequest(
        model="m",
        messages=(
            Message(role="user", content=(TextBlock(text="see"), ImageBlock(ref=str(png)))),
            Message(role="user", content=(ImageBlock(ref="https://example.com/a.png"),)),
        ),
    )
    loaded = load_images(request)
    first = loaded.messages[0].content[1]
    assert isinstance(first, ImageBlock)
    assert first.ref == "data:image/png;base64," + base64.b64encode(png.read_bytes()).decode()
    assert loaded.messages[1].content[0] == ImageBlock(ref="https://example.com/a.png")


def test_render_refuses_a_bare_path_and_a_missing_file_is_clear(tmp_path: Path) -> None:
    request = ChatRequest(
        model="m", messages=(Message(role="user", content=(ImageBlock(ref="/no/such.png"),)),)
    )
    provider = AnthropicProvider(httpx.AsyncClient())
    with pytest.raises(InvalidInput, match="render\\(\\) cannot read"):
        provider.render(request)
    with pytest.raises(InvalidInput, match="cannot read image"):
        load_images(request)


async def test_a_real_closed_port_is_retried_then_raises_retryable() -> None:
    # A port that was free a moment ago: nothing listens, so the connect is refused for real.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    retry, sleeps = fast_retry(attempts=2)
    async with httpx.AsyncClient(trust_env=False) as client:
        provider = OpenAICompatProvider(client, base_url=f"http://127.0.0.1:{port}/v1", retry=retry)
        with pytest.raises(RetryableProviderError, match="connection failed") as info:
            await provider.complete(REQUEST)
    assert len(sleeps.waits) == 1 and isinstance(info.value.__cause__, httpx.ConnectError)
