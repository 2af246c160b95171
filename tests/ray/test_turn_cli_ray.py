"""`vak turn --ray ADDRESS` as a user runs it, on the loopback cluster this test session started: four turns,
each its own process, with no recorded profile, on a scripted threshold model (llama.cpp's documented bodies)
served on loopback under two model names.

Turn 1 binds the metadata rung's profile; when it ends the ProbeActor measures the model in the background,
writing a ``capacity.probe`` activity and a ``capacity_profile`` to the ledger; turn 2 (the test waits for the
probe through the actor's own wait, never a clock) binds that profile. The second name's probe is held at the
server (its first request waits at a gate), and a turn started on that model while it runs cancels it: the
ledger notes the cancel.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import ray

from tests.fakes.httpserver import serve
from tests.fakes.scripted import completion
from tests.fakes.threshold import ThresholdModel
from vak_context.actors.factory import (
    NAMESPACE,
    assembler_actor_name,
    evidence_actor_name,
    ledger_actor_name,
    planner_actor_name,
    probe_actor,
    probe_actor_name,
)
from vak_context.context.capacity.profile import ProfileKey
from vak_context.events.envelope import Mapper
from vak_context.storage.ledger import LedgerStore

pytestmark = pytest.mark.ray
ROOT = Path(__file__).resolve().parents[2]
SCRIPTED, GATED = ProfileKey("openai-compat", "scripted"), ProfileKey("openai-compat", "gated")


class TwoModels:
    """One threshold model under two names: it answers the probe (its requests carry ``probe_ack``), and a
    turn's request gets a plain scripted answer. The probe's chat requests on ``gated`` wait at ``gate``."""

    def __init__(self) -> None:
        self.model = ThresholdModel(3000, n_ctx=8192)
        self.arrived, self.gate = threading.Event(), threading.Event()
        self.lock = threading.Lock()  # the model keeps counters; the server answers from several threads
        self.answers = 0

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path.endswith(("/apply-template", "/tokenize")):  # no llama.cpp tokenizer here: 404, as a server says
            return httpx.Response(404, json={"error": {"code": 404, "message": "File Not Found"}})
        if path.endswith("/chat/completions"):
            body = json.loads(request.content)
            probing = any(t["function"]["name"] == "probe_ack" for t in body.get("tools") or [])
            if not probing:  # each answer its own, so no turn rule takes one for a repeat of the last
                with self.lock:
                    self.answers += 1
                    return httpx.Response(200, json=completion(f"Answer {self.answers}: notes.txt holds alpha."))
            if body.get("model") == "gated":
                self.arrived.set()
                self.gate.wait(timeout=300)  # a deadline, so a broken test ends instead of hanging
        with self.lock:
            status, out = self.model.respond(path, request.content)
        return httpx.Response(status, json=out)


@contextmanager
def served(model: TwoModels) -> Iterator[str]:
    with serve(model.handle) as server:
        yield server.base_url


def vak_turn(address: str, base_url: str, ledger: Path, workspace: Path, model: str, directive: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | {"PYTHONUNBUFFERED": "1"}
    run = subprocess.run(
        [sys.executable, "-m", "vak_context.cli.main", "turn", directive, "--ray", address, "--model",
         f"openai-compat:{model}", "--base-url", base_url, "--ledger", str(ledger), "--session", "s",
         "--workspace", str(workspace), "--max-steps", "2", "--no-stream"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    assert "on Ray at " in run.stdout and "[completed; card " in run.stdout, run.stdout
    return run.stdout


def payloads(ledger: Path, session: str) -> list[tuple[str, Any]]:
    mapper = Mapper()
    with LedgerStore(ledger, readonly=True) as store:  # the LedgerActor writes; a reader needs no lock
        return [(e.kind, mapper.payload_of(e)) for e in store.entries(session)]


def probe_notes(ledger: Path, key: ProfileKey) -> list[dict[str, Any]]:
    """The ProbeActor's notes on ``key`` (a cancelled or failed probe's ``capacity.probe`` activity)."""
    return [p.detail for kind, p in payloads(ledger, "capacity")
            if kind == "activity" and p.activity == "capacity.probe"
            and (p.detail.get("key") or {}).get("model") == key.model]


def test_two_vak_turns_on_ray_bind_the_profile_the_probe_actor_wrote(ray_cluster: Any, tmp_path: Path) -> None:
    ledger, workspace = tmp_path / "ledger", tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("alpha\nbeta\n")
    address = ray.get_runtime_context().gcs_address
    model = TwoModels()
    probe = probe_actor(ledger)
    try:
        with served(model) as url:
            vak_turn(address, url, ledger, workspace, "scripted", "What is in notes.txt?")
            assert ray.get(probe.wait.remote(SCRIPTED, 120)) == "done"
            capacity = payloads(ledger, "capacity")
            assert [k for k, _ in capacity] == ["activity", "capacity_profile"]
            probed = capacity[1][1]
            assert (probed.provider, probed.model) == ("openai-compat", "scripted")
            assert probed.provenance["source"] != "metadata" and probed.provenance["probed_at"]

            vak_turn(address, url, ledger, workspace, "scripted", "And which line holds beta?")
            session = payloads(ledger, "s")
            plans = [p for k, p in session if k == "plan"]
            turn_of_plan = [sum(1 for k, _ in session[: i + 1] if k == "directive")
                            for i, (k, _) in enumerate(session) if k == "plan"]
            bound = {t: plan.inputs["profile"] for t, plan in zip(turn_of_plan, plans, strict=True)}
            assert bound[1]["provenance"]["source"] == "metadata"  # turn 1: nothing recorded yet
            # Turn 2 is planned under the profile the ProbeActor wrote: its key and its version (probed_at).
            assert (bound[2]["provider"], bound[2]["model"]) == ("openai-compat", "scripted")
            assert bound[2]["provenance"]["probed_at"] == probed.provenance["probed_at"]
            assert bound[2]["instruction_horizon"]["tokens"] == probed.instruction_horizon.tokens
            receipts = [p for k, p in session if k == "receipt"]
            directives = [i for i, (k, _) in enumerate(session) if k == "directive"]
            second = [p for i, (k, p) in enumerate(session) if k == "receipt" and i > directives[1]]
            assert receipts and second and all((r.provider, r.model) == ("openai-compat", "scripted")
                                               for r in second)
            # Every plan entry was produced by the PlannerActor (named in the entry).
            assert plans and all(p.producer == "PlannerActor" for p in plans), [p.producer for p in plans]

            # The other name's probe starts when its first turn ends, and is held at the server...
            vak_turn(address, url, ledger, workspace, "gated", "Say hello.")
            running = ray.get(probe.wait_running.remote(GATED, 120))
            assert running["in_flight"], running
            assert model.arrived.wait(120), "the gated probe never reached the model"
            # ...so a turn started on that model while it runs cancels it, and the ledger says so.
            vak_turn(address, url, ledger, workspace, "gated", "Say hello again.")
            notes = probe_notes(ledger, GATED)
            cancelled = [n for n in notes if n.get("outcome") == "cancelled"]
            assert cancelled and cancelled[0]["why"] == "a real turn started on this key", notes
    finally:
        ray.get(probe.turn_started.remote(GATED))  # the probe the last turn started, if any
        model.gate.set()
        for name in (ledger_actor_name, probe_actor_name, assembler_actor_name, evidence_actor_name,
                     planner_actor_name):
            try:
                ray.kill(ray.get_actor(name(ledger), namespace=NAMESPACE), no_restart=True)
            except ValueError:
                pass  # never started
