"""What one request through ``vak serve`` costs the ledger: its appends (the server's notes, its turn's steps
and plan) are written behind and made durable by one commit before the reply goes out, plain or streamed
(a reply that closes the turn adds the card's own commit). Nothing the client was sent is left unsynced."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.fakes.httpserver import serve
from tests.fakes.script_upstream import ScriptUpstream, call, text
from tests.fakes.serve_clients import Client
from tests.fakes.vak_server import CLIENT_KEY, running
from vak_context.storage.group_commit import COMMITS

SPEC = "openai-compat:scripted"


@pytest.mark.parametrize("stream", [False, True])
def test_a_request_is_one_durable_commit_before_its_reply(tmp_path: Path, stream: bool) -> None:
    upstream = ScriptUpstream([call("c1", "web_search", query="query-001"), text("Done: three notes.")])
    with serve(upstream.handle) as fake, running(tmp_path / "ledger", SPEC, fake.base_url) as server:
        app: Any = server.server.config.app  # the Starlette app build_app made
        store = app.state.server.ledger.store
        agent = Client("openai", server.base_url, CLIENT_KEY, stream=stream, session="commits-1")
        agent.messages.append({"role": "user", "content": "search query-001"})
        before = COMMITS.snapshot()
        _, calls = agent.send()
        asked = COMMITS.snapshot()
        assert [name for _, name, _ in calls] == ["web_search"]
        # The turn left open for the client's call: its directive, step, plan and the server's notes, one commit.
        assert asked["commits"] - before["commits"] == 1 and asked["behind"] - before["behind"] >= 4
        assert not store.written_behind("commits-1")  # what the client holds is durable
        agent.give_results(calls)
        assert agent.resume() == "Done: three notes."
