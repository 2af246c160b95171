"""The plain and the streaming path of the OpenAI-compatible adapter translate the same failure into the same
typed error with the same message: both go through ``providers/httperrors.py``. Fakes: ``httpx.MockTransport``
handlers that answer (or fail) the same way whichever path asks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from vak_context.context.request.messages import ChatRequest, Message
from vak_context.errors import ContextOverflow, ProviderError, ProviderRequestError, RetryableProviderError
from vak_context.providers.base import RetryPolicy
from vak_context.providers.openai_compat import OpenAICompatProvider

KEY = "sk-live-0123456789abcdefERRPATH"
REQUEST = ChatRequest(model="m", messages=(Message.user("hi"),), max_tokens=16)
Handler = Callable[[httpx.Request], httpx.Response]


def answer(status: int, content: bytes, headers: dict[str, str] | None = None) -> Handler:
    return lambda request: httpx.Response(status, content=content, headers=headers or {})


def fail(exc_type: type[httpx.TransportError]) -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        raise exc_type("the fake transport failed", request=request)
    return handler


FAILURES: dict[str, tuple[Handler, type[ProviderError], int | None]] = {
    "429 with retry-after": (answer(429, b'{"error": {"message": "slow down"}}', {"retry-after": "7"}),
                             RetryableProviderError, 429),
    "503 whose body is not JSON": (answer(503, b"<html>Service Unavailable</html>"), RetryableProviderError, 503),
    "502 whose body is not UTF-8": (answer(502, b"bad \xff\xfe bytes"), RetryableProviderError, 502),
    "400 over the window": (answer(400, b'{"error": {"type": "exceed_context_size_error", "message": "too long",'
                                        b' "n_prompt_tokens": 9000, "n_ctx": 8192}}'), ContextOverflow, 400),
    "401 echoing the key": (answer(401, b'{"error": {"message": "Incorrect API key provided: ' + KEY.encode()
                                        + b'"}}'), ProviderRequestError, 401),
    "403": (answer(403, b'{"error": {"message": "forbidden"}}'), ProviderRequestError, 403),
    "404": (answer(404, b'{"error": "no such model"}'), ProviderRequestError, 404),
    "408": (answer(408, b""), RetryableProviderError, 408),
    "413": (answer(413, b"request entity too large"), ContextOverflow, 413),
    "timeout": (fail(httpx.ReadTimeout), RetryableProviderError, None),
    "connection refused": (fail(httpx.ConnectError), RetryableProviderError, None),
    "unsupported protocol": (fail(httpx.UnsupportedProtocol), ProviderRequestError, None),
}


async def _no_wait(_seconds: float) -> None:
    return None


async def error_of(handler: Handler, *, streaming: bool) -> ProviderError:
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        provider = OpenAICompatProvider(client, base_url="http://127.0.0.1:9/v1", api_key=KEY,
                                        retry=RetryPolicy(attempts=1, sleep=_no_wait))
        with pytest.raises(ProviderError) as info:
            if streaming:
                await provider.complete_streaming(REQUEST, lambda _text: None)
            else:
                await provider.complete(REQUEST)
    return info.value


@pytest.mark.parametrize("failure", list(FAILURES))
async def test_the_plain_and_the_streaming_path_raise_the_same_typed_error(failure: str) -> None:
    """The same failure gives the same error type, message, status and retry_after on both paths, of the
    type the status calls for, with the key scrubbed from the message."""
    handler, expected_type, status = FAILURES[failure]
    plain = await error_of(handler, streaming=False)
    streamed = await error_of(handler, streaming=True)
    assert type(plain) is type(streamed) is expected_type
    assert str(plain) == str(streamed)
    assert plain.status == streamed.status == status
    assert getattr(plain, "retry_after", None) == getattr(streamed, "retry_after", None)
    assert KEY not in str(plain)


async def test_a_retry_after_header_reaches_the_error_on_both_paths() -> None:
    """A 429's ``retry-after: 7`` is the error's retry_after and is said in its message, streamed or not."""
    handler = FAILURES["429 with retry-after"][0]
    for streaming in (False, True):
        error = await error_of(handler, streaming=streaming)
        assert isinstance(error, RetryableProviderError) and error.retry_after == 7.0
        assert "asked to wait 7s" in str(error)


@pytest.mark.parametrize("failure", ["timeout", "connection refused", "unsupported protocol"])
async def test_a_transport_failure_is_raised_from_the_httpx_error_on_both_paths(failure: str) -> None:
    """A transport failure's typed error keeps the httpx exception as its cause (``raise ... from exc``)."""
    for streaming in (False, True):
        error: Any = await error_of(FAILURES[failure][0], streaming=streaming)
        assert isinstance(error.__cause__, httpx.TransportError)
        assert "POST /chat/completions" in str(error)


# Bodies that are JSON objects but not the documented shape: a field of the wrong type where the adapter
# looks inside it (a string for a list, null for an object, a list of non-objects).
MISSHAPEN = [
    {"choices": [{"message": {"role": "assistant", "tool_calls": "oops"}}]},
    {"choices": [{"message": {"role": "assistant", "tool_calls": [None, 5]}}]},
    {"choices": [None]},
    {"content": "x"},
    {"content": [None]},
    {"candidates": [{"content": "x"}]},
    {"candidates": ["x"]},
    {"message": "x"},
    {"output": ["x"]},
    {"output": [{"type": "message", "content": "x"}]},
    {"usage": "x", "choices": [], "content": [], "candidates": [], "output": []},
]


def _adapters(client: httpx.AsyncClient) -> list[Any]:
    from vak_context.providers.anthropic import AnthropicProvider
    from vak_context.providers.gemini import GeminiProvider
    from vak_context.providers.ollama import OllamaProvider
    from vak_context.providers.openai_responses import OpenAIResponsesProvider

    retry = RetryPolicy(attempts=1, sleep=_no_wait)
    base = "http://127.0.0.1:9"
    return [OpenAICompatProvider(client, base_url=f"{base}/v1", api_key=KEY, retry=retry),
            AnthropicProvider(client, base_url=base, api_key=KEY, retry=retry),
            GeminiProvider(client, base_url=base, api_key=KEY, retry=retry),
            OllamaProvider(client, base_url=base, retry=retry),
            OpenAIResponsesProvider(client, base_url=f"{base}/v1", api_key=KEY, retry=retry)]


@pytest.mark.parametrize("reply", MISSHAPEN)
async def test_a_reply_of_the_wrong_shape_is_a_typed_error_from_every_adapter(reply: dict[str, Any]) -> None:
    """Whatever an adapter finds where the API documents something else, ``complete`` either parses it or
    raises ProviderRequestError naming the shape problem and what to check: never AttributeError/TypeError."""
    async with httpx.AsyncClient(transport=httpx.MockTransport(lambda _r: httpx.Response(200, json=reply))) as client:
        for provider in _adapters(client):
            try:
                await provider.complete(REQUEST)
            except ProviderRequestError as exc:
                assert "does not have the documented shape" in str(exc) and "base_url" in str(exc)
