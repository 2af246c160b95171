"""ProbeActor: eligibility, TTLs, single-flight, cancel-on-turn, ledger writes; plain and on real Ray.

The model is the scripted threshold model on a loopback HTTP server, so the actor (in another
process when on Ray) reaches it through the real adapter, as it would reach llama.cpp.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
import ray

from tests.fakes.threshold import ThresholdModel, loopback
from vak_context.actors.factory import get_ledger_actor, ledger_actor, probe_actor
from vak_context.actors.probe import ProbeActor, ProbeRequest
from vak_context.agent.probe import ProbeSettings
from vak_context.config import ProbeConfig, VakConfig
from vak_context.context.capacity.profile import LOCAL_TTL_S, ProfileKey
from vak_context.events.envelope import Mapper
from vak_context.events.payloads import Activity, CapacityProfileRecord
from vak_context.storage.ledger import LedgerStore

QUICK = ProbeSettings(samples=3, controls=1, first_rung=1024, max_sizes=3, cache_rung=False)
FULL = VakConfig(probe=ProbeConfig(hosted="full"))
OFF = VakConfig(probe=ProbeConfig(hosted="off"))


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def target(url: str, **kw: Any) -> ProbeRequest:
    return ProbeRequest(spec="openai-compat:scripted", base_url=url, settings=QUICK, **kw)


def probe_entries(store: LedgerStore) -> list[Any]:
    return [store.payload(e.id) for e in store.entries("capacity")]


async def test_local_probe_runs_once_then_is_fresh_until_its_ttl(ledger_dir: Path) -> None:
    model, clock = ThresholdModel(3000, n_ctx=8192), Clock()
    with loopback(model) as url, LedgerStore(ledger_dir) as store:
        actor = ProbeActor(store, config=OFF, clock=clock)
        t = target(url)
        assert t.is_local  # a loopback URL is a local model: always eligible
        assert await actor.turn_finished(t) == "started"
        assert await actor.turn_finished(t) == "in_flight"  # single-flight per key
        assert await actor.wait(t.key, timeout=60) == "done"
        kinds = [type(p) for p in probe_entries(store)]
        assert kinds == [Activity, CapacityProfileRecord]
        calls = model.chat_calls
        assert await actor.turn_finished(t) == "fresh"
        clock.now += LOCAL_TTL_S - 60
        assert await actor.turn_finished(t) == "fresh"
        assert model.chat_calls == calls
        clock.now += 120  # past 24 h
        assert await actor.turn_finished(t) == "started"
        assert await actor.wait(t.key, timeout=60) == "done"
        assert actor.started == 2
        record = await actor.profile(t.key)
        assert record is not None and record.provenance["probed_at"] == clock.now


async def test_hosted_models_need_the_operator_opt_in(ledger_dir: Path) -> None:
    model, clock = ThresholdModel(3000, n_ctx=8192), Clock()
    with loopback(model) as url, LedgerStore(ledger_dir) as store:
        hosted = target(url, local=False)
        assert await ProbeActor(store, config=OFF, clock=clock).turn_finished(hosted) == "ineligible"
        assert model.chat_calls == 0
        actor = ProbeActor(store, config=FULL, clock=clock)
        assert await actor.turn_finished(hosted) == "started"
        assert await actor.wait(hosted.key, timeout=60) == "done"
        clock.now += LOCAL_TTL_S + 60  # stale for a local model, still fresh for a hosted one (7 d)
        assert await actor.turn_finished(hosted) == "fresh"


async def test_a_real_turn_cancels_the_in_flight_probe(ledger_dir: Path) -> None:
    model = GatedModel(3000, n_ctx=8192)
    try:
        with loopback(model) as url, LedgerStore(ledger_dir) as store:
            actor = ProbeActor(store, config=OFF, clock=Clock())
            t = target(url)
            assert await actor.turn_finished(t) == "started"
            running = await actor.wait_running(t.key, timeout=60)
            assert running["in_flight"] and running["stage"] == "metadata", running
            # Its first chat request is held at the server: the probe is provably mid-flight.
            assert await asyncio.to_thread(model.arrived.wait, 60), "the probe never sent a chat request"
            assert await actor.turn_started(t.key) is True
            state = await actor.state(t.key)
            assert state["state"] == "cancelled" and not state["in_flight"]  # its task has ended
            model.gate.set()
            assert await asyncio.to_thread(model.answered.wait, 60)
            # Nothing reached the model after the cancel but the request already held there.
            assert model.arrivals == 1
            payloads = probe_entries(store)
            assert [type(p) for p in payloads] == [Activity]
            assert payloads[0].detail["outcome"] == "cancelled"
            assert await actor.turn_started(t.key) is False  # nothing left to cancel
            assert await actor.turn_finished(t) == "started"  # the next finished turn tries again
            await actor.turn_started(t.key)
    finally:
        model.gate.set()  # let a held request go, whatever failed


async def test_changed_metadata_and_reprobe_requests_start_a_new_probe(ledger_dir: Path) -> None:
    model = ThresholdModel(3000, n_ctx=8192)
    with loopback(model) as url, LedgerStore(ledger_dir) as store:
        actor = ProbeActor(store, config=OFF, clock=Clock())
        t = target(url)
        await actor.turn_finished(t)
        await actor.wait(t.key, timeout=60)
        digest = actor.cache[t.key].provenance.metadata_digest
        assert await actor.turn_finished(target(url, metadata_digest=digest)) == "fresh"
        assert await actor.turn_finished(target(url, metadata_digest="0" * 32)) == "started"
        await actor.wait(t.key, timeout=60)


async def test_a_new_actor_reads_the_last_profile_from_the_ledger(ledger_dir: Path) -> None:
    model, clock = ThresholdModel(3000, n_ctx=8192), Clock()
    with loopback(model) as url, LedgerStore(ledger_dir) as store:
        first = ProbeActor(store, config=OFF, clock=clock)
        t = target(url)
        await first.turn_finished(t)
        await first.wait(t.key, timeout=60)
        calls = model.chat_calls
        second = ProbeActor(store, config=OFF, clock=clock)  # a restarted process: empty cache
        assert await second.turn_finished(t) == "fresh"
        assert model.chat_calls == calls
        assert await second.profile(t.key) == await first.profile(t.key)


async def test_an_unreachable_model_fails_the_probe_with_a_ledger_note(ledger_dir: Path) -> None:
    with LedgerStore(ledger_dir) as store:
        actor = ProbeActor(store, config=OFF, clock=Clock())
        t = ProbeRequest(spec="openai-compat:gone", base_url="http://127.0.0.1:9/v1", settings=QUICK)
        assert await actor.turn_finished(t) == "started"
        assert await actor.wait(t.key, timeout=60) == "failed"
        state = await actor.state(t.key)
        assert "127.0.0.1:9" in state["error"]
        (note,) = probe_entries(store)
        assert note.detail["outcome"] == "failed"


# ---------------------------------------------------------------------- on the shared Ray cluster


class GatedModel(ThresholdModel):
    """The threshold model, but each chat request waits at a gate the test opens. While the gate is shut
    a probe is provably in flight (its request is in the server's hands), whatever the machine's load."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.arrived, self.gate, self.answered = threading.Event(), threading.Event(), threading.Event()
        self.arrivals = 0  # chat requests that reached the server, held or not

    def respond(self, path: str, content: bytes) -> tuple[int, dict[str, Any]]:
        if not path.endswith("/chat/completions"):
            return super().respond(path, content)
        self.arrivals += 1
        self.arrived.set()
        self.gate.wait(timeout=300)  # a deadline, so a broken test ends instead of hanging
        try:
            return super().respond(path, content)
        finally:
            self.answered.set()


@pytest.mark.ray
def test_probe_actor_on_ray_single_flight_cancel_and_eligibility(ray_cluster: Any, ledger_dir: Path) -> None:
    """On Ray: two finished turns start one probe; a hosted key is ineligible; a turn started while the
    probe's request is held at the server cancels it and notes so in the ledger; the next probe finishes."""
    model = GatedModel(3000, n_ctx=8192)
    actor = probe_actor(ledger_dir, config=OFF)
    try:
        with loopback(model) as url:
            t = target(url)
            key = t.key
            # Two turns finish at once: one probe.
            first, second = ray.get([actor.turn_finished.remote(t), actor.turn_finished.remote(t)])
            assert sorted([first, second]) == ["in_flight", "started"]
            assert ray.get(actor.turn_finished.remote(target(url, local=False))) == "ineligible"
            # A turn starts on the key while the probe's first request is held: the probe is cancelled,
            # and says so in the ledger.
            assert model.arrived.wait(timeout=120), "the probe never sent a chat request"
            assert ray.get(actor.turn_started.remote(key)) is True
            assert ray.get(actor.state.remote(key))["state"] == "cancelled"
            model.gate.set()
            # Left alone, the next probe finishes and writes through the LedgerActor.
            assert ray.get(actor.turn_finished.remote(t)) == "started"
            assert ray.get(actor.wait.remote(key, 120)) == "done"
            record = ray.get(actor.profile.remote(key))
            assert isinstance(record, CapacityProfileRecord) and record.model == "scripted"
        ledger = get_ledger_actor(ledger_dir)
        mapper = Mapper()
        kinds = [(e.kind, mapper.payload_of(e).detail.get("outcome") if e.kind == "activity" else None)
                 for e in ray.get(ledger.entries.remote("capacity"))]
        assert kinds == [("activity", "cancelled"), ("activity", None), ("capacity_profile", None)]
        assert ray.get(probe_actor(ledger_dir).state.remote(key))["started"] == 2  # the same named actor
    finally:
        model.gate.set()  # let a held request go, whatever failed
        ray.kill(actor)
        ray.get(ledger_actor(ledger_dir).close.remote())
        ray.kill(ledger_actor(ledger_dir))


def test_probe_key_and_locality_come_from_the_target() -> None:
    t = ProbeRequest(spec="ollama:gemma4:e2b-mlx", base_url="http://localhost:11434", quantisation="Q4_K_M")
    assert t.key == ProfileKey("ollama", "gemma4:e2b-mlx", "Q4_K_M") and t.is_local
    assert not ProbeRequest(spec="anthropic:claude-x").is_local
    assert not ProbeRequest(spec="openai-compat:x", base_url="https://gateway.example/v1").is_local
