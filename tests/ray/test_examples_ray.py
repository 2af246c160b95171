"""examples/ray_loop.py runs in the suite: the engine's loop on Ray (the session's Ray, joined) with the
example's own tool, against the scripted OpenAI-compatible model served on loopback so the actors in other
processes reach it too (the AssemblerActor's counter and the ProbeActor's ladder)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
import ray

from tests.fakes.embedder import ScriptedModel
from tests.fakes.httpserver import serve
from tests.fakes.threshold import ThresholdModel
from vak_context.actors.factory import (
    NAMESPACE,
    assembler_actor_name,
    evidence_actor_name,
    ledger_actor_name,
    probe_actor,
    probe_actor_name,
)
from vak_context.context.capacity.profile import ProfileKey
from vak_context.storage.ledger import LedgerStore

pytestmark = pytest.mark.ray
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Served:
    """The scripted model for the turns; the probe's requests (they carry ``probe_ack``) and the metadata
    go to a threshold model, as a server answers a ladder."""

    def __init__(self) -> None:
        self.turns, self.ladder = ScriptedModel(), ThresholdModel(3000, n_ctx=8192)

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        probing = path.endswith("/chat/completions") and any(
            t["function"]["name"] == "probe_ack" for t in json.loads(request.content).get("tools") or [])
        if probing or path.endswith(("/props", "/models")):
            status, out = self.ladder.respond(path, request.content)
            return httpx.Response(status, json=out)
        return self.turns.handle(request)


async def test_ray_loop_example(ray_cluster: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "ledger"
    served = Served()
    try:
        with serve(served.handle) as server:
            await load("ray_loop").main(folder=str(folder), model="openai-compat:scripted", ray=True,
                                        base_url=server.base_url, window=8_000)
            # The probe the first turn's end started may still run: let it end before the server goes.
            ray.get(probe_actor(folder).wait.remote(ProfileKey("openai-compat", "scripted"), 120))
        out = capsys.readouterr().out
        assert out.count("[completed] Done:") == 2 and "2 turns closed" in out, out
        assert ray.is_initialized()  # the engine joined this session's Ray and left it running
        with LedgerStore(folder, readonly=True) as store:
            kinds = [e.kind for e in store.entries("ray-demo")]
        assert kinds.count("turn_card") == 2 and kinds.count("tool_result") == 2 and "plan" in kinds
    finally:
        for name in (ledger_actor_name, probe_actor_name, assembler_actor_name, evidence_actor_name):
            try:
                ray.kill(ray.get_actor(name(folder), namespace=NAMESPACE), no_restart=True)
            except ValueError:
                pass  # never started
