"""PlannerActor: thin; every plan recorded in the ledger with its inputs and digest, explainable later."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes.sessions import build_session, store_sink
from vak_context.actors.planner import PlannerActor, as_profile
from vak_context.context.capacity.profile import CapacityProfile, Ewma, Horizon, ProfileKey, to_record
from vak_context.errors import InvalidInput
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


