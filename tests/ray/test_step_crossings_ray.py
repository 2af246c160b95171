"""How many process crossings a step's request costs on Ray (issue 37 item 1), counted, not timed.

The folder's Ledger, Planner and Assembler actors are the real classes with each received call noted
(``tests/fakes/counting_actors.py``), created under the names the engine's wiring gets them by; the turn
loop runs two turns of a tool call and an answer against the scripted model on loopback. A step's critical
path is the driver's one call to the AssemblerActor and every actor call made while it is answered (the
calls the Ledger and Planner actors received between its arrival and its return: the machine's monotonic
clock is one clock for every process). The second turn is counted (the first warms the actors' views).

* A step that keeps the turn's frozen plan: the driver's call, nothing else (the driver hands the AssemblerActor
  what the ledger appended since its view ends, as the driver's own last append got them back): 1, at most 2.
* A step that plans (a turn's first step): the driver's call, the one call to the PlannerActor (handed the
  entries the assembler was handed, so it reads none itself) and the plan entry's append: 3, the issue's
  target (driver → Assembler, Assembler → Planner, Assembler → Ledger commit).
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.counting_actors import Note, counting
from tests.fakes.httpserver import serve
from tests.fakes.ray_folders import kill_folder_actors
from tests.fakes.scripted import PROFILE, Scripted, completion, fixed, notes_workspace, tool_surface
from vak_context.agent.loop import TurnConfig, TurnLoop
from vak_context.context.request.assemble import system_prompt
from vak_context.providers.base import RetryPolicy
from vak_context.providers.openai_compat import OpenAICompatProvider

pytestmark = pytest.mark.ray

KEPT_STEP = 2  # at most: the driver's call (the assembler reads the ledger only across a gap)
PLANNED_STEP = 3  # at most: the driver's call, the planner's call, the plan's append


def _counting_actors(root: str) -> tuple[Any, Any, Any]:
    """The folder's Ledger, Planner and Assembler actors as ``vak_context.actors.factory`` makes them (same
    names, namespace and options), each class wrapped to note the calls it receives."""
    from vak_context.actors.assembler import AssemblerActor
    from vak_context.actors.factory import (
        LEDGER_THREADS,
        NAMESPACE,
        assembler_actor_name,
        ledger_actor_name,
        planner_actor_name,
        remote_class,
    )
    from vak_context.actors.ledger.actor import LedgerActor
    from vak_context.actors.planner import PlannerActor
    from vak_context.context.capacity.tokens import PRIOR_TOKENS_PER_CHAR

    options = {"namespace": NAMESPACE, "lifetime": "detached", "max_restarts": -1, "max_task_retries": 0,
               "num_cpus": 0}
    ledger = remote_class(counting(LedgerActor)).options(
        name=ledger_actor_name(root), max_concurrency=LEDGER_THREADS, **options).remote(root)
    planner = remote_class(counting(PlannerActor)).options(name=planner_actor_name(root), **options).remote(
        root, ledger, PRIOR_TOKENS_PER_CHAR)
    assembler = remote_class(counting(AssemblerActor)).options(name=assembler_actor_name(root), **options).remote(
        root, ledger, None, PRIOR_TOKENS_PER_CHAR, planner=planner)
    return ledger, planner, assembler


def _steps(assembler: list[Note], nested: list[Note]) -> list[Counter[str]]:
    """Per ``assemble`` call the driver made, the calls on its critical path: itself and each call another
    counted actor received while it was being answered."""
    steps = []
    for name, arrived, returned in assembler:
        if name != "assemble":
            continue
        inside = Counter(n for n, a, r in nested if arrived <= a and r <= returned)
        inside["assemble"] += 1
        steps.append(inside)
    return steps


async def test_a_step_crosses_processes_at_most_twice_or_three_times_when_it_plans(ray_cluster: Any, tmp_path: Path) -> None:
    import ray

    from vak_context.actors.turn_services import RayServices

    root = os.path.realpath(tmp_path / "ledger")
    ledger, planner, assembler = _counting_actors(root)
    workspace = notes_workspace(tmp_path)
    grep = completion(calls=[("grep", {"pattern": "beta"})])
    script = Scripted([fixed(grep), fixed(completion("beta is on line 2"))] * 2)
    surface = tool_surface()
    try:
        with serve(script.handle) as server:
            async with httpx.AsyncClient() as client:
                provider = OpenAICompatProvider(client, base_url=server.base_url, retry=RetryPolicy(attempts=1))
                config = TurnConfig(model="scripted", provider="openai-compat",
                                    system=system_prompt(surface.catalogue()), surface=surface, max_steps=4,
                                    max_tokens=64)
                loop = TurnLoop(RayServices(root, "s1"), provider, PROFILE, config, workspace=workspace)
                first = await loop.run("where is beta?")
                for actor in (ledger, planner, assembler):  # the first turn built the views: not counted
                    await actor.received.remote()
                second = await loop.run("where is beta again?")
        assert first.outcome == second.outcome == "completed" and len(second.steps) == 2
        nested = [*ray.get(ledger.received.remote()), *ray.get(planner.received.remote())]
        steps = _steps(ray.get(assembler.received.remote()), nested)
        assert len(steps) == 2
        planned, kept = steps
        # The turn's first step plans: one call to the PlannerActor, which reads nothing (handed the entries),
        # and the plan's append; the ledger is not read (the driver handed over what its append got back).
        assert planned == Counter({"assemble": 1, "plan_step": 1, "append": 1}), planned
        assert sum(planned.values()) <= PLANNED_STEP
        # The second step keeps the frozen plan: no planner, no append, no read.
        assert kept == Counter({"assemble": 1}), kept
        assert sum(kept.values()) <= KEPT_STEP
    finally:
        kill_folder_actors(root)
