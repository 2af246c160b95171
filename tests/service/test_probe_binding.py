"""The profile the ProbeActor writes is what the next turn binds (in one process; the two-``vak turn`` test on
Ray is the CLI's): turn 1 ends, ``turn_finished`` starts a probe of the bound model (built from its
endpoint: ``probe_request_for``), the probe writes its profile, and turn 2's start adopts it
(``InProcessServices.turn_started`` hands the loop the newer profile), so every receipt of turn 2 is
fed back into the probe's profile.

The model is the scripted threshold model on a loopback server for the probe's requests (its adapter is
built inside the actor from the spec and URL, as on Ray); the turns' own requests (list-of-blocks content,
which the threshold model does not read) get a plain scripted answer from the same server.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from tests.fakes.httpserver import Handler, serve
from tests.fakes.scripted import completion, tool_surface
from tests.fakes.threshold import ThresholdModel
from vak_context.actors.local_services import InProcessServices
from vak_context.actors.probe import ProbeActor, probe_request_for
from vak_context.agent.endpoint import EndpointSpec
from vak_context.agent.loop import TurnConfig, TurnLoop
from vak_context.agent.probe import ProbeSettings
from vak_context.config import VakConfig
from vak_context.context.capacity.profile import ProfileKey, from_record, metadata_profile
from vak_context.context.request.assemble import system_prompt
from vak_context.context.request.messages import ModelContext
from vak_context.events.envelope import Mapper
from vak_context.events.payloads import CapacityProfileRecord, Directive
from vak_context.providers.openai_compat import OpenAICompatProvider
from vak_context.storage.ledger import LedgerStore

QUICK = ProbeSettings(samples=3, controls=1, first_rung=1024, max_sizes=3, cache_rung=False)


def _model(threshold: ThresholdModel) -> Handler:
    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/chat/completions"):
            last = json.loads(request.content)["messages"][-1]["content"]
            if not isinstance(last, str):  # a turn's request, not the probe's
                return httpx.Response(200, json=completion("The audit log shows two logins."))
        return threshold.handle(request)

    return handle


async def test_the_profile_the_probe_writes_is_what_the_next_turn_binds(tmp_path: Path) -> None:
    model = ThresholdModel(3000, n_ctx=8192)
    key = ProfileKey("openai-compat", "scripted")
    surface = tool_surface()
    config = TurnConfig(model="scripted", provider="openai-compat", system=system_prompt(surface.catalogue()),
                        surface=surface, max_steps=2, max_tokens=64)
    bound = metadata_profile(key, ModelContext(provider="openai-compat", model="scripted", declared_window=8192,
                                               source="the test"), now=0.0)
    with serve(_model(model)) as server, LedgerStore(tmp_path / "ledger") as store:
        url = server.base_url
        target = probe_request_for(EndpointSpec.of("openai-compat:scripted", base_url=url, window_tokens=8192),
                                  key, settings=QUICK)
        assert target.key == key and target.is_local
        probe = ProbeActor(store, config=VakConfig())
        services = InProcessServices(store, "s", probe=probe, probe_request=target)
        async with httpx.AsyncClient(trust_env=False) as client:
            loop = TurnLoop(services, OpenAICompatProvider(client, base_url=url), bound, config)
            await loop.run("What does the audit log say?")
            assert await probe.wait(key, timeout=60) == "done"
            record = await probe.profile(key)
            assert record is not None
            probed = from_record(record)
            assert loop.profile.provenance.probed_at is None  # turn 1 ran on the metadata profile
            await loop.run("And what came after that?")
        mapper = Mapper()
        entries = [mapper.payload_of(e) for e in store.entries("s")]
        written = [p for p in store.entries("capacity") if p.kind == "capacity_profile"]
    assert len(written) == 1  # the probe's profile, in the probe's session
    turn2 = [i for i, p in enumerate(entries) if isinstance(p, Directive)][1]
    after = [from_record(p) for p in entries[turn2:] if isinstance(p, CapacityProfileRecord)]
    assert after, "turn 2 recorded no profile"
    assert all(p.provenance.probed_at == probed.provenance.probed_at for p in after)
    assert all(p.instruction_horizon.tokens == probed.instruction_horizon.tokens for p in after)
    assert probed.instruction_horizon.tokens != bound.instruction_horizon.tokens
