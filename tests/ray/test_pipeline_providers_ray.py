"""The whole pipeline on Ray for a hosted provider: a session bound to ``anthropic:`` and one bound to
``gemini:`` packet on Ray with no summariser wired by hand, and every ``plan`` entry names the PlannerActor.

The model is a scripted loopback server speaking the provider's documented bodies
(tests/fakes/provider_bodies): turn requests get a plain answer, summariser calls (the request carries
``SUMMARISER_SYSTEM``) a short summary. The actors build the adapter from the endpoint's spec inside
their own processes, reading the key from the environment, which holds it before the local cluster
starts (set at import, before any Ray fixture); the key never travels through Ray.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.httpserver import serve
from tests.fakes.provider_bodies.wire import body
from tests.fakes.scripted import tool_surface
from tests.fakes.sessions import ledger_session
from vak_context.agent.endpoint import EndpointSpec
from vak_context.agent.loop import TurnConfig, TurnLoop
from vak_context.context.capacity.profile import CapacityProfile, Ewma, Horizon, ProfileKey
from vak_context.context.history.packets import SUMMARISER_SYSTEM
from vak_context.context.request.assemble import system_prompt
from vak_context.events.envelope import Mapper
from vak_context.events.payloads import Activity, PlanRecord
from vak_context.providers.base import RetryPolicy
from vak_context.providers.registry import make_provider

pytestmark = pytest.mark.ray

KEYS = {"ANTHROPIC_API_KEY": "sk-ant-pipeline-canary", "GEMINI_API_KEY": "gm-pipeline-canary"}
for _name, _value in KEYS.items():  # before the session's local Ray starts: its workers inherit them
    os.environ.setdefault(_name, _value)

SUMMARY = "The earlier turns looked up prices, files and logs; nothing is pending."
MARK = SUMMARISER_SYSTEM[:40]  # plain words: the same in any provider's JSON


class Hosted:
    """A scripted Anthropic or Gemini server: what it saw and answered."""

    def __init__(self, provider: str) -> None:
        self.provider = provider
        self.turns = 0
        self.summaries = 0
        self.keys: set[str] = set()
        self.lock = threading.Lock()

    def handle(self, request: httpx.Request) -> httpx.Response:
        with self.lock:
            self.keys.add(request.headers.get("x-api-key") or request.headers.get("x-goog-api-key") or "")
            text = request.content.decode()
            # The providers' token-count endpoints (the documented replies), about 4 characters a token.
            if request.url.path.endswith("/count_tokens"):
                return httpx.Response(200, json={"input_tokens": len(text) // 4 + 1})
            if request.url.path.endswith(":countTokens"):
                return httpx.Response(200, json={"totalTokens": len(text) // 4 + 1})
            summary = MARK in text
            self.summaries += summary
            self.turns += not summary
            return httpx.Response(200, json=self._reply(SUMMARY if summary else "Copper is not in the earlier turns."))

    def _reply(self, text: str) -> dict[str, Any]:
        if self.provider == "anthropic":
            b = body("anthropic", "message")
            b["content"], b["stop_reason"] = [{"type": "text", "text": text}], "end_turn"
            return dict(b)
        b = body("gemini", "generate")
        b["candidates"][0]["content"]["parts"] = [{"text": text}]
        return dict(b)


def _profile(key: ProfileKey, horizon: int) -> CapacityProfile:
    return CapacityProfile(key, 100_000, Horizon(horizon, 0.9, 0.0), Ewma(0.25, 3), 256)


@pytest.mark.parametrize(("provider", "model", "path"), [
    ("anthropic", "claude-test", "/v1"), ("gemini", "gemini-test", "/v1beta")])
async def test_a_hosted_session_packets_on_ray_and_every_plan_names_the_planner(
        ray_cluster: Any, tmp_path: Path, provider: str, model: str, path: str) -> None:
    """Fourteen earlier turns and a small horizon: the turn's plan needs a packet, and the PlannerActor
    writes its summary through the bound provider (built from the endpoint's spec, its key from the
    workers' environment); the plan entries name the PlannerActor, and ``explain`` still matches."""
    import ray

    from vak_context.actors.factory import ledger_actor
    from vak_context.actors.turn_services import ray_services

    root = tmp_path / "ledger"
    store, _view = ledger_session(root, 14)
    store.close()
    fake = Hosted(provider)
    surface = tool_surface()
    with serve(fake.handle) as server:
        endpoint = EndpointSpec.of(f"{provider}:{model}", base_url=server.url + path, window_tokens=8192)
        assert endpoint.api_key is None  # nothing secret rides on the step request
        key = ProfileKey(provider, model)
        services, target = ray_services(root, "s", endpoint, key, probe=False)
        assert target is None
        async with httpx.AsyncClient(trust_env=False) as client:
            bound, _ = make_provider(endpoint.spec, client, base_url=endpoint.base_url, retry=RetryPolicy(attempts=1))
            config = TurnConfig(model=model, provider=provider, system=system_prompt(surface.catalogue()),
                                surface=surface, max_steps=2, max_tokens=64, endpoint=endpoint)
            report = await TurnLoop(services, bound, _profile(key, 2_400), config).run("And the copper price?")
    assert report.outcome == "completed", report.answer
    assert fake.summaries >= 1 and fake.turns == 1, [s.fidelity for s in report.steps]
    assert fake.keys == {KEYS["ANTHROPIC_API_KEY" if provider == "anthropic" else "GEMINI_API_KEY"]}
    mapper = Mapper()
    payloads = [mapper.payload_of(e) for e in ray.get(ledger_actor(root).entries.remote("s", 0, None))]
    plans = [(e, p) for e, p in zip(ray.get(ledger_actor(root).entries.remote("s", 0, None)), payloads, strict=True)
             if isinstance(p, PlanRecord)]
    assert plans and all(p.producer == "PlannerActor" for _, p in plans)
    assert any(p.kind == "compaction" for p in payloads)
    summarised = [p for p in payloads if isinstance(p, Activity) and p.activity == "packet.summarise"]
    assert summarised and summarised[0].detail["model"] == model
    explained = ray.get(services.planner.explain.remote(plans[-1][0].id))
    assert explained["matches"], explained
    assert not any(v in json.dumps([p.model_dump(mode="json") for p in payloads]) for v in KEYS.values())
