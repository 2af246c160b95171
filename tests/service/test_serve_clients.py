"""The official ``openai`` and ``anthropic`` clients, plain and streaming, hold a 20-turn conversation with
tool calls against ``vak serve`` (a real uvicorn server on 127.0.0.1) in front of a scripted
OpenAI-compatible upstream that calls ``recall`` at turn 15: the ledger holds each client message once,
the upstream gets turn 1's results as digests with their evidence ids, and the client never sees
``recall``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fakes.embedder import CLOCK_QUERY, search_results
from tests.fakes.httpserver import serve
from tests.fakes.serve_clients import Client
from tests.fakes.vak_server import CLIENT_KEY, running
from tests.fakes.wire_models import FORMATS, WireModel
from vak_context.context.history.turns import TurnIndex
from vak_context.engine.api import Engine
from vak_context.events.envelope import Mapper
from vak_context.serve.conversation import read_held
from vak_context.serve.protocol import read_anthropic, read_openai

RECALLS = 15


def directive(turn: int) -> str:
    if turn == 1:
        return f"search {CLOCK_QUERY}"
    if turn == RECALLS:
        return "recall turn 1"
    return f"run make check-{turn}" if turn % 2 == 0 else f"search query-{turn:03d}"


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streaming"])
def test_a_20_turn_conversation_through_vak_serve(tmp_path: Path, protocol: str, stream: bool) -> None:
    model = WireModel(FORMATS["openai"])
    with serve(model.handle) as upstream, running(tmp_path / "ledger", "openai-compat:scripted",
                                                  upstream.base_url) as server:
        client = Client(protocol, server.base_url, CLIENT_KEY, stream=stream, session="support-1")
        answers = [client.turn(directive(turn)) for turn in range(1, 21)]
    assert all(a.startswith("Done:") for a in answers), answers
    assert "recall" not in client.seen and "recall" in model.called
    assert client.seen.count("web_search") + client.seen.count("run_command") == 19
    # Turn 15's request showed turn 1's search as a digest with its evidence id, not the result itself.
    assert model.recalled is not None
    turn15 = next(b for b in model.requests if json.dumps(b).count("recall turn 1") and b["messages"][-1]["role"] == "user")
    assert json.dumps(search_results(CLOCK_QUERY), ensure_ascii=False) not in json.dumps(turn15, ensure_ascii=False)
    # Usage: each reply's sums every upstream call made for it (a call and its answer: two or more).
    assert len(client.usage) == 39 and all(p > 0 and c >= 20 for p, c in client.usage)
    # The ledger holds each client message once, in order, and one turn per user message.
    read = read_openai if protocol == "openai" else read_anthropic
    items = read({"messages": client.messages, "system": "x"} if protocol == "anthropic"
                 else {"messages": client.messages}).items
    with Engine.open(tmp_path / "ledger") as engine:
        ledger = engine.ledger()
        held = read_held(ledger, "support-1")
        entries = ledger.entries("support-1")
        sessions = ledger.sessions()
    assert held.digests == [i.digest() for i in items]
    # Turn 15's answer, from turn 1's recalled result, is turn 1's word for word: under the default rules
    # (observe: the client is the agent) it reaches the client as the model wrote it, the drift verdict
    # only recorded; every other item is distinct.
    assert answers[RECALLS - 1] == answers[0] and len(set(held.digests)) == len(items) - 1
    assert not [n for n in sessions if n.startswith("support-1.f")]  # no fork
    index = TurnIndex.build(entries, mapper=Mapper())
    assert [t.directive.text for t in index.turns] == [directive(t) for t in range(1, 21)]
    mapper = Mapper()
    observed = [p.detail["rule"] for e in entries if e.kind == "activity"
                and (p := mapper.payload_of(e)).activity == "rule.observed"]
    assert observed == ["steering-drift"]
