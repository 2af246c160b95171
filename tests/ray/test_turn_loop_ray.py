"""The turn loop on Ray (the LedgerActor, AssemblerActor and EvidenceActor behind RayServices), against the
scripted OpenAI-compatible model served on the loopback HTTP server (the actors are other processes).
The same loop in this process: tests/unit/test_turn_loop.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.httpserver import serve
from tests.fakes.scripted import PROFILE, Scripted, completion, fixed, notes_workspace, tool_surface
from vak_context.agent.loop import TurnConfig, TurnLoop
from vak_context.agent.workspace import Workspace
from vak_context.context.capacity.profile import CapacityProfile, Ewma, Horizon, ProfileKey
from vak_context.context.request.assemble import system_prompt
from vak_context.events.envelope import Mapper
from vak_context.providers.base import RetryPolicy
from vak_context.providers.openai_compat import OpenAICompatProvider


@pytest.fixture()
def workspace(tmp_path: Path) -> Workspace:
    return notes_workspace(tmp_path)


@pytest.mark.ray
async def test_the_same_loop_runs_through_the_actors_on_ray(ray_cluster: Any, tmp_path: Path,
                                                            workspace: Workspace) -> None:
    """On Ray, the loop appends through the LedgerActor, assembles in the AssemblerActor and stores results
    through the EvidenceActor: the ledger holds the directive, both steps, the result and the card."""
    import ray

    from vak_context.actors.factory import ledger_actor
    from vak_context.actors.turn_services import RayServices

    root = tmp_path / "ledger"
    script = Scripted([fixed(completion(calls=[("grep", {"pattern": "beta"})])), fixed(completion("beta is on line 2"))])
    surface = tool_surface()
    with serve(script.handle) as server:
        async with httpx.AsyncClient() as client:
            provider = OpenAICompatProvider(client, base_url=server.base_url, retry=RetryPolicy(attempts=1))
            config = TurnConfig(model="scripted", provider="openai-compat", system=system_prompt(surface.catalogue()),
                                surface=surface, max_steps=4, max_tokens=64)
            loop = TurnLoop(RayServices(root, "s1"), provider, PROFILE, config, workspace=workspace)
            report = await loop.run("where is beta?")
    assert report.outcome == "completed" and report.answer == "beta is on line 2"
    actor = ledger_actor(root)
    kinds = [e.kind for e in ray.get(actor.entries.remote("s1", 0, None))]
    for kind in ("directive", "plan", "assistant_step", "receipt", "capacity_profile", "evidence_body",
                 "tool_result", "turn_card"):
        assert kind in kinds, kind
    assert kinds.count("assistant_step") == 2
    results = [e for e in ray.get(actor.entries.remote("s1", 0, None)) if e.kind == "tool_result"]
    assert "notes.txt:2:beta" in Mapper().payload_of(results[0]).content


@pytest.mark.ray
async def test_a_turn_that_cannot_fit_fails_closed_on_ray_too(ray_cluster: Any, tmp_path: Path,
                                                              workspace: Workspace) -> None:
    """RequestTooLarge raised inside the AssemblerActor reaches the loop as itself (not a Ray error): the
    turn closes as failed with the reason and nothing is sent."""
    from vak_context.actors.turn_services import RayServices

    tiny = CapacityProfile(ProfileKey("openai-compat", "scripted"), 32_768, Horizon(300, 0.9, 0.0), Ewma(0.25, 3), 64)
    script = Scripted([])
    surface = tool_surface()
    with serve(script.handle) as server:
        async with httpx.AsyncClient() as client:
            provider = OpenAICompatProvider(client, base_url=server.base_url, retry=RetryPolicy(attempts=1))
            config = TurnConfig(model="scripted", provider="openai-compat", system=system_prompt(surface.catalogue()),
                                surface=surface, max_steps=2, max_tokens=64)
            report = await TurnLoop(RayServices(tmp_path / "ledger", "s2"), provider, tiny, config,
                                    workspace=workspace).run("hello")
    assert report.outcome == "failed" and "cannot fit" in report.answer and script.bodies == []
