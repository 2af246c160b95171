"""An agent that asks again for a reply it could not use stays in its session (issue 33, item 2): the real
pydantic-ai, given an empty reply, asks again with "Please return text or call a tool." as a system message
at the end of the same history (read as a message of its history, not a new system prompt: that made a
second session of the task); a client that drops an empty reply and sends the same history again gets the
model asked again, not the empty reply from the ledger; a reply with text dropped and asked for again with
nothing new is a resend, answered from the ledger (tests/service/test_serve_one_session.py has the rest)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import openai

from tests.fakes.agent_runs import NO_KEEPALIVE
from tests.fakes.httpserver import serve
from tests.fakes.script_upstream import ScriptUpstream, call, text
from tests.fakes.vak_server import CLIENT_KEY, running
from vak_context.context.history.turns import WITHDRAWN
from vak_context.engine.api import Engine
from vak_context.events.envelope import Mapper
from vak_context.serve.conversation import HISTORY
from vak_context.serve.protocol import Item

SPEC = "openai-compat:scripted"
WEATHER = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city now.",
                                             "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                            "required": ["city"]}}}]

POPULATION = "Lyon: 522,250 inhabitants (2021 census)"
ANSWER = "Lyon has 522,250 inhabitants."


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


def post(base_url: str, messages: list[dict[str, Any]], *, session: str) -> httpx.Response:
    body = {"model": "scripted", "messages": [{"role": "system", "content": "You are a careful agent."}, *messages],
            "tools": WEATHER}
    return httpx.post(f"{base_url}/chat/completions", json=body, timeout=60, headers={
        "authorization": f"Bearer {CLIENT_KEY}", "x-vak-session": session})


def get_population(city: str) -> str:
    """The population of a city."""
    return POPULATION if city == "Lyon" else "unknown city"


async def _pydantic_run(base_url: str, question: str) -> str:
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    client = openai.AsyncOpenAI(base_url=base_url, api_key=CLIENT_KEY, max_retries=0,
                                http_client=openai.DefaultAsyncHttpxClient(limits=NO_KEEPALIVE))
    try:
        agent = Agent(OpenAIChatModel("scripted", provider=OpenAIProvider(openai_client=client)), tools=[get_population])
        return str((await agent.run(question)).output)
    finally:
        await client.close()


def test_pydantic_ai_asking_again_after_an_empty_reply_stays_in_its_session(tmp_path: Path) -> None:
    upstream = ScriptUpstream([call("c1", "get_population", city="Lyon"), text(""), text(ANSWER)])
    ledger = tmp_path / "ledger"
    with serve(upstream.handle) as fake, running(ledger, SPEC, fake.base_url) as server:
        assert asyncio.run(_pydantic_run(server.base_url, "How many people live in Lyon?")) == ANSWER
    sessions = activities(ledger)
    assert len(sessions) == 1, list(sessions)  # one task, one session: no new one, no fork
    (entries,) = sessions.values()
    withdrawn = [d for a, d, _ in entries if a == WITHDRAWN]
    assert len(withdrawn) == 1 and withdrawn[0]["digests"] == [Item("assistant", "").digest()]
    assert step_texts(ledger, withdrawn[0]["steps"]) == [""]
    # The model was asked again with the result and pydantic-ai's words, not the empty reply.
    again = upstream.requests[2]
    assert POPULATION in json.dumps(again) and "Please return text or call a tool." in json.dumps(again)
    assert not [m for m in again["messages"] if m["role"] == "assistant" and not m.get("content") and not m.get("tool_calls")]
    # The system prompt of every request is the one the task began with (the retry words never joined it).
    assert {json.dumps([m for m in r["messages"] if m["role"] == "system"][:1]) for r in upstream.requests} == {
        json.dumps([upstream.requests[0]["messages"][0]])}


def _exchange(base_url: str, session: str) -> list[dict[str, Any]]:
    """A question, a call of get_weather, its result: the history after the call was answered."""
    history: list[dict[str, Any]] = [{"role": "user", "content": "What is the weather in Oslo today?"}]
    message = post(base_url, history, session=session).json()["choices"][0]["message"]
    return [*history, message, {"role": "tool", "tool_call_id": "w1", "content": "Snow, -3 C"}]


def test_an_empty_reply_dropped_and_asked_for_again_asks_the_model_again(tmp_path: Path) -> None:
    upstream = ScriptUpstream([call("w1", "get_weather", city="Oslo"), text(""), text("Snow, -3 C in Oslo."),
                               text("Bergen: rain.")])
    ledger = tmp_path / "ledger"
    with serve(upstream.handle) as fake, running(ledger, SPEC, fake.base_url) as server:
        history = _exchange(server.base_url, "empty-1")
        empty = post(server.base_url, history, session="empty-1").json()["choices"][0]["message"]
        assert not empty.get("content") and not empty.get("tool_calls")
        # The client drops the empty reply and sends the same history again, nothing new, no retry header.
        again = post(server.base_url, history, session="empty-1").json()["choices"][0]["message"]
        assert again["content"] == "Snow, -3 C in Oslo."
        history += [again, {"role": "user", "content": "And in Bergen?"}]
        assert post(server.base_url, history, session="empty-1").json()["choices"][0]["message"]["content"] == \
            "Bergen: rain."
    assert len(upstream.requests) == 4
    asked = upstream.requests[2]
    assert "Snow, -3 C" in json.dumps(asked) and "w1" in json.dumps(asked)
    assert not [m for m in asked["messages"] if m["role"] == "assistant" and not m.get("content") and not m.get("tool_calls")]
    assert "Snow, -3 C in Oslo." in json.dumps(upstream.requests[3])
    sessions = activities(ledger)
    assert list(sessions) == ["empty-1"]
    withdrawn = [d for a, d, _ in sessions["empty-1"] if a == WITHDRAWN and "at" in d]
    assert len(withdrawn) == 1 and Item("assistant", "").digest() in withdrawn[0]["digests"]
    assert sum(a == HISTORY for a, _, _ in sessions["empty-1"]) == 4  # each request noted once


def test_a_reply_with_text_dropped_and_asked_for_again_is_answered_from_the_ledger(tmp_path: Path) -> None:
    upstream = ScriptUpstream([call("w1", "get_weather", city="Oslo"), text("Snow, -3 C in Oslo.")])
    ledger = tmp_path / "ledger"
    with serve(upstream.handle) as fake, running(ledger, SPEC, fake.base_url) as server:
        history = _exchange(server.base_url, "text-1")
        first = post(server.base_url, history, session="text-1").json()["choices"][0]["message"]
        # Dropped, the same history again: the client cannot be told from one that never got the reply.
        again = post(server.base_url, history, session="text-1").json()["choices"][0]["message"]
        assert again["content"] == first["content"] == "Snow, -3 C in Oslo."
    assert len(upstream.requests) == 2
    sessions = activities(ledger)
    assert list(sessions) == ["text-1"] and sum(a == HISTORY for a, _, _ in sessions["text-1"]) == 2
