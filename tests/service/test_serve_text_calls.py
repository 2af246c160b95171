"""Calls only where the model made them (issue 33 item 4), through ``vak serve`` in front of a loopback
scripted upstream, with the official ``openai`` client offering its own ``lookup`` tool.

An upstream that makes its calls natively and answers in plain text that mentions ``lookup({"key": "k1"})``:
the client gets that text whole and no tool call, plain and streamed (before, plain lost the text to a
call and streamed cut it off before the call). The same reply from a model declared to write its calls
as text (``--calls text``, as the bundled Qwen's catalogue entry declares) is a call of ``lookup``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.fakes.agent_upstream import TEXT_CALL_FORMS
from tests.fakes.httpserver import serve
from tests.fakes.scripted import completion
from tests.fakes.sse_upstream import ScriptedStream
from tests.fakes.vak_server import CLIENT_KEY, running

SPEC = "openai-compat:scripted"
TEXT = 'To read a key, call lookup({"key": "k1"}) yourself: it answers with the stored value.'
LOOKUP = [{"type": "function", "function": {
    "name": "lookup", "description": "Read a stored value by its key.",
    "parameters": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}}}]
MESSAGES: Any = [{"role": "system", "content": "You answer questions about the store."},
                 {"role": "user", "content": "How do I read a stored value?"}]


def _ask(base_url: str, *, stream: bool) -> tuple[str, list[tuple[str, dict[str, Any]]], str | None]:
    """(text, calls, finish reason) of one request, as the client reads them."""
    with openai.OpenAI(base_url=base_url, api_key=CLIENT_KEY, max_retries=0) as client:
        if not stream:
            reply = client.chat.completions.create(model="scripted", messages=MESSAGES, tools=LOOKUP)
            choice = reply.choices[0]
            calls = [(c.function.name, json.loads(c.function.arguments)) for c in choice.message.tool_calls or ()
                     if c.type == "function"]
            return choice.message.content or "", calls, choice.finish_reason
        text, names, arguments, finish = "", dict[int, str](), dict[int, str](), None
        for chunk in client.chat.completions.create(model="scripted", messages=MESSAGES, tools=LOOKUP, stream=True):
            for choice in chunk.choices:
                text += choice.delta.content or ""
                for call in choice.delta.tool_calls or ():
                    if call.function is not None:
                        names[call.index] = names.get(call.index, "") + (call.function.name or "")
                        arguments[call.index] = arguments.get(call.index, "") + (call.function.arguments or "")
                finish = choice.finish_reason or finish
        return text, [(names[i], json.loads(arguments[i])) for i in sorted(names)], finish


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_plain_text_answer_naming_a_call_reaches_the_client_as_text(tmp_path: Path, stream: bool) -> None:
    upstream_model = ScriptedStream([completion(TEXT)])
    with serve(upstream_model.handle) as upstream, running(tmp_path / "ledger", SPEC, upstream.base_url) as server:
        text, calls, finish = _ask(server.base_url, stream=stream)
    assert (text, calls, finish) == (TEXT, [], "stop")
    assert len(upstream_model.bodies) == 1  # answered: the engine asked nothing more
    assert "lookup" in {t["function"]["name"] for t in upstream_model.bodies[0]["tools"]}  # it was offered


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_model_declared_to_write_its_calls_as_text_has_them_parsed(tmp_path: Path, stream: bool) -> None:
    """``--calls text``: the same reply is the model's call of the client's ``lookup``, handed to the client;
    the text before it (streamed) stops where the call begins."""
    upstream_model = ScriptedStream([completion(TEXT)])
    with serve(upstream_model.handle) as upstream, \
            running(tmp_path / "ledger", SPEC, upstream.base_url, calls="text") as server:
        text, calls, finish = _ask(server.base_url, stream=stream)
    assert calls == [("lookup", {"key": "k1"})] and finish == "tool_calls"
    assert "lookup(" not in text and TEXT.startswith(text)


# The forms the bundled Qwen writes a call in (tests/fakes/agent_upstream.py), calling the client's lookup.
QWEN_FORMS = {form: write("lookup", {"key": "k1"}) for form, write in TEXT_CALL_FORMS.items()}


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("form", list(QWEN_FORMS))
def test_each_form_the_bundled_model_writes_is_a_call_under_calls_text(tmp_path: Path, form: str, stream: bool) -> None:
    upstream_model = ScriptedStream([completion(QWEN_FORMS[form])])
    with serve(upstream_model.handle) as upstream, \
            running(tmp_path / "ledger", SPEC, upstream.base_url, calls="text") as server:
        text, calls, finish = _ask(server.base_url, stream=stream)
    assert (text, calls, finish) == ("", [("lookup", {"key": "k1"})], "tool_calls")


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("form", list(QWEN_FORMS))
def test_each_form_reaches_the_client_whole_from_a_model_that_calls_natively(tmp_path: Path, form: str,
                                                                              stream: bool) -> None:
    upstream_model = ScriptedStream([completion(QWEN_FORMS[form])])
    with serve(upstream_model.handle) as upstream, running(tmp_path / "ledger", SPEC, upstream.base_url) as server:
        text, calls, finish = _ask(server.base_url, stream=stream)
    assert (text, calls, finish) == (QWEN_FORMS[form], [], "stop")


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_model_that_keeps_calling_an_unknown_tool_in_text_never_gets_the_client_an_empty_reply(
        tmp_path: Path, stream: bool) -> None:
    """The bundled Qwen through ``--calls text`` writing a fenced call of a tool nobody offered: before, the
    engine answered each "no tool named ..." itself until the turn's steps were spent (8 upstream calls) and
    the client got ``content: null`` with no call (pydantic-ai then ends ``Exceeded maximum output retries``,
    as seen in bench/agents.py against the bundled model). The engine is not the agent here: a call of a tool
    neither the client nor the engine offers is the model's text, and the client gets it whole, as direct."""
    unknown = '```json\n{"name": "lookup_value", "arguments": {"key": "k1"}}\n```'
    upstream_model = ScriptedStream([completion(unknown)] * 12)
    with serve(upstream_model.handle) as upstream, \
            running(tmp_path / "ledger", SPEC, upstream.base_url, calls="text") as server:
        text, calls, finish = _ask(server.base_url, stream=stream)
    assert (text, calls, finish) == (unknown, [], "stop")
    assert len(upstream_model.bodies) == 1  # the engine answered nothing for the model
