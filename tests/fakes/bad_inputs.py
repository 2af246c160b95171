"""Bad input for ``vak serve``, one kind per case, in both protocols (issue 35 item 3): what a client might
send wrong, with the status the server answers and the words its error must hold (the field it names).
tests/service/test_serve_bad_input.py sends each to a real ``vak serve`` child and expects that status and
a server still serving; bench/serve_load.py can send the same list. Standard library only, so any harness
can build them; ``bad_inputs(max_body)`` sizes the too-large bodies for the server's ``--max-body``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

OPENAI = "/v1/chat/completions"
ANTHROPIC = "/v1/messages"
MODELS = "/v1/models"
JSON = "application/json"


@dataclass(frozen=True)
class BadInput:
    """One malformed request: ``path`` (under the server's root), its body's bytes, its content type
    (None: no header), the key it sends (``"run"``: the run's own; ``None``: none; else that key), the
    status expected and a fragment the error message must hold (the field named), if any."""

    name: str
    path: str
    body: bytes
    status: int
    names: str = ""
    content_type: str | None = JSON
    key: str | None = "run"
    method: str = "POST"
    headers: dict[str, str] = field(default_factory=dict)
    chunked: bool = False  # sent without a Content-Length, in parts (the size limit must hold while it streams)

    def header_list(self, run_key: str) -> dict[str, str]:
        h = dict(self.headers)
        if self.content_type is not None:
            h["content-type"] = self.content_type
        key = run_key if self.key == "run" else self.key
        if key is not None:
            h["x-api-key" if self.path == ANTHROPIC else "authorization"] = (
                key if self.path == ANTHROPIC else f"Bearer {key}")
        if self.path == ANTHROPIC or self.headers.get("anthropic-version"):
            h.setdefault("anthropic-version", "2023-06-01")
        return h


def good_openai(**change: Any) -> dict[str, Any]:
    return {"model": "scripted", "messages": [{"role": "user", "content": "hello"}]} | change


def good_anthropic(**change: Any) -> dict[str, Any]:
    return {"model": "scripted", "max_tokens": 64, "messages": [{"role": "user", "content": "hello"}]} | change


def _j(value: Any) -> bytes:
    return json.dumps(value).encode()


def _deep(levels: int) -> bytes:
    # Text, not json.dumps: the encoder would recurse as deep as the parser does.
    return b'{"model": "scripted", "messages": [{"role": "user", "content": "hi"}], "metadata": ' + (
        b"[" * levels) + (b"]" * levels) + b"}"


def _openai_with(message: dict[str, Any]) -> bytes:
    return _j(good_openai(messages=[{"role": "user", "content": "hi"}, message]))


def _anthropic_with(*messages: dict[str, Any]) -> bytes:
    return _j(good_anthropic(messages=[{"role": "user", "content": "hi"}, *messages]))


def _call(**function: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", **function}]}


def bad_inputs(max_body: int) -> list[BadInput]:
    big = b'{"messages": [{"role": "user", "content": "' + b"x" * (max_body + 1024) + b'"}]}'
    both = [(OPENAI, good_openai), (ANTHROPIC, good_anthropic)]
    cases: list[BadInput] = []
    for path, good in both:
        p = "openai" if path == OPENAI else "anthropic"
        cases += [
            BadInput(f"{p}-not-json", path, b'{"messages": [', 400, "not JSON"),
            BadInput(f"{p}-empty-body", path, b"", 400, "empty"),
            BadInput(f"{p}-json-array", path, b"[1, 2]", 400, "JSON object"),
            BadInput(f"{p}-json-string", path, b'"hello"', 400, "JSON object"),
            BadInput(f"{p}-not-utf8", path, b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}', 400, "UTF-8"),
            BadInput(f"{p}-text-plain", path, _j(good()), 415, "application/json", content_type="text/plain"),
            BadInput(f"{p}-form", path, b"messages=hi", 415, "application/json",
                     content_type="application/x-www-form-urlencoded"),
            BadInput(f"{p}-multipart", path, _j(good()), 415, "application/json",
                     content_type="multipart/form-data; boundary=x"),
            BadInput(f"{p}-nesting-100000-deep", path, _deep(100_000), 400, "levels deep"),
            BadInput(f"{p}-nesting-200-deep", path, _deep(200), 400, "levels deep"),
            BadInput(f"{p}-too-large", path, big, 413, "limit"),
            BadInput(f"{p}-too-large-chunked", path, big, 413, "limit", chunked=True),
            BadInput(f"{p}-messages-missing", path, _j({"model": "scripted", "max_tokens": 5}), 400, "messages: required"),
            BadInput(f"{p}-messages-empty", path, _j(good(messages=[])), 400, "messages: must hold"),
            BadInput(f"{p}-messages-string", path, _j(good(messages="hi")), 400, "messages: must be a list"),
            BadInput(f"{p}-message-string", path, _j(good(messages=["hi"])), 400, "messages[0]: must be"),
            BadInput(f"{p}-role-missing", path, _j(good(messages=[{"content": "hi"}])), 400, "messages[0].role: required"),
            BadInput(f"{p}-role-unknown", path, _j(good(messages=[{"role": "robot", "content": "hi"}])), 400,
                     "messages[0].role"),
            BadInput(f"{p}-content-number", path, _j(good(messages=[{"role": "user", "content": 5}])), 400,
                     "messages[0].content"),
            BadInput(f"{p}-tools-strings", path, _j(good(tools=["lookup"])), 400, "tools[0]: must be"),
            BadInput(f"{p}-tools-object", path, _j(good(tools={"name": "lookup"})), 400, "tools: must be a list"),
            BadInput(f"{p}-max-tokens-string", path, _j(good(max_tokens="lots")), 400, "max_tokens: must be a whole"),
            BadInput(f"{p}-max-tokens-negative", path, _j(good(max_tokens=-5)), 400, "max_tokens: must be within"),
            BadInput(f"{p}-max-tokens-zero", path, _j(good(max_tokens=0)), 400, "max_tokens: must be within"),
            BadInput(f"{p}-max-tokens-fraction", path, _j(good(max_tokens=1.5)), 400, "max_tokens: must be a whole"),
            BadInput(f"{p}-max-tokens-huge", path, _j(good(max_tokens=10**15)), 400, "max_tokens: must be within"),
            BadInput(f"{p}-max-tokens-true", path, _j(good(max_tokens=True)), 400, "max_tokens: must be a whole"),
            BadInput(f"{p}-stream-string", path, _j(good(stream="yes")), 400, "stream: must be true or false"),
            BadInput(f"{p}-model-number", path, _j(good(model=5)), 400, "model: must be a string"),
            BadInput(f"{p}-no-key", path, _j(good()), 401, "API key", key=None),
            BadInput(f"{p}-wrong-key", path, _j(good()), 401, "API key", key="not-this-run"),
            BadInput(f"{p}-non-ascii-key", path, _j(good()), 401, "API key", key="schlüssel"),
            BadInput(f"{p}-session-header-path", path, _j(good()), 400, "x-vak-session",
                     headers={"x-vak-session": "../escape"}),
            BadInput(f"{p}-rules-header", path, _j(good()), 400, "x-vak-rules", headers={"x-vak-rules": "sometimes"}),
        ]
    cases += [
        # OpenAI's own shapes
        BadInput("openai-tool-calls-without-function", OPENAI, _openai_with(_call()), 400,
                 "messages[1].tool_calls[0].function: required"),
        BadInput("openai-tool-calls-string", OPENAI,
                 _openai_with({"role": "assistant", "content": None, "tool_calls": "lookup"}), 400,
                 "messages[1].tool_calls: must be a list"),
        BadInput("openai-tool-call-string", OPENAI,
                 _openai_with({"role": "assistant", "content": None, "tool_calls": ["lookup"]}), 400,
                 "messages[1].tool_calls[0]: must be"),
        BadInput("openai-tool-call-function-string", OPENAI, _openai_with(_call(function="lookup")), 400,
                 "messages[1].tool_calls[0].function: must be an object"),
        BadInput("openai-tool-call-name-missing", OPENAI, _openai_with(_call(function={"arguments": "{}"})), 400,
                 "messages[1].tool_calls[0].function.name: required"),
        BadInput("openai-tool-call-arguments-number", OPENAI,
                 _openai_with(_call(function={"name": "lookup", "arguments": 5})), 400,
                 "messages[1].tool_calls[0].function.arguments"),
        BadInput("openai-tool-call-arguments-list", OPENAI,
                 _openai_with(_call(function={"name": "lookup", "arguments": "[1, 2]"})), 400, "not a JSON object"),
        BadInput("openai-tool-result-without-call-id", OPENAI, _openai_with({"role": "tool", "content": "42"}), 400,
                 "messages[1].tool_call_id: required"),
        BadInput("openai-content-part-string", OPENAI, _j(good_openai(messages=[{"role": "user", "content": ["hi"]}])),
                 400, "messages[0].content[0]: must be"),
        BadInput("openai-content-part-text-number", OPENAI,
                 _j(good_openai(messages=[{"role": "user", "content": [{"type": "text", "text": 5}]}])), 400,
                 "messages[0].content[0].text"),
        BadInput("openai-tool-without-function", OPENAI, _j(good_openai(tools=[{"type": "function"}])), 400,
                 "tools[0].function: required"),
        BadInput("openai-tool-without-name", OPENAI,
                 _j(good_openai(tools=[{"type": "function", "function": {"description": "x"}}])), 400,
                 "tools[0].function.name: required"),
        BadInput("openai-tool-parameters-string", OPENAI,
                 _j(good_openai(tools=[{"type": "function", "function": {"name": "f", "parameters": "any"}}])), 400,
                 "tools[0].function.parameters: must be an object"),
        BadInput("openai-max-completion-tokens-string", OPENAI, _j(good_openai(max_completion_tokens="lots")), 400,
                 "max_completion_tokens"),
        # Anthropic's own shapes
        BadInput("anthropic-content-strings", ANTHROPIC,
                 _j(good_anthropic(messages=[{"role": "user", "content": ["hi"]}])), 400,
                 "messages[0].content[0]: must be a content block"),
        BadInput("anthropic-content-missing", ANTHROPIC, _j(good_anthropic(messages=[{"role": "user"}])), 400,
                 "messages[0].content: required"),
        BadInput("anthropic-block-without-type", ANTHROPIC,
                 _j(good_anthropic(messages=[{"role": "user", "content": [{"text": "hi"}]}])), 400,
                 "messages[0].content[0].type: required"),
        BadInput("anthropic-text-block-without-text", ANTHROPIC,
                 _j(good_anthropic(messages=[{"role": "user", "content": [{"type": "text"}]}])), 400,
                 "messages[0].content[0].text: required"),
        BadInput("anthropic-tool-use-without-id", ANTHROPIC,
                 _anthropic_with({"role": "assistant", "content": [{"type": "tool_use", "name": "lookup", "input": {}}]}),
                 400, "messages[1].content[0].id: required"),
        BadInput("anthropic-tool-use-without-name", ANTHROPIC,
                 _anthropic_with({"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "input": {}}]}),
                 400, "messages[1].content[0].name: required"),
        BadInput("anthropic-tool-use-input-string", ANTHROPIC,
                 _anthropic_with({"role": "assistant",
                                  "content": [{"type": "tool_use", "id": "t1", "name": "lookup", "input": "q"}]}),
                 400, "messages[1].content[0].input: must be an object"),
        BadInput("anthropic-tool-result-without-id", ANTHROPIC,
                 _anthropic_with({"role": "user", "content": [{"type": "tool_result", "content": "42"}]}), 400,
                 "messages[1].content[0].tool_use_id: required"),
        BadInput("anthropic-tool-result-content-number", ANTHROPIC,
                 _anthropic_with({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                                                "content": 42}]}), 400,
                 "messages[1].content[0].content: must be"),
        BadInput("anthropic-tool-result-is-error-string", ANTHROPIC,
                 _anthropic_with({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                                                "content": "x", "is_error": "no"}]}), 400,
                 "messages[1].content[0].is_error"),
        BadInput("anthropic-system-role-message", ANTHROPIC,
                 _j(good_anthropic(messages=[{"role": "system", "content": "be brief"}])), 400, "messages[0].role"),
        BadInput("anthropic-system-number", ANTHROPIC, _j(good_anthropic(system=5)), 400, "system: must be"),
        BadInput("anthropic-system-strings", ANTHROPIC, _j(good_anthropic(system=["be brief"])), 400,
                 "system[0]: must be"),
        BadInput("anthropic-tool-without-name", ANTHROPIC, _j(good_anthropic(tools=[{"input_schema": {}}])), 400,
                 "tools[0].name: required"),
        BadInput("anthropic-tool-schema-string", ANTHROPIC,
                 _j(good_anthropic(tools=[{"name": "f", "input_schema": "any"}])), 400,
                 "tools[0].input_schema: must be an object"),
        # routes
        BadInput("models-no-key", MODELS, b"", 401, "API key", method="GET", content_type=None, key=None),
        BadInput("models-wrong-key", MODELS, b"", 401, "API key", method="GET", content_type=None, key="wrong"),
        BadInput("models-anthropic-no-key", MODELS, b"", 401, "API key", method="GET", content_type=None, key=None,
                 headers={"anthropic-version": "2023-06-01"}),
        BadInput("chat-get", OPENAI, b"", 405, method="GET", content_type=None),
        BadInput("unknown-route", "/v1/completions", _j({"prompt": "hi"}), 404),
    ]
    return cases


def chunks(body: bytes, size: int = 65_536) -> Iterator[bytes]:
    """A body in parts, for a request sent without a Content-Length."""
    for start in range(0, len(body), size):
        yield body[start:start + size]
