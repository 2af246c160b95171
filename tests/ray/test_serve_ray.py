"""``vak serve --ray``: the app on an engine on the tests' local Ray (``Engine.open(folder, ray=address)``, as
``vak serve --ray ADDRESS`` opens it), under uvicorn on 127.0.0.1, in front of the scripted upstream on
loopback (the actors reach the model only over HTTP). The official ``openai`` client holds a 3-turn
conversation with tool calls; the ledger shows every plan made by the PlannerActor and each client message
stored once. The ProbeActor's requests (they carry neither the client's tools nor a packet summary) get a
400, so no measured profile replaces the server's window mid-conversation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.embedder import CLOCK_QUERY
from tests.fakes.httpserver import serve
from tests.fakes.ray_folders import kill_folder_actors
from tests.fakes.serve_clients import Client
from tests.fakes.vak_server import CLIENT_KEY, running
from tests.fakes.wire_models import FORMATS, WireModel
from vak_context.context.history.packets import SUMMARISER_SYSTEM
from vak_context.events.envelope import Mapper
from vak_context.events.payloads import PlanRecord
from vak_context.serve.conversation import read_held
from vak_context.serve.protocol import read_openai
from vak_context.storage.ledger import LedgerStore

pytestmark = pytest.mark.ray

SESSION = "support-ray"
DIRECTIVES = (f"search {CLOCK_QUERY}", "run make check", "search query-003")


def test_vak_serve_on_ray_holds_a_conversation(ray_cluster: Any, tmp_path: Path) -> None:
    import ray

    address = str(ray.get_runtime_context().gcs_address)
    model = WireModel(FORMATS["openai"])
    refused: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith(model.wire.path):
            text = request.content.decode()
            tools = [t["function"]["name"] for t in json.loads(text).get("tools") or []]
            if "web_search" not in tools and SUMMARISER_SYSTEM[:40] not in text:
                refused.append(text[:80])
                return httpx.Response(400, json={"error": {"message": "this scripted server answers no probes",
                                                           "type": "invalid_request_error"}})
        return model.handle(request)

    folder = tmp_path / "ledger"
    try:
        with serve(handle) as upstream, running(folder, "openai-compat:scripted", upstream.base_url,
                                                ray=address) as server:
            client = Client("openai", server.base_url, CLIENT_KEY, session=SESSION)
            answers = [client.turn(d) for d in DIRECTIVES]
        assert all(a.startswith("Done:") for a in answers), answers
        assert client.seen == ["web_search", "run_command", "web_search"]
        mapper = Mapper()
        with LedgerStore(folder, readonly=True) as store:
            payloads = [mapper.payload_of(e) for e in store.entries(SESSION)]
            held = read_held(store, SESSION)
            sessions = store.sessions()
    finally:
        kill_folder_actors(folder)
    producers = [p.producer for p in payloads if isinstance(p, PlanRecord)]
    assert producers and set(producers) == {"PlannerActor"}, producers
    # Each client message once, in order, in the one session (no fork).
    items = read_openai({"messages": client.messages}).items
    assert held.digests == [i.digest() for i in items] and len(set(held.digests)) == len(items)
    assert not [n for n in sessions if n.startswith(f"{SESSION}.f")]
