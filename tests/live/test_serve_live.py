"""The official ``openai`` and ``anthropic`` clients hold a 3-turn smoke conversation (two plain turns, one
streaming) with the client's own tools through ``vak serve`` in front of the shared live-test model
(SmolLM2-135M on llama.cpp, ``openai-compat:smollm2`` at the fixture's base URL and per-run key).

Only the engine's promises are asserted, never that the 135M model answers well: every request gets a
well-formed reply in the client's protocol (text, or calls of the client's tools, never ``recall`` or
``find_tools``), the ledger holds each client message once, every turn has a card, usage is reported."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from tests.fakes.serve_clients import SCHEMAS, Client
from tests.fakes.vak_server import CLIENT_KEY
from vak_context.context.history.turns import TurnIndex
from vak_context.engine.api import Engine
from vak_context.events.envelope import Mapper
from vak_context.providers.local.server import LocalModelServer
from vak_context.serve.app import ServeConfig, build_app
from vak_context.serve.conversation import read_held
from vak_context.serve.protocol import read_anthropic, read_openai

pytestmark = [pytest.mark.live, pytest.mark.slow, pytest.mark.timeout(300)]

SESSION = "live-smoke"
MAX_TOKENS = 32  # the server's default for a request that names none (the OpenAI client's), and Capped's
REQUESTS_PER_TURN = 2  # a model that keeps calling tools is left mid-turn; the next message closes the turn
DIRECTIVES = ("Search the notes for the release date.", "Run the command `make check`.", "Say done.")
ENGINE_TOOLS = {"recall", "find_tools"}
# The 135M model may call a tool without its required argument; the client's tools then run on an empty one.
EMPTY = {name: {key: "" for key in schema["required"]} for name, (_, schema) in SCHEMAS.items()}


class Capped:
    """The Anthropic client's ``messages`` with ``max_tokens`` capped (the shared client asks for 512, which
    the 135M model spends rambling on 2 cores): the server binds the session's budget from the request."""

    def __init__(self, messages: Any) -> None:
        self._messages = messages

    def create(self, **request: Any) -> Any:
        return self._messages.create(**request | {"max_tokens": MAX_TOKENS})

    def stream(self, **request: Any) -> Any:
        return self._messages.stream(**request | {"max_tokens": MAX_TOKENS})


def smoke_client(protocol: str, base_url: str) -> Client:
    client = Client(protocol, base_url, CLIENT_KEY, session=SESSION)
    if protocol == "anthropic":
        vars(client._anthropic)["messages"] = Capped(client._anthropic.messages)  # a cached_property: shadowed
    return client


@contextmanager
def serving(ledger: Path, model: LocalModelServer) -> Iterator[str]:
    """``vak serve`` on 127.0.0.1 in front of the live-test model, as tests/fakes/vak_server.py's ``running``
    starts it, plus the model's per-run key (held by the server in memory, as ``vak serve --upstream local:``
    does); yields the base URL (/v1)."""
    engine = Engine.open(ledger)
    app = build_app(engine, ServeConfig("openai-compat:smollm2", base_url=model.base_url, upstream_key=model.api_key,
                                        client_key=CLIENT_KEY, window=6_000, max_tokens=MAX_TOKENS))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, name="vak-serve-live", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:  # polled with a deadline: uvicorn offers no event to wait on
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("vak serve's live-test server did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.should_exit = True  # the lifespan closes the sessions: a turn left open gets its card
        thread.join(60)
        engine.close()


def smoke_turn(client: Client, text: str, stream: bool) -> None:
    """One user message, then at most REQUESTS_PER_TURN requests (running the calls each hands back)."""
    client.stream = stream
    client.messages.append({"role": "user", "content": text})
    for _ in range(REQUESTS_PER_TURN):
        before = len(client.usage)
        answer, calls = client.send()
        assert len(client.usage) == before + 1, "a reply without usage"
        # Well formed in the client's protocol: the official SDK parsed it; it says something or calls.
        assert answer.strip() or calls, client.messages[-1]
        assert all(name in SCHEMAS for _, name, _ in calls), calls
        if not calls:
            return
        client.give_results([(i, name, {**EMPTY[name], **arguments}) for i, name, arguments in calls])


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_a_3_turn_smoke_conversation_through_vak_serve_on_the_live_model(
        tmp_path: Path, local_model: LocalModelServer, protocol: str) -> None:
    with serving(tmp_path / "ledger", local_model) as base_url:
        client = smoke_client(protocol, base_url)
        for turn, text in enumerate(DIRECTIVES):
            smoke_turn(client, text, stream=turn == 1)
    assert not ENGINE_TOOLS & set(client.seen), client.seen
    assert all(p > 0 and c > 0 for p, c in client.usage), client.usage  # the real server's billing, summed
    read = read_openai if protocol == "openai" else read_anthropic
    items = read({"messages": client.messages}).items
    with Engine.open(tmp_path / "ledger") as engine:
        ledger = engine.ledger()
        held = read_held(ledger, SESSION)
        entries = ledger.entries(SESSION)
        sessions = ledger.sessions()
    # Each client message once, in order: what the ledger holds is exactly the client's history; no fork.
    assert held.digests == [i.digest() for i in items]
    assert not [n for n in sessions if n.startswith(f"{SESSION}.f")]
    turns = TurnIndex.build(entries, mapper=Mapper()).turns
    assert [t.directive.text for t in turns] == list(DIRECTIVES)
    assert all(t.card is not None for t in turns), [t.directive.text for t in turns if t.card is None]
