"""PlannerActor: thin; every plan recorded in the ledger with its inputs and digest, explainable later."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import ray
from pydantic import BaseModel

from tests.fakes.sessions import build_session, store_sink
from vak_context.actors.factory import ledger_actor, planner_actor
from vak_context.actors.planner import PlannerActor, as_profile
from vak_context.context.capacity import CapacityProfile, Ewma, Horizon, ProfileKey, to_record
from vak_context.errors import InvalidInput
from vak_context.events.envelope import StoredEntry
from vak_context.events.payloads import Directive, PlanRecord
from vak_context.storage.ledger import LedgerStore

SMALL = CapacityProfile(ProfileKey("local", "small"), 8_192, Horizon(2_500, 0.9, 0.0), Ewma(0.25, 3), 256)
LARGE = CapacityProfile(ProfileKey("hosted", "large"), 200_000, Horizon(200_000, 0.3, 0.0), Ewma(0.3, 3), 8_192)


def test_plans_are_recorded_with_inputs_and_digest_and_explained_later(ledger_dir: Path) -> None:
    writer = LedgerStore(ledger_dir)
    build_session(20, tools_per_turn=1, sink=store_sink(writer, "s"))
    writer.close()
    actor = PlannerActor(str(ledger_dir), LedgerStore(ledger_dir))  # this process is the folder's one writer
    store = actor.ledger.store
    assert store is not None
    out = actor.plan("s", SMALL, "What is the copper price trend?", prefix_tokens=300, tail_tokens=20)
    record = store.payload(out["entry_id"])
    assert isinstance(record, PlanRecord) and record.digest == out["digest"] and record.model == "local:small"
    assert record.inputs_digest == out["inputs_digest"] and record.inputs["prefix_tokens"] == 300
    assert record.head == store.chain_to_root(out["entry_id"])[-2].id  # planned against the chain before it
    assert record.plan["packet_range"] == out["plan"]["packet_range"]
    explained = actor.explain(out["entry_id"])
    assert explained["matches"] and explained["recomputed"] == record.digest
    # the state comes back out and is carried to the model's next plan; other models keep their own
    second = actor.plan("s", SMALL, "And the ledger?", prefix_tokens=300, tail_tokens=20)
    assert second["plan"]["state"] == out["plan"]["state"] and second["plan"]["state"]["observed_through"] == 20
    assert store.payload(second["entry_id"]).inputs["state"] == out["plan"]["state"]
    other = actor.plan("s", LARGE, "And the ledger?", prefix_tokens=300, tail_tokens=20, record=False)
    assert other["entry_id"] is None and other["plan"]["packet"] is None
    assert actor.state("s", "hosted:large") is None and actor.state("s", "local:small") == second["plan"]["state"]
    # a plan explained against a changed ledger still reproduces from its own head
    store.append("s", [Directive(text="a new turn arrives")])
    assert actor.explain(out["entry_id"])["matches"]
    with pytest.raises(InvalidInput, match="not a plan"):
        actor.explain(store.head("s") or "")
    store.close()


def test_profiles_travel_as_themselves_their_record_or_its_json() -> None:
    record = to_record(SMALL)
    assert as_profile(SMALL) is SMALL
    assert as_profile(record) == SMALL
    assert as_profile(record.model_dump(mode="json")) == SMALL
    with pytest.raises(InvalidInput, match="not a capacity profile"):
        as_profile(42)  # type: ignore[arg-type]


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
