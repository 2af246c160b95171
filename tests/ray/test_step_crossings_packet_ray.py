"""A step whose plan writes a packet summary on Ray (issue 37 item 1): still the pass, the PlannerActor's call
and one commit. The caller's loop (``Session.begin``) with summaries not written ahead at a turn's close, so
each packet range is summarised on the request that first carries it (``tests/unit/test_packet_summaries.py``
in-process); the folder's actors are the counting ones of ``tests/ray/test_step_crossings_ray.py``, which the
engine's wiring gets by name. The PlannerActor (holding the summariser, built from the session's endpoint)
chains the ``packet.summarise`` activity and the ``compaction`` on the head it was handed and hands them back;
the AssemblerActor commits them with the turn's entries and the plan entry. The chain verifies; the folder read
again after the actors are gone holds the same session."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx
import pytest

import vak_context
from tests.fakes.counting_actors import MOST, counting_actors, steps_of
from tests.fakes.embedder import make_tools
from tests.fakes.httpserver import serve
from tests.fakes.packet_session import PacketModel, directive, summary_timing
from tests.fakes.ray_folders import kill_folder_actors
from vak_context.storage.ledger import LedgerStore

pytestmark = pytest.mark.ray

TURNS = 18  # enough for packet ranges at a horizon of 6,000 (tests/unit/test_packet_summaries.py runs 40)


async def test_a_step_whose_plan_writes_a_packet_is_still_one_pass_on_ray(ray_cluster: Any, tmp_path: Path) -> None:
    import ray

    model = PacketModel(summaries="answer")
    root = os.path.realpath(tmp_path / "ledger")
    actors = counting_actors(root)
    tools, _ = make_tools()
    run = {t.__name__: t for t in tools}
    address = str(ray.get_runtime_context().gcs_address)
    steps: list[list[tuple[str, list[str]]]] = []
    try:
        with serve(model.handle) as server:
            async with httpx.AsyncClient() as client:
                with vak_context.Engine.open(root, ray=address) as engine:
                    async with engine.session("agent-1", model="openai-compat:scripted", base_url=server.base_url,
                                              tools=tools, window=6_000, horizon=6_000) as session:
                        for n in range(1, TURNS + 1):
                            async with session.begin(directive(n)) as turn:
                                turn.summarise_at_close = False
                                while (request := await turn.request()) is not None:
                                    reply = await client.post(request.url, json=request.body,
                                                              headers=dict(request.headers))
                                    action = await turn.reply(reply.json(), status=reply.status_code)
                                    for call in action.calls:
                                        await turn.tool_result(call.id, run[call.name](**call.arguments))
                            assert turn.result.outcome == "completed", (n, turn.result.outcome)
                            counted = steps_of({k: ray.get(a.received.remote()) for k, a in actors.items()})
                            steps += counted if n > 1 else []  # the first turn builds the actors' views
        ahead, on_path, _ = summary_timing(Path(root), "agent-1")
        assert on_path and not ahead, (ahead, on_path)  # packets written on a request's path
        # Every step that plans, those whose plan wrote a packet among them: the pass, the planner, one commit.
        planned = [s for s in steps if s and "planner.plan_step" in s[0][1]]
        assert planned and all(s[0] == ("assembler.assemble", ["planner.plan_step", "ledger.append_chain"])
                               for s in planned), planned
        assert all(sum(1 + len(n) for _, n in s[:1]) <= MOST for s in steps), steps
        with LedgerStore(root, readonly=True) as store:
            assert store.verify("agent-1").ok
    finally:
        kill_folder_actors(root)
    with LedgerStore(root, readonly=True) as store:
        ids = [e.id for e in store.entries("agent-1")]
        assert store.verify("agent-1").ok and len(ids) == len(set(ids))
