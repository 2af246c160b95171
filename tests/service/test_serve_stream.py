"""``vak serve`` streaming token by token, with the official ``openai`` and ``anthropic`` clients, in front of
a loopback scripted upstream that streams server-sent events: the first text delta reaches the client
while the upstream still holds the rest of its stream (the upstream waits on an event the test sets only
after reading that delta); a step calling the client's tool and a step calling only the engine's
(``recall``, written inline in a ```json fence as the bundled Qwen writes calls) then an answer: the
client sees its call and the answer's text, nothing of the engine's call, and usage sums every upstream
call; a client that leaves mid-stream leaves its session usable."""

from __future__ import annotations

import json
import threading
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.fakes.httpserver import serve
from tests.fakes.scripted import completion, fence
from tests.fakes.serve_clients import SCHEMAS, SYSTEM, Client
from tests.fakes.sse_upstream import ScriptedStream, broken_after_text, status
from tests.fakes.vak_server import CLIENT_KEY, running
from vak_context.context.history.turns import TurnIndex
from vak_context.engine.api import Engine
from vak_context.events.envelope import Mapper
from vak_context.serve.conversation import HISTORY, read_held
from vak_context.serve.protocol import read_anthropic, read_openai
from vak_context.storage.ledger import LedgerStore

SPEC = "openai-compat:scripted"
# The first word ends in a comma: a bare trailing word waits for the next delta (it may be the name of a
# tool written before an inline call), so this one goes out as soon as it arrives.
ANSWER = "Hello, the notes list alpha, beta and gamma."


def _openai_tools() -> Any:
    return [{"type": "function", "function": {"name": n, "description": d, "parameters": s}}
            for n, (d, s) in SCHEMAS.items()]


def _anthropic_tools() -> Any:
    return [{"name": n, "description": d, "input_schema": s} for n, (d, s) in SCHEMAS.items()]


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_the_first_text_delta_arrives_while_the_upstream_holds_the_rest(tmp_path: Path, protocol: str) -> None:
    gate = threading.Event()
    upstream_model = ScriptedStream([completion(ANSWER, prompt=120)], gates={0: gate})
    deltas: list[str] = []
    with serve(upstream_model.handle) as upstream, running(tmp_path / "ledger", SPEC, upstream.base_url) as server:
        messages: Any = [{"role": "user", "content": "list the notes"}]
        try:
            if protocol == "openai":
                # Closed with its pooled connection: left to the garbage collector, an unclosed socket warns
                # (an error under filterwarnings=error) in whichever later test the collection falls.
                with openai.OpenAI(base_url=server.base_url, api_key=CLIENT_KEY, max_retries=0) as client:
                    for chunk in client.chat.completions.create(model="scripted", stream=True, tools=_openai_tools(),
                                                                messages=[{"role": "system", "content": SYSTEM},
                                                                          *messages]):
                        for choice in chunk.choices:
                            if choice.delta.content:
                                if not deltas:  # the upstream has not sent its last chunk: it waits for us
                                    assert upstream_model.reached[0].is_set() and not gate.is_set()
                                    gate.set()
                                deltas.append(choice.delta.content)
            else:
                with anthropic.Anthropic(base_url=server.url, api_key=CLIENT_KEY, max_retries=0) as claude, \
                        claude.messages.stream(model="scripted", max_tokens=256, system=SYSTEM, messages=messages,
                                               tools=_anthropic_tools()) as events:
                    for event in events:
                        if event.type == "text":
                            if not deltas:
                                assert upstream_model.reached[0].is_set() and not gate.is_set()
                                gate.set()
                            deltas.append(event.text)
        finally:
            gate.set()  # never leave the upstream's thread waiting
    assert deltas[0] == "Hello, " and "".join(deltas) == ANSWER and len(deltas) > 1
    assert upstream_model.bodies[0]["stream"] is True
    assert upstream_model.bodies[0]["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_a_client_call_then_an_engine_only_step_then_the_answer(tmp_path: Path, protocol: str) -> None:
    """Step 1 calls the client's web_search (a native call, streamed in deltas); step 2 calls only the
    engine's recall, inline in a ```json fence; step 3 answers. The client sees its call, then the answer."""
    replies = [
        completion(calls=[("web_search", {"query": "notes"})], prompt=100),
        completion(fence(("recall", {"id": "0123456789ab"})), prompt=200),
        completion("Done: the notes are alpha, beta and gamma.", prompt=300),
    ]
    upstream_model = ScriptedStream(replies)
    # The scripted model writes its calls in ```json fences as the bundled Qwen does: declared so.
    with serve(upstream_model.handle) as upstream, \
            running(tmp_path / "ledger", SPEC, upstream.base_url, calls="text") as server:
        client = Client(protocol, server.base_url, CLIENT_KEY, stream=True, session="stream-1")
        client.messages.append({"role": "user", "content": "search the notes and say what they hold"})
        first_text, calls = client.send()
        assert first_text == "" and [(n, a) for _, n, a in calls] == [("web_search", {"query": "notes"})]
        client.give_results(calls)
        text, more = client.send()
    assert text == "Done: the notes are alpha, beta and gamma." and not more
    assert client.seen == ["web_search"]  # never recall
    assert "recall" not in json.dumps(client.messages) and "```" not in json.dumps(client.messages)
    # Usage: the first reply one upstream call's, the second the engine-only step's and the answer's.
    assert client.usage == [(100, 12), (500, 24)]
    assert [b["stream"] for b in upstream_model.bodies] == [True, True, True]
    # What the client holds is what the session holds: its next request would extend it, not fork.
    read = read_openai if protocol == "openai" else read_anthropic
    items = read({"messages": client.messages}).items
    with Engine.open(tmp_path / "ledger") as engine:
        held = read_held(engine.ledger(), "stream-1")
    assert held.digests == [i.digest() for i in items]


def test_a_client_leaving_mid_stream_leaves_the_session_usable(tmp_path: Path) -> None:
    gate = threading.Event()
    upstream_model = ScriptedStream([completion(ANSWER, prompt=100), completion(ANSWER, prompt=110),
                                     completion("Done: beta.", prompt=120)], gates={0: gate})
    messages: Any = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "list the notes"}]
    try:
        with ExitStack() as stack, serve(upstream_model.handle) as upstream, \
                running(tmp_path / "ledger", SPEC, upstream.base_url) as server:
            client = stack.enter_context(openai.OpenAI(base_url=server.base_url, api_key=CLIENT_KEY, max_retries=0,
                                                       default_headers={"x-vak-session": "leaver"}))
            stream = client.chat.completions.create(model="scripted", messages=messages, stream=True)
            for chunk in stream:
                if any(c.delta.content for c in chunk.choices):
                    break  # the first delta: the upstream holds the rest on the gate
            stream.close()  # the client leaves mid-stream
            # The retry waits for the session's lock, which the left request holds until its turn is closed;
            # the upstream still holds the first stream (the gate is set only at the end).
            again = client.chat.completions.create(model="scripted", messages=messages)
            assert again.choices[0].message.content == ANSWER
            messages.append({"role": "assistant", "content": ANSWER})
            messages.append({"role": "user", "content": "and the second one?"})
            following = client.chat.completions.create(model="scripted", messages=messages)
            assert following.choices[0].message.content == "Done: beta."
    finally:
        gate.set()
    with Engine.open(tmp_path / "ledger") as engine:
        ledger = engine.ledger()
        held = read_held(ledger, "leaver")
        entries = ledger.entries("leaver")
        sessions = ledger.sessions()
    items = read_openai({"messages": [*messages[1:], {"role": "assistant", "content": "Done: beta."}]}).items
    assert held.digests == [i.digest() for i in items]
    assert not [n for n in sessions if n.startswith("leaver.f")]  # no fork
    turns = TurnIndex.build(entries, mapper=Mapper()).turns
    # The left turn is in the ledger, closed; the retry is a turn of its own, then the next message's.
    assert [t.directive.text for t in turns] == ["list the notes", "list the notes", "and the second one?"]
    mapper = Mapper()
    cards = [mapper.payload_of(e) for e in entries if e.kind == "turn_card"]
    assert [c.outcome for c in cards] == ["cancelled", "completed", "completed"]


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_errors_before_the_first_byte_keep_their_status_and_after_it_end_the_stream(tmp_path: Path,
                                                                                   protocol: str) -> None:
    """A 429 before anything was sent is the protocol's 429; a stream that breaks after its first text
    ends the client's stream with the protocol's in-stream error; the retry then answers."""
    upstream_model = ScriptedStream([status(429), broken_after_text("Hello, the notes"), completion(ANSWER)])
    with serve(upstream_model.handle) as upstream, running(tmp_path / "ledger", SPEC, upstream.base_url) as server:
        client = Client(protocol, server.base_url, CLIENT_KEY, stream=True, session="errs")
        client.messages.append({"role": "user", "content": "list the notes"})
        with pytest.raises(openai.RateLimitError if protocol == "openai" else anthropic.RateLimitError):
            client.send()
        with pytest.raises(openai.APIError if protocol == "openai" else anthropic.APIStatusError) as broken:
            client.send()
        # In the stream: the response had started with 200 (a plain error would carry its own status).
        assert "the model crashed" in str(broken.value) and getattr(broken.value, "status_code", 200) == 200
        assert client.send() == (ANSWER, [])
    with Engine.open(tmp_path / "ledger") as engine:
        entries = engine.ledger().entries("errs")
    mapper = Mapper()
    # The 429 and the broken stream each closed their turn failed; the retry's turn answered.
    assert [mapper.payload_of(e).outcome for e in entries if e.kind == "turn_card"] == ["failed", "failed", "completed"]


def _read_stream(http: httpx.Client, protocol: str, session: str, messages: list[dict[str, Any]]) -> tuple[str, Any]:
    """One streamed request read line by line up to its last event (``data: [DONE]``, or Anthropic's
    ``message_stop``), the response left open; the text it carried and the response, still to close."""
    if protocol == "openai":
        body: dict[str, Any] = {"model": "scripted", "stream": True, "stream_options": {"include_usage": True},
                                "messages": [{"role": "system", "content": SYSTEM}, *messages], "tools": _openai_tools()}
        path, headers = "/v1/chat/completions", {"authorization": f"Bearer {CLIENT_KEY}"}
    else:
        body = {"model": "scripted", "stream": True, "max_tokens": 256, "system": SYSTEM, "messages": messages,
                "tools": _anthropic_tools()}
        path, headers = "/v1/messages", {"x-api-key": CLIENT_KEY, "anthropic-version": "2023-06-01"}
    response = http.send(http.build_request("POST", path, json=body, headers=headers | {"x-vak-session": session}),
                         stream=True)
    assert response.status_code == 200
    text = ""
    for line in response.iter_lines():
        if not line.startswith("data: "):
            continue
        if line == "data: [DONE]":
            return text, response
        event = json.loads(line[6:])
        if event.get("type") == "message_stop":
            return text, response
        for choice in event.get("choices", ()):
            text += choice["delta"].get("content") or ""
        if event.get("type") == "content_block_delta" and event["delta"]["type"] == "text_delta":
            text += event["delta"]["text"]
    raise AssertionError("the stream ended without its last event")


def _noted(ledger: Path, session: str) -> list[str]:
    """The session's entries as the bench reads them while the server runs (the writer's tail is readable):
    ``receipt``, ``history`` (a ``serve.history`` activity) and ``turn_card``, in chain order."""
    mapper = Mapper()
    with LedgerStore(ledger, readonly=True) as store:
        entries = store.entries(session)
    return [e.kind if e.kind != "activity" else "history" for e in entries
            if e.kind in ("receipt", "turn_card") or (e.kind == "activity" and mapper.payload_of(e).activity == HISTORY)]


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_a_streamed_requests_receipts_and_history_are_in_the_ledger_when_its_last_event_is_read(
        tmp_path: Path, protocol: str) -> None:
    """bench/serve_live.py read "0 upstream calls" for a streamed step: it reads the ledger as soon as the
    stream ends, and the request's ``serve.history`` activity (which the receipts before it are counted
    against) was appended only after the last event went out. Read at the last event, the response still
    open: each upstream call's receipt, the turn's card and the request's history are all in, the history last."""
    replies = [completion(fence(("recall", {"id": "0123456789ab"})), prompt=100), completion(ANSWER, prompt=200),
               completion("Done: beta.", prompt=300)]
    upstream_model = ScriptedStream(replies)
    ledger = tmp_path / "ledger"
    with serve(upstream_model.handle) as upstream, running(ledger, SPEC, upstream.base_url, calls="text") as server, \
            httpx.Client(base_url=server.url, timeout=60, trust_env=False) as http:
        messages: list[dict[str, Any]] = [{"role": "user", "content": "list the notes"}]
        text, response = _read_stream(http, protocol, "noted", messages)
        try:
            assert text == ANSWER
            assert _noted(ledger, "noted") == ["receipt", "receipt", "turn_card", "history"]
        finally:
            response.close()
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "and the second one?"}]
        text, response = _read_stream(http, protocol, "noted", messages)
        try:
            assert text == "Done: beta."
            assert _noted(ledger, "noted")[4:] == ["receipt", "turn_card", "history"]
        finally:
            response.close()
