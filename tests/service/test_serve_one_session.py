"""One session per agent task through ``vak serve``, whatever the agent does to its history: a reply it
drops and asks again after (mini-swe-agent) continues the session with the reply withdrawn in the ledger
and out of the next upstream request; replies and results written as text (smolagents) are read as the
calls and results they are; a resend of an exchange the session holds (the official client's retry after
a timeout, a duplicate while the original runs, a resend to a server killed after it wrote the reply, an
``Idempotency-Key``) is answered from the ledger with no upstream call. (An edited message forks: tests/service/test_serve_cases.py.)"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.fakes.httpserver import serve
from tests.fakes.script_upstream import ScriptUpstream, call, text
from tests.fakes.serve_clients import Client
from tests.fakes.vak_server import CLIENT_KEY, running
from vak_context.context.history.turns import WITHDRAWN
from vak_context.engine.api import Engine
from vak_context.events.envelope import Mapper
from vak_context.serve.child import serve_child
from vak_context.serve.conversation import HISTORY
from vak_context.serve.protocol import Item

SPEC = "openai-compat:scripted"
SYSTEM = "You are a careful agent."
WEATHER = [{"type": "function", "function": {"name": n, "description": d, "parameters": {
    "type": "object", "properties": {p: {"type": "string"}}, "required": [p]}}}
    for n, d, p in (("get_weather", "The weather in a city now.", "city"), ("final_answer", "The answer.", "answer"))]


def activities(ledger: Path) -> dict[str, list[tuple[str, dict[str, Any], str]]]:
    """Every session of the ledger: its activities (name, detail, entry id), in order."""
    mapper = Mapper()
    with Engine.open(ledger) as engine:
        store = engine.ledger()
        return {name: [(p.activity, dict(p.detail), e.id) for e in store.entries(name) if e.kind == "activity"
                       for p in [mapper.payload_of(e)]] for name in store.sessions()}


def step_texts(ledger: Path, ids: list[str]) -> list[str]:
    with Engine.open(ledger) as engine:
        store = engine.ledger()
        return [Mapper().payload_of(store.get(i)).text for i in ids]


@contextmanager
def through(tmp_path: Path, upstream: ScriptUpstream) -> Iterator[str]:
    """``vak serve`` (in this process, a real uvicorn) in front of the script: its /v1 base URL."""
    with serve(upstream.handle) as fake, running(tmp_path / "ledger", SPEC, fake.base_url) as server:
        yield server.base_url


def post(base_url: str, messages: list[dict[str, Any]], *, session: str, headers: dict[str, str] | None = None,
         tools: list[dict[str, Any]] = WEATHER) -> httpx.Response:
    body = {"model": "scripted", "messages": [{"role": "system", "content": SYSTEM}, *messages], "tools": tools}
    return httpx.post(f"{base_url}/chat/completions", json=body, timeout=60, headers={
        "authorization": f"Bearer {CLIENT_KEY}", "x-vak-session": session, **(headers or {})})


def test_a_reply_the_agent_drops_and_asks_again_after_continues_the_session_withdrawn(tmp_path: Path) -> None:
    # mini-swe-agent: a reply with no tool call is dropped from its history, and a user message saying so
    # is added in its place.
    upstream = ScriptUpstream([call("c1", "web_search", query="failing test"), text("THOUGHT: I will fix it."),
                               call("c2", "run_command", command="make check"), text("Fixed: make check passes.")])
    with through(tmp_path, upstream) as base_url:
        agent = Client("openai", base_url, CLIENT_KEY, session="mini-1")
        assert agent.turn("Fix the failing test.") == "THOUGHT: I will fix it."
        dropped = agent.messages.pop()
        agent.messages.append({"role": "user", "content": "No tool calls found in the response. Every response "
                                                          "MUST include at least one tool call."})
        assert agent.resume() == "Fixed: make check passes."
    sessions = activities(tmp_path / "ledger")
    assert list(sessions) == ["mini-1"]  # one session, no fork
    withdrawn = [d for a, d, _ in sessions["mini-1"] if a == WITHDRAWN]
    assert len(withdrawn) == 1
    assert withdrawn[0]["digests"] == [Item("assistant", dropped["content"]).digest()]
    assert step_texts(tmp_path / "ledger", withdrawn[0]["steps"]) == ["THOUGHT: I will fix it."]
    # The request after the drop follows the agent's history: the search and its result, not the reply.
    after = json.dumps(upstream.requests[2])
    assert "THOUGHT" not in after and "No tool calls found" in after and "failing test" in after
    assert "THOUGHT" not in json.dumps(upstream.requests[3])


def test_replies_and_results_written_as_text_are_read_as_the_calls_and_results_they_are(tmp_path: Path) -> None:
    # smolagents' ToolCallingAgent: each reply with calls comes back as assistant text naming the calls, each
    # result as a user message "Observation: ..."; the second question joins the last observation. Read as
    # the replies and results they are (serve/textform.py): one session, nothing withdrawn, the second
    # question a user message of its own; and the upstream is shown the exchanges in the client's own text
    # form, as the agent would send them direct (the model answers in the form its client parses).
    upstream = ScriptUpstream([call("w1", "get_weather", city="Oslo"), call("f2", "final_answer", answer="Snow, -3 C"),
                               call("w3", "get_weather", city="Bergen"), call("f4", "final_answer", answer="Rain")])

    def as_text(call_id: str, name: str, **arguments: str) -> dict[str, Any]:
        calls = [{"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}]
        return {"role": "assistant", "content": [{"type": "text", "text": f"Calling tools:\n{calls}"}]}

    def user(words: str) -> dict[str, Any]:
        return {"role": "user", "content": [{"type": "text", "text": words}]}

    history = [user("New task:\nWhat is the weather in Oslo today?")]
    with through(tmp_path, upstream) as base_url:
        replies = [post(base_url, history, session="smol-1").json()]
        history += [as_text("w1", "get_weather", city="Oslo"), user("Observation:\nSnow, -3 C")]
        replies.append(post(base_url, history, session="smol-1").json())
        history += [as_text("f2", "final_answer", answer="Snow, -3 C"),
                    user("Observation:\nSnow, -3 C\nNew task:\nAnd in Bergen?")]
        replies.append(post(base_url, history, session="smol-1").json())
        history += [as_text("w3", "get_weather", city="Bergen"), user("Observation:\nRain, 4 C")]
        replies.append(post(base_url, history, session="smol-1").json())
    calls = [r["choices"][0]["message"]["tool_calls"][0]["id"] for r in replies]
    assert calls == ["w1", "f2", "w3", "f4"]
    sessions = activities(tmp_path / "ledger")
    assert list(sessions) == ["smol-1"]
    assert [a for a, _, _ in sessions["smol-1"] if a == WITHDRAWN] == []  # each reply is the one it was sent

    def texts(body: dict[str, Any], role: str) -> list[str]:
        return [m["content"][0]["text"] for m in body["messages"] if m["role"] == role and isinstance(m["content"], list)]

    def results(body: dict[str, Any]) -> list[str]:
        return [t for t in texts(body, "user") if t.startswith("Observation:")]

    assert results(upstream.requests[1]) == ["Observation:\nSnow, -3 C"]
    # as smolagents joins its empty reply and its calls message
    assert texts(upstream.requests[1], "assistant") == ["\n" + as_text("w1", "get_weather", city="Oslo")["content"][0]["text"]]
    assert results(upstream.requests[3]) == ["Observation:\nSnow, -3 C", "Observation:\nSnow, -3 C", "Observation:\nRain, 4 C"]
    last_user = [m for m in upstream.requests[2]["messages"] if m["role"] == "user"][-1]
    assert json.dumps(last_user).endswith('"New task:\\nAnd in Bergen?"}]}')
    for body in upstream.requests:
        assert all(m["role"] != "tool" and "tool_calls" not in m for m in body["messages"])


@pytest.mark.parametrize(("protocol", "stream"), [("openai", False), ("openai", True), ("anthropic", False),
                                                  ("anthropic", True)])
def test_a_resent_exchange_is_answered_from_the_ledger(tmp_path: Path, protocol: str, stream: bool) -> None:
    upstream = ScriptUpstream([call("c1", "web_search", query="query-001"), text("Done: three notes.")])
    with through(tmp_path, upstream) as base_url:
        agent = Client(protocol, base_url, CLIENT_KEY, stream=stream, session="resend-1")
        agent.messages.append({"role": "user", "content": "search query-001"})
        first = agent.send()
        reply = agent.messages.pop()  # the client never got it: it sends the same history again
        assert agent.send() == first and agent.messages[-1] == reply
        agent.give_results(first[1])
        assert agent.resume() == "Done: three notes."
    assert len(upstream.requests) == 2  # one upstream call per exchange
    sessions = activities(tmp_path / "ledger")
    assert list(sessions) == ["resend-1"]
    assert sum(a == HISTORY for a, _, _ in sessions["resend-1"]) == 2  # nothing noted twice


def test_the_official_clients_retry_after_a_timeout_is_answered_once(tmp_path: Path) -> None:
    upstream = ScriptUpstream([call("c1", "get_weather", city="Oslo"), text("Done.")])
    upstream.hold()  # the first turn request is slow: the client times out and retries
    sent: list[httpx.Request] = []

    def sending(request: httpx.Request) -> None:
        sent.append(request)
        if len(sent) == 2:  # the retry is on its way: the original may finish now
            upstream.release.set()

    with through(tmp_path, upstream) as base_url:
        client = openai.OpenAI(base_url=base_url, api_key=CLIENT_KEY, max_retries=2, timeout=2.0,
                               default_headers={"x-vak-session": "timeout-1"},
                               http_client=openai.DefaultHttpxClient(event_hooks={"request": [sending]}))
        with client:  # closed with its pooled connections
            reply = client.chat.completions.create(model="scripted", tools=WEATHER,  # type: ignore[arg-type]
                                                   messages=[{"role": "user", "content": "search query-001"}])
    assert [r.headers["x-stainless-retry-count"] for r in sent] == ["0", "1"]
    message = reply.choices[0].message
    assert message.tool_calls is not None and [c.id for c in message.tool_calls] == ["c1"]
    assert len(upstream.requests) == 1
    sessions = activities(tmp_path / "ledger")
    assert list(sessions) == ["timeout-1"] and sum(a == HISTORY for a, _, _ in sessions["timeout-1"]) == 1


def test_a_duplicate_while_the_original_runs_waits_and_gets_the_same_answer(tmp_path: Path) -> None:
    upstream = ScriptUpstream([text("The answer is 42."), text("A second answer, never asked for.")])
    upstream.hold()
    history = [{"role": "user", "content": "What is the answer?"}]
    with through(tmp_path, upstream) as base_url:
        answers: list[httpx.Response] = []
        original = threading.Thread(target=lambda: answers.append(post(base_url, history, session="dup-1")))
        original.start()
        assert upstream.arrived.wait(60)  # the original holds the session's lock, in its upstream call

        def sent(request: httpx.Request) -> None:
            upstream.release.set()

        with httpx.Client(event_hooks={"request": [sent]}, timeout=60) as client:
            duplicate = client.post(f"{base_url}/chat/completions", headers={
                "authorization": f"Bearer {CLIENT_KEY}", "x-vak-session": "dup-1"}, json={
                "model": "scripted", "messages": [{"role": "system", "content": SYSTEM}, *history], "tools": WEATHER})
        original.join(60)
    assert [r.json()["choices"][0]["message"]["content"] for r in (answers[0], duplicate)] == ["The answer is 42."] * 2
    assert len(upstream.requests) == 1


def test_the_idempotency_key_is_honoured(tmp_path: Path) -> None:
    upstream = ScriptUpstream([call("c1", "get_weather", city="Oslo"), text("Done: one note."), text("Asked anew.")])
    first = [{"role": "user", "content": "search q"}]
    with through(tmp_path, upstream) as base_url:
        one = post(base_url, first, session="key-1", headers={"Idempotency-Key": "k-1"}).json()
        message = one["choices"][0]["message"]
        then = [*first, message, {"role": "tool", "tool_call_id": "c1", "content": "one note"}]
        assert post(base_url, then, session="key-1", headers={"Idempotency-Key": "k-2"}).json()[
            "choices"][0]["message"]["content"] == "Done: one note."
        # The same key: the same answer, though the session went on since (no upstream call).
        again = post(base_url, first, session="key-1", headers={"Idempotency-Key": "k-1"}).json()
        assert again["choices"][0]["message"] == message and len(upstream.requests) == 2
        # The same key with another history: refused, in the protocol's shape.
        refused = post(base_url, [{"role": "user", "content": "search r"}], session="key-1",
                       headers={"Idempotency-Key": "k-1"})
        assert refused.status_code == 400 and "Idempotency-Key" in refused.json()["error"]["message"]
        # A new key on the first history: a new request, answered anew.
        anew = post(base_url, first, session="key-1", headers={"Idempotency-Key": "k-3"}).json()
        assert anew["choices"][0]["message"]["content"] == "Asked anew." and len(upstream.requests) == 3


def test_a_resend_to_a_server_killed_after_it_wrote_the_reply_is_answered_from_the_ledger(tmp_path: Path) -> None:
    upstream = ScriptUpstream([call("c1", "get_weather", city="Oslo"), text("Done: one note.")])
    ledger = tmp_path / "ledger"
    history = [{"role": "user", "content": "search q"}]
    with serve(upstream.handle) as fake:
        with serve_child(SPEC, ledger=ledger, base_url=fake.base_url, start_timeout=120) as child:
            one = post(child.base_url, history, session="kill-1",
                       headers={"authorization": f"Bearer {child.key}"})
            # The reply is in the ledger; the server dies before a clean stop (its open turn never closed).
            child.process.kill()
            child.process.wait(30)
        with serve_child(SPEC, ledger=ledger, base_url=fake.base_url, start_timeout=120) as child:
            again = post(child.base_url, history, session="kill-1", headers={"authorization": f"Bearer {child.key}"})
            assert again.json()["choices"][0]["message"] == one.json()["choices"][0]["message"]
            assert len(upstream.requests) == 1
            then = [*history, again.json()["choices"][0]["message"],
                    {"role": "tool", "tool_call_id": "c1", "content": "one note"}]
            done = post(child.base_url, then, session="kill-1", headers={"authorization": f"Bearer {child.key}"})
            assert done.json()["choices"][0]["message"]["content"] == "Done: one note."
    sessions = activities(ledger)
    assert list(sessions) == ["kill-1"] and sum(a == HISTORY for a, _, _ in sessions["kill-1"]) == 2
