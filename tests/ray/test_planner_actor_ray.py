"""The PlannerActor on the local Ray records its plans in the ledger through the LedgerActor, and a restarted
one rereads them (the actor class in this process: tests/unit/test_planner_actor.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import ray
from pydantic import BaseModel

from tests.fakes.sessions import build_session
from vak_context.actors.factory import ledger_actor, planner_actor
from vak_context.context.capacity.profile import CapacityProfile, Ewma, Horizon, ProfileKey
from vak_context.events.envelope import StoredEntry

SMALL = CapacityProfile(ProfileKey("local", "small"), 8_192, Horizon(2_500, 0.9, 0.0), Ewma(0.25, 3), 256)


@pytest.mark.ray
def test_planner_actor_on_ray_records_plans_and_survives_a_restart(ray_cluster: Any, ledger_dir: Path) -> None:
    ledger = ledger_actor(ledger_dir)

    def sink(payload: BaseModel, blob: bytes | None) -> StoredEntry:
        entry_id = ray.get(ledger.append.remote("r", [payload], None, [blob]))[0]
        return ray.get(ledger.get.remote(entry_id))

    build_session(12, tools_per_turn=2, sink=sink)
    planner = planner_actor(ledger_dir, ledger=ledger)
    first = ray.get(planner.plan.remote("r", SMALL, "copper again", prefix_tokens=200, tail_tokens=10))
    assert first["entry_id"] == ray.get(ledger.head.remote("r"))
    assert ray.get(planner.explain.remote(first["entry_id"]))["matches"]
    ray.kill(planner, no_restart=False)  # a restart rereads the ledger, recorded plans included
    again = planner_actor(ledger_dir, ledger=ledger)
    for _ in range(100):
        try:
            state = ray.get(again.state.remote("r", "local:small"), timeout=30)
            break
        except ray.exceptions.RayActorError:
            continue
    assert state == first["plan"]["state"]
    second = ray.get(again.plan.remote("r", SMALL, "copper again", prefix_tokens=200, tail_tokens=10))
    assert second["plan"]["turns"] == first["plan"]["turns"]  # the same ledger, the same plan
    assert ray.get(ledger.payload.remote(second["entry_id"])).inputs["state"] == first["plan"]["state"]
    ray.kill(again, no_restart=True)
    ray.kill(ledger, no_restart=True)
