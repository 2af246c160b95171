"""``vak serve``'s cases with the official clients: an over-length 400 re-planned once, a 429 and a 5xx in
each protocol's error shape, a client editing message 3 (a fork with its activity, no error), a restart
mid-conversation (the same session; the results of calls a lost turn made still answered), and the
listening sockets (loopback only)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from tests.fakes.httpserver import serve
from tests.fakes.serve_clients import Client
from tests.fakes.sockets import bound_sockets, is_loopback
from tests.fakes.vak_server import CLIENT_KEY, running
from tests.fakes.wire_models import FORMATS, WireModel
from vak_context.engine.api import Engine
from vak_context.events.envelope import Mapper
from vak_context.serve.conversation import read_held

SPEC = "openai-compat:scripted"


def failing(model: WireModel, armed: list[int]) -> Callable[[httpx.Request], httpx.Response]:
    """The scripted model, but the next turn request after a status is put in ``armed`` gets that status."""

    def handle(request: httpx.Request) -> httpx.Response:
        if armed and request.url.path.endswith("/chat/completions") and b'"tools"' in request.content:
            status = armed.pop()
            error = ({"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}
                     if status == 429 else {"message": "overloaded", "type": "server_error"})
            return httpx.Response(status, json={"error": error})
        return model.handle(request)

    return handle


def test_an_over_length_400_is_re_planned_once(tmp_path: Path) -> None:
    model = WireModel(FORMATS["openai"])
    with serve(model.handle) as upstream, running(tmp_path / "ledger", SPEC, upstream.base_url) as server:
        client = Client("openai", server.base_url, CLIENT_KEY, session="long-1")
        # earlier turns the re-plan can compact: six, since the re-plan prices the stable prefix at the rate the
        # rejection measured (tests/unit/test_prefix_rate.py), so what it can drop must outweigh that (three did
        # only while the prefix kept its first, lower price)
        for turn in range(1, 7):
            client.turn(f"search query-{turn:03d}")
        assert client.turn("search a long query").startswith("Done:")
    assert model.overflows == 1 and client.seen == ["web_search"] * 7


@pytest.mark.parametrize("status", [429, 503])
def test_upstream_errors_in_each_protocols_shape(tmp_path: Path, status: int) -> None:
    model = WireModel(FORMATS["openai"])
    armed: list[int] = []
    with serve(failing(model, armed)) as upstream, running(tmp_path / "ledger", SPEC, upstream.base_url) as server:
        oa = Client("openai", server.base_url, CLIENT_KEY, session="err-oa")
        armed.append(status)
        with pytest.raises(openai.APIStatusError) as got_openai:
            oa.turn("search query-001")
        an = Client("anthropic", server.base_url, CLIENT_KEY, session="err-an")
        armed.append(status)
        with pytest.raises(anthropic.APIStatusError) as got_anthropic:
            an.turn("search query-001")
        # The client retries the same request: the session goes on (a new turn; the failed one has its card).
        assert oa.resume().startswith("Done:")
    assert got_openai.value.status_code == status
    error = got_openai.value.body
    assert isinstance(error, dict) and error["type"] == ("rate_limit_error" if status == 429 else "api_error")
    assert got_anthropic.value.status_code == status
    body = got_anthropic.value.body
    assert isinstance(body, dict) and body["type"] == "error"
    assert body["error"]["type"] == ("rate_limit_error" if status == 429 else "api_error")


def test_a_wrong_key_and_a_bad_body_in_each_shape(tmp_path: Path) -> None:
    with serve(WireModel(FORMATS["openai"]).handle) as upstream, \
            running(tmp_path / "ledger", SPEC, upstream.base_url) as server:
        with pytest.raises(openai.AuthenticationError):
            Client("openai", server.base_url, "wrong").turn("search x")
        with pytest.raises(anthropic.AuthenticationError):
            Client("anthropic", server.base_url, "wrong").turn("search x")
        reply = httpx.post(f"{server.base_url}/messages", content=b"[1]", headers={"x-api-key": CLIENT_KEY})
        assert reply.status_code == 400 and reply.json()["error"]["type"] == "invalid_request_error"
        models = httpx.get(f"{server.base_url}/models", headers={"authorization": f"Bearer {CLIENT_KEY}"}).json()
        assert models["data"][0]["id"] == "scripted"


def test_a_client_editing_message_3_continues_as_a_fork(tmp_path: Path) -> None:
    model = WireModel(FORMATS["openai"])
    with serve(model.handle) as upstream, running(tmp_path / "ledger", SPEC, upstream.base_url) as server:
        client = Client("openai", server.base_url, CLIENT_KEY, session="edit-1")
        for turn in range(1, 5):
            client.turn(f"search query-{turn:03d}")
        # Message 3 (the second user message; 1 is the first user message, 2 its reply) edited, and on from there.
        edited = Client("openai", server.base_url, CLIENT_KEY, session="edit-1")
        edited.messages = [*client.messages[:4], {"role": "user", "content": "run make edited"}]
        assert edited.resume().startswith("Done:")
        assert edited.turn("search query-009").startswith("Done:")
    with Engine.open(tmp_path / "ledger") as engine:
        ledger = engine.ledger()
        assert "edit-1.f1" in ledger.sessions()
        mapper = Mapper()
        forked = [mapper.payload_of(e) for e in ledger.entries("edit-1.f1") if e.kind == "activity"]
        fork = next(p for p in forked if p.activity == "session.forked")
        parent_entries = {e.id for e in ledger.entries("edit-1")}
        assert fork.detail["parent"] == "edit-1" and fork.detail["entry"] in parent_entries
        assert fork.detail["items"] == 4  # turn 1 (user, call, result, answer) is shared
        # The parent still holds the original history; the fork holds the edited one.
        assert len(read_held(ledger, "edit-1").digests) == 16
        assert len(read_held(ledger, "edit-1.f1").digests) == len(edited.messages)


def test_a_restart_continues_the_same_session(tmp_path: Path) -> None:
    model = WireModel(FORMATS["openai"])
    ledger = tmp_path / "ledger"
    with serve(model.handle) as upstream:
        with running(ledger, SPEC, upstream.base_url) as server:
            client = Client("anthropic", server.base_url, CLIENT_KEY)  # the session named by the digest
            client.turn("search query-001")
            client.turn("run make check-2")
            # A turn left open: the client got its calls, then the server restarts.
            client.messages.append({"role": "user", "content": "search query-003"})
            _, calls = client.send()
            assert [n for _, n, _ in calls] == ["web_search"]
        with running(ledger, SPEC, upstream.base_url) as server:
            # The same client's history on the new server (no pooled connection left to the garbage collector).
            held_messages = client.messages
            client.close()
            client = Client("anthropic", server.base_url, CLIENT_KEY)
            client.messages = held_messages
            # The lost turn's results: a new turn quotes them after the request they answer (docs/INTEGRATIONS.md).
            client.messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": i, "content": "3 notes found"} for i, _, _ in calls]})
            assert client.resume().startswith("Done:")
            before = len(model.requests)
            assert client.turn("run make check-4").startswith("Done:")
            last = model.requests[before]
    assert last["messages"][-1]["content"] == "run make check-4" or "run make check-4" in json.dumps(last["messages"][-1])
    with Engine.open(ledger) as engine:
        names = [n for n in engine.ledger().sessions() if n.startswith("c-")]
        assert len(names) == 1  # the same session, no fork
        held = read_held(engine.ledger(), names[0])
    assert len(held.digests) == len(client.messages)


def test_the_server_listens_on_loopback_only(tmp_path: Path) -> None:
    with serve(WireModel(FORMATS["openai"]).handle) as upstream, \
            running(tmp_path / "ledger", SPEC, upstream.base_url) as server:
        Client("openai", server.base_url, CLIENT_KEY).turn("search query-001")
        sockets = bound_sockets({os.getpid()}, os.getpid())
    port = int(server.url.rsplit(":", 1)[1])
    assert any(s.port == port for s in sockets)
    assert sockets and all(is_loopback(s.address) for s in sockets), sockets
