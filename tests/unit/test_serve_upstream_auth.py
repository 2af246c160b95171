"""`vak serve` posts each rendered request with the auth headers its wire's adapter sends, and reads the
upstream key from the environment variables the provider registry names (one place for both)."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from vak_context.engine.api import ModelRequest
from vak_context.providers.registry import PROVIDERS, key_from_environment
from vak_context.serve.upstream import UpstreamClient

KEY = "sk-upstream-auth-test"
CASES = [
    ("openai-compat", "http://127.0.0.1:9/v1", "/chat/completions", {"authorization": f"Bearer {KEY}"}),
    ("anthropic", "http://127.0.0.1:9/v1", "/messages", {"x-api-key": KEY, "anthropic-version": "2023-06-01"}),
    ("gemini", "http://127.0.0.1:9/v1beta", "/models/m:generateContent", {"x-goog-api-key": KEY}),
    ("bedrock", "http://127.0.0.1:9/openai/v1", "/chat/completions", {"authorization": f"Bearer {KEY}"}),
]


def _sent(wire: str, base: str, path: str, key: str | None, extra: dict[str, str] | None = None) -> httpx.Request:
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"usage": {"prompt_tokens": 3, "completion_tokens": 1}})

    async def go() -> None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handle)) as client:
            request = ModelRequest(body={"model": "m"}, url=base + path, path=path, model="m", wire=wire,
                                   headers=extra or {})
            reply = await UpstreamClient(client, key).send(request)
            assert reply.status == 200 and reply.usage.prompt == 3

    asyncio.run(go())
    return seen[0]


@pytest.mark.parametrize(("wire", "base", "path", "expected"), CASES)
def test_each_wire_is_sent_its_adapters_auth_headers(wire: str, base: str, path: str, expected: dict[str, str]) -> None:
    sent = _sent(wire, base, path, KEY)
    assert {k: sent.headers.get(k) for k in expected} == expected
    assert KEY not in str(sent.url) and KEY not in sent.content.decode()


def test_without_a_key_only_the_version_header_goes_and_the_requests_own_headers_win() -> None:
    sent = _sent("anthropic", "http://127.0.0.1:9/v1", "/messages", None, {"anthropic-beta": "b1"})
    assert "x-api-key" not in sent.headers and "authorization" not in sent.headers
    assert sent.headers["anthropic-version"] == "2023-06-01" and sent.headers["anthropic-beta"] == "b1"
    assert "authorization" not in _sent("openai", "http://127.0.0.1:9/v1", "/chat/completions", None).headers


def test_the_key_is_read_from_the_variables_the_registry_names() -> None:
    env = {"GOOGLE_API_KEY": "g-key", "AWS_BEARER_TOKEN_BEDROCK": "b-key", "OPENAI_COMPAT_API_KEY": ""}
    assert PROVIDERS["gemini"].key_env == ("GEMINI_API_KEY", "GOOGLE_API_KEY")
    assert key_from_environment("gemini:flash", env) == "g-key"
    assert key_from_environment("google:flash", env) == "g-key"  # an alias reads its provider's variables
    assert key_from_environment("bedrock:nova", env) == "b-key"
    assert key_from_environment("openai-compat:m", env) is None  # set but empty: none
    assert key_from_environment("local:qwen", env) is None  # the bundled model's key is per run
