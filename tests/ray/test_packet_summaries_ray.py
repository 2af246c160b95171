"""Issue 33 item 3 on Ray: the 40-turn session of tests/unit/test_packet_summaries.py through the engine's
own loop on ``Engine.open(folder, ray=...)``, where the PlannerActor holds the summariser (built from the
session's endpoint) and writes each packet's summary once, when a turn closes (the loop asks the
AssemblerActor, which asks the PlannerActor), before the request that carries it. The scripted model is served on loopback
(the actors reach it over HTTP); it refuses the ProbeActor's probes, so the caller's window stands."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import vak_context
from tests.fakes.embedder import make_tools
from tests.fakes.httpserver import serve
from tests.fakes.packet_session import PacketModel, directive, packet_figures, summary_timing
from tests.fakes.ray_folders import kill_folder_actors
from vak_context.events.envelope import Mapper
from vak_context.events.payloads import Activity, PlanRecord
from vak_context.storage.ledger import LedgerStore

pytestmark = pytest.mark.ray


@pytest.fixture
def cluster(ray_cluster: Any) -> str:
    import ray

    return str(ray.get_runtime_context().gcs_address)


async def test_the_planner_actor_summarises_each_packet_range_once(cluster: str, tmp_path: Path) -> None:
    model = PacketModel(summaries="answer")
    folder = tmp_path / "ledger"
    tools, _ = make_tools()
    try:
        with serve(model.handle) as server:
            with vak_context.Engine.open(folder, ray=cluster) as engine:
                async with engine.session("agent-1", model="openai-compat:scripted", base_url=server.base_url,
                                          tools=tools, window=6_000, horizon=6_000) as session:
                    for turn in range(1, 41):
                        assert (await session.run(directive(turn))).outcome == "completed"
        f = packet_figures(model)
        assert f.packets and f.model_summary >= 0.9 * len(f.packets) and f.bare == 0
        assert Counter(f"{a}-{b}" for a, b in model.summary_ranges()) == Counter(set(f.ranges))
        mapper = Mapper()
        with LedgerStore(folder, readonly=True) as store:
            payloads = [mapper.payload_of(e) for e in store.entries("agent-1")]
        assert {p.producer for p in payloads if isinstance(p, PlanRecord)} == {"PlannerActor"}
        summaries = [p for p in payloads if isinstance(p, Activity) and p.activity == "packet.summarise"]
        assert sum(len(a.detail["calls"]) for a in summaries) == len(model.summary_prompts)
        ahead, on_path, carried = summary_timing(folder, "agent-1")
        assert ahead and on_path == [] and set(carried.values()) == {"before"}, (ahead, on_path, carried)
        print(f"\non Ray, horizon 6000: {f.model_summary} of {len(f.packets)} packet-bearing requests carry a model "
              f"summary; {len(model.summary_prompts)} summariser calls for {len(set(f.ranges))} ranges")
    finally:
        kill_folder_actors(folder)
