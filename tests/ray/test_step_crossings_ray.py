"""How many process crossings a step costs on Ray (issue 37 item 1), counted, not timed.

The folder's Ledger, Planner, Assembler and Evidence actors are the real classes with each received call
noted (``tests/fakes/counting_actors.py``), created under the names the engine's wiring gets them by; the
turn loop runs two turns of two tool calls and an answer against the scripted model on loopback. Every
actor call of each step is counted, the driver's and those they lead to (``_steps``: the machine's monotonic
clock is one clock for every process). The second turn is counted (the first warms the actors' views).

* The pass (the driver's one call to the AssemblerActor) and the AssemblerActor's one commit: what the turn
  wrote since the last pass (the assistant step, its receipt and profile, each result's evidence body and the
  tool result naming it, all chained by the driver on the head the last pass handed back, so their ids are
  known without a call, and the plan entry the pass before handed back unwritten), sent as the pass begins so
  it lands beside the plan and the projection: 2 on a step that keeps the turn's frozen plan; on the turn's
  first step, which has nothing of its own to commit (the directive's append was synced beside it), the pass
  and the PlannerActor's call (handed the entries, so it reads none): 2, and its plan entry goes with the next
  commit. A step that plans with something to commit: 3, the issue's target.
* Nothing else: the driver makes no call of its own for the step's entries or its results.
* At the turn's edge, from the third turn on (the driver knows the session's entries from where the EvidenceActor's
  index ended at the close before): the close commits the turn's last entries with its card, handed what came
  before them (no read), and the plan made ahead is handed the closed turn's entries (no read).

* A step whose plan writes what it needs first (a reset-with-handoff here; a packet summary's activity and
  compaction entries the same way): the same. The PlannerActor chains those entries on the head it was
  handed and hands them back with the plan; the AssemblerActor hands them back with the plan entry chained
  after them, for the next commit, which writes them before the turn's next entries (before, 7 calls: the planner's commit of the turn's entries, its append
  of the reset and read of it back, the assembler's commit and, the chain having moved, its plan's append
  at the head, then the driver's own append of the step's entries).

Before this the driver waited on 2 calls of a tool step (the pass, the assistant step's append) and a tool
step made 5 in all (7 when it planned), each result 3 of them (the EvidenceActor's call and its two appends).
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.counting_actors import MOST, counting_actors, steps_of
from tests.fakes.httpserver import serve
from tests.fakes.ray_folders import kill_folder_actors
from tests.fakes.scripted import PROFILE, Scripted, completion, fixed, notes_workspace, tool_surface
from vak_context.agent.loop import TurnConfig, TurnLoop
from vak_context.context.request.assemble import system_prompt
from vak_context.providers.base import RetryPolicy
from vak_context.providers.openai_compat import OpenAICompatProvider

pytestmark = pytest.mark.ray

PASS = 1  # the driver's call (the assembler reads the ledger only across a gap)
COMMIT = 1  # the AssemblerActor's append: the turn's entries since the last pass (the plan entry first)
PLANNER = 1  # the PlannerActor's call, on a step that plans


async def test_a_step_is_one_pass_on_ray(ray_cluster: Any, tmp_path: Path) -> None:
    """Every actor call a step makes on Ray, the driver's own and those they lead to: the pass, the assembler's
    one commit, and the planner's call when the step plans; the driver makes no other."""
    import ray

    from vak_context.actors.turn_services import RayServices

    root = os.path.realpath(tmp_path / "ledger")
    actors = counting_actors(root)
    greps = [completion(calls=[("grep", {"pattern": p})]) for p in ("beta", "gamma")]
    script = Scripted([*map(fixed, greps), fixed(completion("beta is on line 2"))] * 3)
    surface = tool_surface()
    try:
        with serve(script.handle) as server:
            async with httpx.AsyncClient() as client:
                provider = OpenAICompatProvider(client, base_url=server.base_url, retry=RetryPolicy(attempts=1))
                config = TurnConfig(model="scripted", provider="openai-compat",
                                    system=system_prompt(surface.catalogue()), surface=surface, max_steps=4,
                                    max_tokens=64)
                services = RayServices(root, "s1")
                loop = TurnLoop(services, provider, PROFILE, config, workspace=notes_workspace(tmp_path))
                first = await loop.run("where is beta?")
                for actor in actors.values():  # the first turn built the views: not counted
                    await actor.received.remote()
                second = await loop.run("where is beta again?")
                received = {k: await a.received.remote() for k, a in actors.items()}
                third = await loop.run("where is beta a third time?")
                after = {k: await a.received.remote() for k, a in actors.items()}
        assert first.outcome == second.outcome == third.outcome == "completed" and len(second.steps) == 3
        # The second turn's start asks no stated items: the first's close handed back those in force, and nothing
        # written since states one (before, the EvidenceActor's call and its read of the ledger).
        assert "stated" not in [name for name, _, _ in received["evidence"]], received["evidence"]
        planned, kept, answered = steps_of(received)
        # The turn's first step plans: the AssemblerActor asks the PlannerActor (which reads nothing: it is
        # handed the entries) and hands its plan entry back chained, not committed; the step's own entries (the
        # assistant step, whose id the receipt and the rules name, its receipt and profile, the result's body and
        # the tool result) are chained by the driver after it and committed with it by the next pass: the driver
        # makes no other call.
        assert planned == [("assembler.assemble", ["planner.plan_step"])], planned
        assert sum(1 + len(n) for _, n in planned) == PASS + PLANNER < MOST
        # A step that keeps the frozen plan: the pass and its commit of what the step before wrote (the plan
        # entry first), sent as the pass began.
        assert kept == [("assembler.assemble", ["ledger.append_chain"])], kept
        assert sum(1 + len(n) for _, n in kept) == PASS + COMMIT
        # The answer: the pass; the turn's close follows, outside the step's path: the EvidenceActor's one call
        # (the stated items the turn started with still hold: no call for them), which commits the turn's
        # entries with the card chained after them in one append (before, the driver's own commit came first).
        assert answered[0] == ("assembler.assemble", ["ledger.append_chain"]), answered
        close = [c for c in answered[1:] if c[0] == "evidence.close_turn_card_stated"]
        assert close and close[0][1][-1:] == ["ledger.append_chain"], answered
        assert [c for c, _ in answered[1:]][:1] == ["evidence.close_turn_card_stated"], answered
        # From the turn after (the driver knows the session's entries from where the EvidenceActor's index ended at
        # the close before: what it chained, what the ledger handed back, what each pass appended besides), the
        # close is handed the turn's entries and the plan made ahead the closed turn's: neither reads the ledger.
        closing = [c for c in steps_of(after)[-1] if c[0] in ("evidence.close_turn_card_stated", "planner.plan_ahead")]
        assert closing == [("evidence.close_turn_card_stated", ["ledger.append_chain"]), ("planner.plan_ahead", [])], \
            closing
        # What the driver chained is what the ledger holds: the chain verifies, every result names its body.
        report = await services.ledger.entries_async("s1")
        kinds = [e.kind for e in report]
        assert kinds.count("tool_result") == kinds.count("evidence_body") == 6
        assert ray.get(services.ledger_handle.verify.remote("s1")).ok
    finally:
        kill_folder_actors(root)


async def test_a_step_whose_plan_writes_a_reset_is_still_one_pass_on_ray(ray_cluster: Any, tmp_path: Path) -> None:
    """A plan that writes what it needs first (here this model's reset-with-handoff: a rescue, the second
    turn bound with a profile that follows no instruction at any size) still costs the pass and the planner's
    call: the PlannerActor chains the reset on the head it was handed and hands it back, and the AssemblerActor
    hands it back with the plan entry, chained, for the next commit (the next pass's, or the close's). The chain verifies, and the
    folder read again after the actors are gone holds the same session, the reset in it."""
    import ray

    from vak_context.actors.turn_services import RayServices
    from vak_context.context.capacity.profile import Horizon
    from vak_context.events.envelope import Mapper
    from vak_context.events.payloads import ResetWithHandoff
    from vak_context.storage.ledger import LedgerStore

    dead = replace(PROFILE, instruction_horizon=Horizon(0, 0.9, 0.0))
    root = os.path.realpath(tmp_path / "ledger")
    actors = counting_actors(root)
    greps = [completion(calls=[("grep", {"pattern": p})]) for p in ("beta", "gamma")]
    later = completion(calls=[("grep", {"pattern": "delta"})])
    script = Scripted([*map(fixed, greps), *[fixed(completion("beta is on line 2")), fixed(later)] * 4])
    surface = tool_surface()
    try:
        with serve(script.handle) as server:
            async with httpx.AsyncClient() as client:
                provider = OpenAICompatProvider(client, base_url=server.base_url, retry=RetryPolicy(attempts=1))
                config = TurnConfig(model="scripted", provider="openai-compat",
                                    system=system_prompt(surface.catalogue()), surface=surface, max_steps=4,
                                    max_tokens=64)
                services = RayServices(root, "s1")
                workspace = notes_workspace(tmp_path)
                first = await TurnLoop(services, provider, PROFILE, config, workspace=workspace).run("where is beta?")
                for actor in actors.values():
                    await actor.received.remote()
                second = await TurnLoop(services, provider, dead, config, workspace=workspace).run("and again?")
        # The second turn plans at every step (no request fits a horizon of 0): how it ends is not the point.
        assert first.outcome == "completed" and second.steps, (first.outcome, second.outcome)
        steps = steps_of({k: ray.get(a.received.remote()) for k, a in actors.items()})
        report = await services.ledger.entries_async("s1")
        mapper = Mapper()
        resets = [e for e in report if isinstance(mapper.payload_of(e), ResetWithHandoff)]
        assert len(resets) == 1, [e.kind for e in report]
        # The step that planned and wrote the reset: the pass and the planner's call; the reset and the plan
        # entry are handed back chained and committed with the next commit; nothing else.
        assert steps[0] == [("assembler.assemble", ["planner.plan_step"])], steps[0]
        assert sum(1 + len(n) for _, n in steps[0]) == PASS + PLANNER <= MOST
        for step in steps:  # every later step plans again: the pass, the commit sent as it began, the planner
            assert sum(1 + len(n) for _, n in step[:1]) <= MOST, step
        # The reset sits before the plan entry handed back with it, chained as the ledger chains it.
        kinds = [e.kind for e in report]
        at = kinds.index(resets[0].kind)
        assert "plan" in kinds[at + 1:], kinds[at:]
        assert ray.get(services.ledger_handle.verify.remote("s1")).ok
    finally:
        kill_folder_actors(root)
    with LedgerStore(root, readonly=True) as store:  # the folder read again: the same session
        assert [e.id for e in store.entries("s1")] == [e.id for e in report]
        assert store.verify("s1").ok


async def test_a_fresh_profile_costs_no_probe_call_at_a_turns_edges(ray_cluster: Any, tmp_path: Path) -> None:
    """While the bound model's profile is fresh (probed, inside its TTL), a turn's start and its close make no
    call to the ProbeActor: the first turn's ``turn_finished_quiet`` said until when no finished turn can start a
    probe of it, so there is none to cancel and none to start (before, one call at every close)."""
    from tests.fakes.counting_actors import counting
    from vak_context.actors.factory import NAMESPACE, probe_actor_name, remote_class
    from vak_context.actors.probe import ProbeActor, ProbeRequest
    from vak_context.actors.turn_services import RayServices
    from vak_context.config import VakConfig
    from vak_context.context.capacity.profile import to_record

    root = os.path.realpath(tmp_path / "ledger")
    actors = counting_actors(root)
    # The loop is bound to a profile a probe measured now (the one recorded, and so each turn's feedback too).
    probed = replace(PROFILE, provenance=replace(PROFILE.provenance, source="probe", probed_at=time.time(),
                                                 passed_any=True))
    await actors["ledger"].append.remote("capacity", [to_record(probed)])
    probe = remote_class(counting(ProbeActor)).options(
        name=probe_actor_name(root), namespace=NAMESPACE, lifetime="detached", num_cpus=0, max_concurrency=64,
    ).remote(actors["ledger"], session="capacity", config=VakConfig())
    script = Scripted([fixed(completion("beta is on line 2"))] * 3)
    surface = tool_surface()
    try:
        with serve(script.handle) as server:
            async with httpx.AsyncClient() as client:
                provider = OpenAICompatProvider(client, base_url=server.base_url, retry=RetryPolicy(attempts=1))
                config = TurnConfig(model="scripted", provider="openai-compat",
                                    system=system_prompt(surface.catalogue()), surface=surface, max_steps=4,
                                    max_tokens=64)
                target = ProbeRequest(spec="openai-compat:scripted", base_url=server.base_url, profile_key=PROFILE.key)
                services = RayServices(root, "s1", probe=probe, probe_request=target)
                loop = TurnLoop(services, provider, probed, config, workspace=notes_workspace(tmp_path))
                outcomes = [(await loop.run(f"where is beta, {i}?")).outcome for i in range(3)]
                await services.release()
                calls = [name for name, _, _ in await probe.received.remote()]
        assert outcomes == ["completed"] * 3
        # The first turn asks at its start (nothing known yet) and at its close (fresh: until when); then none.
        assert calls == ["turn_starting", "turn_finished_quiet"], calls
    finally:
        kill_folder_actors(root)
