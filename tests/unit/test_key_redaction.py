"""A canary API key echoed back by the provider never leaves an adapter, in any covered encoding.

Every adapter in the registry is driven through ``complete()`` over ``httpx.MockTransport`` while the
"server" echoes the canary key back: plain, JSON ``\\u``-escaped (wholly and in part), ``\\/``-escaped,
URL-encoded (wholly and in part), base64 at each byte offset (standard and URL-safe alphabet) and hex;
in a success body (text, thinking, tool-call arguments, an object key, a plain field), in a response
header, and in error bodies (400/429/500: the message, another field, an over-length message, a body that is
not JSON). The oracle ``reveals`` decodes what came out independently of the adapter's redactor, and the
canary must appear in none of: ``ChatResult`` text/thinking/raw/repr/JSON, tool-call arguments, the str and
repr of the raised error and of its whole traceback chain, and the log records captured at DEBUG.
"""

from __future__ import annotations

import base64
import json
import logging
import traceback
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fakes.canary import CANARY, base64_decodings, reveals
from tests.fakes.provider_bodies.wire import fast_retry
from vak_context.context.capacity.profile import ProfileKey
from vak_context.context.request.messages import ChatRequest, ChatResult, Message
from vak_context.errors import ContextOverflow, ProviderError
from vak_context.providers.base import Provider
from vak_context.providers.redaction import Redactor
from vak_context.providers.registry import PROVIDERS, make_provider

REQUEST = ChatRequest(model="m", system="sys", messages=(Message.user("hello"),), max_tokens=16)
PLACE = "@@K1@@"  # where the encoded key goes, one JSON string level down
PLACE_NESTED = "@@K2@@"  # inside a JSON string that itself holds JSON (tool-call arguments)

# ---------------------------------------------------------------- the oracle: tests/fakes/canary.py


# ---------------------------------------------------------------- encodings: the JSON text the server writes


def _u(char: str, upper: bool = False) -> str:
    code = f"{ord(char):04x}"
    return "\\u" + (code.upper() if upper else code)


def _b64(prefix: bytes, alphabet: str = "std") -> str:
    blob = base64.b64encode(prefix + CANARY.encode()).decode()
    return blob.translate(str.maketrans("+/", "-_")) if alphabet == "url" else blob


ENCODINGS: dict[str, str] = {
    "plain": CANARY,
    "json-u-all": "".join(_u(c) for c in CANARY),
    "json-u-partial": "".join(_u(c, upper=True) if i % 2 else c for i, c in enumerate(CANARY)),
    "json-solidus": CANARY.replace("/", "\\/"),
    "url-all": "".join(f"%{b:02X}" for b in CANARY.encode()),
    "url-partial": quote(CANARY, safe="-_"),
    "base64-offset0": _b64(b""),
    "base64-offset1-basic": _b64(b"Bearer "),  # 7 bytes before the key: offset 1 (mod 3)
    "base64-offset2-urlsafe": _b64(b"u:", "url"),  # a Basic credential, URL-safe alphabet
    "hex": CANARY.encode().hex(),
}


def test_every_encoding_decodes_to_the_canary() -> None:
    """The fixtures are honest: each encoded form decodes (JSON, then its own encoding) back to the canary."""
    for name, fragment in ENCODINGS.items():
        decoded = json.loads(f'"{fragment}"')
        assert reveals(decoded), name
        assert fragment != CANARY or name == "plain"


# ---------------------------------------------------------------- bodies per wire family

FAMILY = {
    "openai-compat": "chat",
    "openai": "chat",
    "openrouter": "chat",
    "bedrock": "chat",
    "openai-responses": "responses",
    "anthropic": "anthropic",
    "gemini": "gemini",
    "ollama": "ollama",
}
ECHO = f"echo {PLACE} end"
NESTED_ARGS = json.dumps({"token": PLACE_NESTED, "city": "Oslo"})
SUCCESS_POSITIONS = ("text", "thinking", "tool-args", "object-key", "field", "header")


def success_body(family: str, position: str) -> dict[str, Any]:
    """A documented-shape success body with the placeholder at ``position`` (header: nowhere)."""
    at = lambda p: ECHO if position == p else "fine"  # noqa: E731
    args_json = NESTED_ARGS if position == "tool-args" else json.dumps({"city": "Oslo"})
    args_obj = {"token": ECHO, "city": "Oslo"} if position == "tool-args" else {"city": "Oslo"}
    body: dict[str, Any]
    if family == "chat":
        body = {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "tool_calls",
                    "message": {
                        "role": "assistant",
                        "content": at("text"),
                        "reasoning_content": at("thinking"),
                        "tool_calls": [
                            {
                                "id": "call_1",
                                "type": "function",
                                "function": {"name": "get_weather", "arguments": args_json},
                            }
                        ],
                    },
                }
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 2},
        }
    elif family == "responses":
        body = {
            "id": "resp_1",
            "object": "response",
            "status": "completed",
            "model": "m",
            "output": [
                {"type": "reasoning", "summary": [{"type": "summary_text", "text": at("thinking")}]},
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": at("text")}],
                },
                {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": args_json},
            ],
            "usage": {"input_tokens": 10, "output_tokens": 2},
        }
    elif family == "anthropic":
        body = {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "m",
            "content": [
                {"type": "thinking", "thinking": at("thinking"), "signature": "sig"},
                {"type": "text", "text": at("text")},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": args_obj},
            ],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 10, "output_tokens": 2},
        }
    elif family == "gemini":
        body = {
            "candidates": [
                {
                    "content": {
                        "role": "model",
                        "parts": [
                            {"text": at("thinking"), "thought": True},
                            {"text": at("text")},
                            {"functionCall": {"name": "get_weather", "args": args_obj}},
                        ],
                    },
                    "finishReason": "STOP",
                }
            ],
            "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 2},
            "modelVersion": "m",
        }
    else:
        body = {
            "model": "m",
            "done": True,
            "done_reason": "stop",
            "message": {
                "role": "assistant",
                "content": at("text"),
                "thinking": at("thinking"),
                "tool_calls": [{"function": {"name": "get_weather", "arguments": args_obj}}],
            },
            "prompt_eval_count": 10,
            "eval_count": 2,
        }
    if position == "object-key":
        body["echo"] = {PLACE: "the key, as an object key", "nested": [{PLACE: 1}]}
    if position == "field":
        body["id" if "id" in body else "model"] = PLACE
    return body


def error_body(family: str, status: int, position: str) -> dict[str, Any]:
    """A documented-shape error body with the placeholder in its message, another field, or an overflow."""
    if position == "field":  # no message: the adapter falls back to dumping the error object
        return {"error": {"param": PLACE, "type": "invalid_request_error"}}
    message = {
        "message": f"Incorrect API key provided: {PLACE}.",
        "overflow": {
            "chat": f"This model's maximum context length is 8192 tokens. However, your messages resulted in "
            f"9000 tokens. key {PLACE}",
            "responses": f"Your input exceeds the context window of this model. key {PLACE}",
            "anthropic": f"prompt is too long: 208310 tokens > 200000 maximum (key {PLACE})",
            "gemini": f"The input token count (1200293) exceeds the maximum number of tokens allowed (1048576). "
            f"{PLACE}",
            "ollama": f"request (8889 tokens) exceeds the available context size (4096 tokens) {PLACE}",
        }[family],
        "header": "Rate limit reached",
    }[position]
    if family == "ollama":
        return {"error": message}
    if family == "anthropic":
        return {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    if family == "gemini":
        return {"error": {"code": status, "message": message, "status": "INVALID_ARGUMENT"}}
    code = "context_length_exceeded" if position == "overflow" else "invalid_api_key"
    return {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}}


def wire_text(body: dict[str, Any], fragment: str) -> str:
    """The body's JSON text with the encoded key spliced in verbatim, at both nesting levels."""
    nested = json.dumps(fragment)[1:-1]  # one more level of JSON string escaping
    return json.dumps(body).replace(PLACE_NESTED, nested).replace(PLACE, fragment)


def header_form(fragment: str) -> str:
    # Headers carry no JSON: the \u and \/ forms arrive as those very characters.
    return fragment


# ---------------------------------------------------------------- running an adapter


def adapter(name: str, client: httpx.AsyncClient) -> Provider:
    retry, _ = fast_retry(attempts=1)
    env = {"AWS_REGION": "us-west-2"}
    return make_provider(f"{name}:m", client, api_key=CANARY, retry=retry, env=env).provider


async def run(name: str, reply: Callable[[httpx.Request], httpx.Response]) -> ChatResult | BaseException:
    async with httpx.AsyncClient(transport=httpx.MockTransport(reply)) as client:
        provider = adapter(name, client)
        try:
            return await provider.complete(REQUEST)
        except ProviderError as exc:
            return exc


def surfaces(outcome: ChatResult | BaseException) -> dict[str, str]:
    """Every text a caller, a receipt or a log could take from the outcome."""
    if isinstance(outcome, BaseException):
        out = {"traceback": "".join(traceback.format_exception(outcome))}
        seen: BaseException | None = outcome
        depth = 0
        while seen is not None:
            out[f"str[{depth}]"], out[f"repr[{depth}]"] = str(seen), repr(seen)
            out[f"attrs[{depth}]"] = repr(vars(seen))
            seen, depth = seen.__cause__ or seen.__context__, depth + 1
        return out
    out = {
        "text": outcome.text,
        "thinking": outcome.thinking,
        "repr": repr(outcome),
        "raw": json.dumps(outcome.raw, ensure_ascii=False),
        "json": outcome.model_dump_json(),
    }
    for i, call in enumerate(outcome.tool_calls):
        out[f"tool[{i}].arguments"] = json.dumps(call.arguments, ensure_ascii=False)
        out[f"tool[{i}].raw_arguments"] = call.raw_arguments
    return out


def assert_no_leak(outcome: ChatResult | BaseException, caplog: pytest.LogCaptureFixture) -> None:
    leaked = [where for where, text in surfaces(outcome).items() if reveals(text)]
    leaked += [f"log:{r.name}" for r in caplog.records if reveals(r.getMessage())]
    assert not leaked, f"the canary key leaked into {leaked}"


ADAPTERS = sorted(PROVIDERS)


def test_every_registered_adapter_has_a_wire_family() -> None:
    """A new adapter in the registry must be added here, so it is covered by the echo tests below."""
    assert set(ADAPTERS) == set(FAMILY)


@pytest.mark.parametrize("position", SUCCESS_POSITIONS)
@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
@pytest.mark.parametrize("name", ADAPTERS)
async def test_key_echoed_in_a_success_reply_leaves_no_trace(
    name: str, encoding: str, position: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A 200 reply echoing the key (``encoding``, at ``position``) yields a result with no form of the key."""
    caplog.set_level(logging.DEBUG)
    fragment = ENCODINGS[encoding]
    text = wire_text(success_body(FAMILY[name], position), fragment)
    headers = {"content-type": "application/json"}
    if position == "header":
        headers["x-echo-key"] = header_form(fragment)

    def reply(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=text.encode(), headers=headers)

    outcome = await run(name, reply)
    assert isinstance(outcome, ChatResult), f"expected a result, got {outcome!r}"
    assert outcome.tool_calls and outcome.tool_calls[0].name == "get_weather"  # the reply was parsed
    assert_no_leak(outcome, caplog)


ERROR_CASES = [
    (status, position)
    for status in (400, 429, 500)
    for position in ("message", "field", "header", "not-json")
] + [(400, "overflow"), (200, "not-json")]


@pytest.mark.parametrize(("status", "position"), ERROR_CASES)
@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
@pytest.mark.parametrize("name", ADAPTERS)
async def test_key_echoed_in_an_error_reply_leaves_no_trace(
    name: str, encoding: str, status: int, position: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An error reply echoing the key raises a typed error whose str, repr and traceback hold no form of it."""
    caplog.set_level(logging.DEBUG)
    fragment = ENCODINGS[encoding]
    headers = {"content-type": "application/json", "retry-after": "1"}
    if position == "not-json":
        text = f"<html><body>502 upstream said: bad key {fragment}</body></html>"
        headers["content-type"] = "text/html"
    else:
        text = wire_text(error_body(FAMILY[name], status, position), fragment)
    if position == "header":
        headers["x-echo-key"] = header_form(fragment)

    def reply(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, content=text.encode(), headers=headers)

    outcome = await run(name, reply)
    assert isinstance(outcome, ProviderError), f"expected a ProviderError, got {outcome!r}"
    assert outcome.status == status
    if position == "overflow":
        assert isinstance(outcome, ContextOverflow)
    assert_no_leak(outcome, caplog)


# ---------------------------------------------------------------- the probe's activity


async def test_probe_activity_holds_no_echoed_key() -> None:
    """A whole probe against a server that echoes the key (escaped) in every answer and error records none."""
    from vak_context.agent.probe import (  # imported here: the probe is another area's module
        ProbeRunner,
        ProbeSettings,
    )

    answer = success_body("chat", "text")
    answer["choices"][0]["message"]["tool_calls"] = []
    answer_text = wire_text(answer, ENCODINGS["json-u-all"])
    failure_text = wire_text(error_body("chat", 500, "message"), ENCODINGS["json-solidus"])
    calls = {"n": 0}

    def reply(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith(("/props", "/models")):
            return httpx.Response(404, content=failure_text.encode())
        calls["n"] += 1
        if calls["n"] % 3 == 0:  # every third answer is a server error echoing the key
            return httpx.Response(500, content=failure_text.encode())
        return httpx.Response(200, content=answer_text.encode())

    async with httpx.AsyncClient(transport=httpx.MockTransport(reply)) as client:
        provider = adapter("openai-compat", client)
        probe = ProbeRunner(
            provider,
            ProfileKey(provider="openai-compat", model="m"),
            settings=ProbeSettings(window=2048, first_rung=1024, cache_rung=False, max_sizes=3),
            salt="redact",
        )
        report = await probe.run()
    recorded = report.activity().model_dump_json()
    assert calls["n"] >= 3  # at least one echoed answer and one echoed error were recorded
    assert '"error"' in recorded and "[redacted]" in recorded
    assert not reveals(recorded)


# ---------------------------------------------------------------- the redactor on its own


# What real keys are made of, plus the characters JSON must escape (no brackets: "[redacted]" cannot
# spell part of a key).
_KEY_CHARS = st.sampled_from('abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_/+=.~:"\\')


@settings(max_examples=200, deadline=None)
@given(
    secret=st.text(_KEY_CHARS, min_size=8, max_size=40),
    escape_mask=st.lists(st.sampled_from(["plain", "json", "url"]), min_size=40, max_size=40),
    before=st.text(max_size=20),
    after=st.text(max_size=20),
)
def test_redactor_removes_every_per_character_mix(
    secret: str, escape_mask: list[str], before: str, after: str
) -> None:
    """Any key, each character plain, \\u-escaped or %-encoded at random, is gone from the text it sits in."""
    forms = {"plain": lambda c: c, "json": lambda c: f"\\u{ord(c):04X}", "url": lambda c: f"%{ord(c):02x}"}
    echoed = "".join(forms[mode](c) for c, mode in zip(secret, escape_mask, strict=False))
    redactor = Redactor(secret)
    out = redactor.text(before + echoed + after)
    assert "[redacted]" in out
    assert not reveals(out, secret) or reveals(before + after, secret)


@settings(max_examples=200, deadline=None)
@given(
    secret=st.text(_KEY_CHARS, min_size=8, max_size=40),
    prefix=st.binary(max_size=5),
    suffix=st.binary(max_size=5),
)
def test_redactor_removes_base64_at_any_offset(secret: str, prefix: bytes, suffix: bytes) -> None:
    """The key base64-encoded inside a larger blob (any byte offset, either alphabet) is gone from the text."""
    blob = base64.b64encode(prefix + secret.encode() + suffix).decode()
    redactor = Redactor(secret)
    for text in (f"auth={blob};", blob.translate(str.maketrans("+/", "-_"))):
        out = redactor.text(text)
        assert secret.encode() not in b"".join(base64_decodings(out))


def test_short_keys_are_placeholders_and_left_alone() -> None:
    """A key under 8 characters ("none", "x") is a local server's placeholder: text containing it is kept."""
    assert Redactor("none").text("none of these") == "none of these"
    assert Redactor(None).value({"a": ["b"]}) == {"a": ["b"]}


def test_value_scrubs_object_keys_and_nested_strings() -> None:
    """Decoded JSON: string values, object keys and strings in lists are all scrubbed; numbers pass."""
    redactor = Redactor(CANARY)
    out = redactor.value({CANARY: [f"x {CANARY} y", 3, None, {"k": CANARY}], "n": 1.5})
    assert out == {"[redacted]": ["x [redacted] y", 3, None, {"k": "[redacted]"}], "n": 1.5}


def test_an_encoded_key_takes_its_whole_token_and_nothing_else() -> None:
    """A base64 or hex occurrence is redacted with the whole run it sits in; the words around it stay."""
    redactor = Redactor(CANARY)
    blob = "QUFB" * 5000 + base64.b64encode(b"u:" + CANARY.encode()).decode() + "QkJC" * 5000
    hexed = "00" * 100 + CANARY.encode().hex().upper() + "ff"
    other = base64.b64encode(b"an unrelated image").decode()
    text = f"img {other} auth {blob} hash x{hexed}; done"
    assert redactor.text(text) == f"img {other} auth [redacted] hash x[redacted]; done"


CATALOGUE = {
    "id": ECHO,
    "display_name": ECHO,
    "max_input_tokens": 1000,
    "name": ECHO,
    "displayName": ECHO,
    "inputTokenLimit": 1000,
    "model_info": {"general.architecture": ECHO},
    "parameters": f"num_ctx 4096\nstop {ECHO}",
    "data": [{"id": "m", "canonical_slug": ECHO, "context_length": ECHO, "meta": {"n_ctx": 4096}}],
}


@pytest.mark.parametrize("encoding", ["plain", "json-u-all", "json-solidus", "base64-offset1-basic"])
@pytest.mark.parametrize("name", ADAPTERS)
async def test_key_echoed_in_a_catalogue_reply_stays_out_of_model_context(name: str, encoding: str) -> None:
    """The metadata rung's ModelContext (which the probe records) holds no form of a key the catalogue echoed."""
    text = wire_text(CATALOGUE, ENCODINGS[encoding])

    def reply(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=text.encode(), headers={"content-type": "application/json"})

    async with httpx.AsyncClient(transport=httpx.MockTransport(reply)) as client:
        context = await adapter(name, client).model_context("m")
    assert not reveals(repr(context)) and not reveals(context.model_dump_json())


# ---------------------------------------------------------------- the turn loop's failed turn


@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
async def test_a_turn_failed_by_an_error_echoing_the_key_records_no_trace_of_it(
        encoding: str, tmp_path: Any, caplog: pytest.LogCaptureFixture) -> None:
    """A 500 echoing the key fails the turn mid-way: the ``turn.failed`` activity, the TurnCard and every
    other entry's payload and blob in the ledger hold no form of the key, nor does the log."""
    from vak_context.actors.local_services import InProcessServices
    from vak_context.agent.loop import TurnConfig, TurnLoop
    from vak_context.agent.workspace import TOOLS as WORKSPACE_TOOLS
    from vak_context.agent.workspace import Workspace
    from vak_context.context.capacity.profile import CapacityProfile, Ewma, Horizon
    from vak_context.context.request.assemble import system_prompt
    from vak_context.context.request.surface import Surface, ToolDecl
    from vak_context.errors import RetryableProviderError
    from vak_context.storage.ledger import LedgerStore

    caplog.set_level(logging.DEBUG)
    text = wire_text(error_body("chat", 500, "message"), ENCODINGS[encoding])
    (tmp_path / "ws").mkdir()
    surface = Surface.build([ToolDecl(t.spec, always_loaded=True, observes=t.observes) for t in WORKSPACE_TOOLS])
    config = TurnConfig(model="m", provider="openai-compat", system=system_prompt(surface.catalogue()),
                        surface=surface, max_steps=2, max_tokens=16)
    profile = CapacityProfile(ProfileKey("openai-compat", "m"), 32_768, Horizon(16_000, 0.9, 0.0), Ewma(0.25, 3), 256)
    with LedgerStore(tmp_path / "ledger") as store:
        async with httpx.AsyncClient(transport=httpx.MockTransport(
                lambda _r: httpx.Response(500, content=text.encode()))) as client:
            loop = TurnLoop(InProcessServices(store, "s1"), adapter("openai-compat", client), profile, config,
                            workspace=Workspace(tmp_path / "ws"), clock=lambda: 1_764_504_000.0)
            with pytest.raises(RetryableProviderError):
                await loop.run("hello")
        entries = store.entries("s1")
        kinds = [e.kind for e in entries]
        recorded = [e.payload.decode("utf-8") for e in entries]
        recorded += [e.blob.decode("utf-8", errors="replace") for e in entries if e.blob is not None]
    assert "turn_card" in kinds and any('"turn.failed"' in r for r in recorded)
    leaked = [r[:80] for r in recorded if reveals(r)] + [r.name for r in caplog.records if reveals(r.getMessage())]
    assert not leaked, f"the canary key leaked into {leaked}"
