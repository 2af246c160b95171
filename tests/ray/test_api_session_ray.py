"""Issue 23's done-when session on Ray, through the public API only (``import vak_context``): the same 26(+1)
turns as in-process (tests/fakes/done_when.py: directives, drivers and checks shared with
tests/unit/test_callers_loop.py), with the embedder's two tools and a scripted model, once through the
engine's loop (``session.run``) and once through the caller's loop (``session.begin``, OpenAI chat: the
wire of the key-less ``openai-compat:`` spec), on ``Engine.open(folder, ray=<the tests' local cluster>)``.

On Ray each role is its actor and the actors reach the model only over HTTP, so the scripted model
(tests/fakes/wire_models.py) is served on loopback (tests/fakes/httpserver.py) and bound with
``base_url``: the engine's loop sends its turns there, the PlannerActor its packet summaries (no summariser
wired here), and the AssemblerActor asks for llama.cpp's count endpoints (404: it estimates). The
ProbeActor probes a loopback model between turns; this server refuses the probe's requests (a 400 the
probe ends on, recorded as a failed probe), so no measured profile replaces the session's ``window=``
halfway through. Every ``plan`` entry of each session names the PlannerActor."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import vak_context
from tests.fakes.done_when import (
    FailingHook,
    Run,
    callers_loop,
    check_callers_loop,
    check_session,
    engines_loop,
)
from tests.fakes.embedder import make_tools
from tests.fakes.httpserver import LoopbackServer, serve
from tests.fakes.ray_folders import kill_folder_actors
from tests.fakes.wire_models import FORMATS, WireModel
from vak_context.context.history.packets import SUMMARISER_SYSTEM
from vak_context.events.envelope import Mapper
from vak_context.events.payloads import Activity, PlanRecord
from vak_context.storage.ledger import LedgerStore

pytestmark = pytest.mark.ray

SPEC = "openai-compat:scripted"  # no key: nothing to put in the actors' environment
WINDOW = 9_500  # as in-process (tests/unit/test_callers_loop.py): packets well before turn 26
SESSION = "agent-1"
MARK = SUMMARISER_SYSTEM[:40]


class Served:
    """The scripted model as the actors and the driver reach it: turn requests (they carry the embedder's
    tools) and packet summaries go to the WireModel; the probe's requests get a 400 and are counted."""

    def __init__(self) -> None:
        self.model = WireModel(FORMATS["openai"])
        self.refused = 0
        self._lock = threading.Lock()

    def handle(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith(self.model.wire.path):
            text = request.content.decode()
            try:
                body = json.loads(text)
            except ValueError:  # not a chat body (a probe cut off when its actor is killed at the end)
                return httpx.Response(400, json={"error": {"message": "not JSON", "type": "invalid_request_error"}})
            tools = [t["function"]["name"] for t in body.get("tools") or []]
            if "web_search" not in tools and MARK not in text:
                with self._lock:
                    self.refused += 1
                return httpx.Response(400, json={"error": {"message": "this scripted server answers no probes",
                                                           "type": "invalid_request_error"}})
        return self.model.handle(request)


@pytest.fixture
def served() -> Iterator[tuple[Served, LoopbackServer]]:
    fake = Served()
    with serve(fake.handle) as server:
        yield fake, server


@pytest.fixture
def cluster(ray_cluster: Any) -> str:
    """The address of the tests' one local Ray (this process joined it already: the engine keeps it up)."""
    import ray

    return str(ray.get_runtime_context().gcs_address)


def _check_on_ray(run: Run, folder: Path) -> None:
    """What the folder's ledger shows of the pipeline: every plan by the PlannerActor, which summarised the
    packets; the ProbeActor's probes between turns each cancelled (the next turn started) or failed (the
    server's 400), none writing a profile."""
    mapper = Mapper()
    with LedgerStore(folder, readonly=True) as store:
        payloads = [mapper.payload_of(e) for e in store.entries(SESSION)]
        probes = [(e.kind, mapper.payload_of(e)) for e in store.entries("capacity")]
    producers = [p.producer for p in payloads if isinstance(p, PlanRecord)]
    assert producers and set(producers) == {"PlannerActor"}, producers
    assert any(isinstance(p, Activity) and p.activity == "packet.summarise" for p in payloads)
    assert probes and {k for k, _ in probes} == {"activity"}
    assert {p.detail["outcome"] for _, p in probes if isinstance(p, Activity)} <= {"cancelled", "failed"}
    assert all(s.estimated_tokens > 0 for r in run.results.values() for s in r.steps)


async def test_the_engines_loop_on_ray(cluster: str, tmp_path: Path, served: tuple[Served, LoopbackServer]) -> None:
    fake, server = served
    folder = tmp_path / "ledger"
    functions, ran = make_tools()
    hook = FailingHook()
    try:
        with vak_context.Engine.open(folder, ray=cluster) as engine:
            assert engine.on_ray
            async with engine.session(SESSION, model=SPEC, base_url=server.base_url, tools=functions,
                                      window=WINDOW, on_step=hook) as session:
                run = await engines_loop(session, hook)
                assert session.cards() == run.cards  # the sync form (it waits on the EvidenceActor) agrees
                assert session.declared_window == WINDOW  # no probe's profile replaced the caller's window
        check_session(run, fake.model, ran)
        assert hook.steps[0].calls == ("web_search",)
        _check_on_ray(run, folder)
    finally:
        kill_folder_actors(folder)


async def test_the_callers_loop_on_ray(cluster: str, tmp_path: Path, served: tuple[Served, LoopbackServer]) -> None:
    fake, server = served
    folder = tmp_path / "ledger"
    functions, ran = make_tools()
    try:
        with vak_context.Engine.open(folder, ray=cluster) as engine:
            async with engine.session(SESSION, model=SPEC, base_url=server.base_url, tools=functions,
                                      window=WINDOW) as session:
                run = await callers_loop(session, fake.model, functions)
        check_callers_loop(run, fake.model, ran, wire="openai-compat")
        _check_on_ray(run, folder)
    finally:
        kill_folder_actors(folder)
