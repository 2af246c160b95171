"""A live three-turn session with the bundled model (Qwen2.5-Coder-0.5B on llama.cpp, 127.0.0.1) over a small
workspace, checked from the ledger alone.

The model decides what to call; nothing here asserts that it follows an instruction. What the engine
promises is checked: one prefix digest across turns, the within-turn cache assertion for every step, one
receipt and one profile update per step, a TurnCard per turn, and a background probe cancelled by a
turn start.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import httpx
import pytest

from vak_context.actors.local_services import InProcessServices
from vak_context.actors.probe import ProbeActor, ProbeRequest
from vak_context.agent.loop import TurnConfig, TurnLoop
from vak_context.agent.probe import ProbeSettings
from vak_context.agent.workspace import Workspace
from vak_context.config import VakConfig
from vak_context.context.capacity.profile import ProfileKey, metadata_profile
from vak_context.context.request.assemble import system_prompt
from vak_context.context.request.messages import ModelContext
from vak_context.engine.binding import default_surface
from vak_context.events.envelope import Mapper
from vak_context.events.payloads import Activity, AssistantStep, Receipt, TurnCard
from vak_context.providers.local.server import LocalModelServer
from vak_context.providers.openai_compat import OpenAICompatProvider
from vak_context.storage.ledger import LedgerStore

# A 0.5B model on 2 cores: each step is tens of seconds, so the test gets more than the suite's 600 s.
pytestmark = [pytest.mark.live, pytest.mark.slow, pytest.mark.timeout(1800)]

N_CTX = 8192  # per slot
# Two slots: the background probe gets its own, so cancelling it never evicts the session's cached prefix.
# One thread: on 2 busy cores llama.cpp's two threads spin against each other (measured 10x slower decode).
# The generation prompt the template appends after the last message ("<|im_start|>assistant\n") is
# rendered again, differently, once the assistant's message follows it: the part of step k's prompt a
# cache cannot keep for step k+1. A handful of tokens.
GENERATION_PROMPT_TOKENS = 8

DIRECTIVES = (
    "List the files in the workspace.",
    "Read notes.md and tell me what the project is called.",
    "What is the project called again? Answer in one sentence.",
)


@pytest.fixture(scope="module")
def qwen() -> Iterator[LocalModelServer]:
    server = LocalModelServer("qwen", n_ctx=2 * N_CTX, n_parallel=2, threads=1)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _workspace(tmp: Path) -> Workspace:
    root = tmp / "ws"
    (root / "src").mkdir(parents=True)
    (root / "notes.md").write_text("# Heron\n\nHeron is a tiny build tool. It reads heron.toml.\n")
    (root / "heron.toml").write_text('[project]\nname = "heron"\nversion = "0.3.1"\n')
    (root / "src" / "main.py").write_text("def main():\n    print('heron')\n")
    return Workspace(root)


async def test_three_live_turns_checked_from_the_ledger(qwen: LocalModelServer, tmp_path: Path) -> None:
    """Three turns through the whole pipeline on the real server; every promise checked from the ledger."""
    key = ProfileKey("local", "qwen2.5-coder-0.5b", "")
    profile = metadata_profile(key, ModelContext(provider="local", model=key.model, declared_window=N_CTX,
                                                 source="the server's n_ctx"), now=0.0)
    surface = default_surface()
    config = TurnConfig(model="qwen", provider="local", system=system_prompt(surface.catalogue()), surface=surface,
                        max_steps=2, max_tokens=128)
    settings = ProbeSettings(samples=3, controls=1, first_rung=2048, max_sizes=3, protocol="inline_fence")
    target = ProbeRequest(spec="openai-compat:qwen", base_url=qwen.base_url, quantisation="", local=True,
                         settings=settings, options={"api_key": qwen.api_key})
    with LedgerStore(tmp_path / "ledger") as store:
        probe = ProbeActor(store, session="capacity", config=VakConfig())
        async with httpx.AsyncClient(trust_env=False, timeout=900.0) as client:
            provider = OpenAICompatProvider(client, base_url=qwen.base_url, api_key=qwen.api_key, timeout_s=900.0)
            services = InProcessServices(store, "live", probe=probe, probe_request=target)
            loop = TurnLoop(services, provider, profile, config, workspace=_workspace(tmp_path))
            reports = []
            for directive in DIRECTIVES:
                reports.append(await loop.run(directive))
                # turn_finished started a background probe (the key has no measured profile); the next
                # turn's start must cancel it. Let it reach its first request first.
                await _until_probing(probe, target)
            await probe.turn_started(target.key)  # as the next turn would: the last probe is cancelled too
        assert await probe.wait(target.key, timeout=60) == "cancelled"
        entries = [(e.kind, Mapper().payload_of(e)) for e in store.entries("live")]
        probe_notes = [p for k, p in ((e.kind, Mapper().payload_of(e)) for e in store.entries("capacity"))
                       if isinstance(p, Activity) and p.activity == "capacity.probe"]

    steps = [p for _, p in entries if isinstance(p, AssistantStep)]
    receipts = [p for _, p in entries if isinstance(p, Receipt)]
    profiles = [k for k, _ in entries if k == "capacity_profile"]
    cards = [p for _, p in entries if isinstance(p, TurnCard)]
    directives = [k for k, _ in entries if k == "directive"]
    assert len(directives) == 3 and len(cards) == 3
    assert len(receipts) == len(steps) == len(profiles) >= 3
    assert len({r.prefix_digest for r in receipts}) == 1, "the stable prefix changed between turns"
    # Within a turn: each step's request starts with the previous one, so the server re-uses its cache.
    turn_of_step = _turn_of_each_receipt(entries)
    for (t0, r0), (t1, r1) in pairwise(turn_of_step):
        if t0 == t1:
            assert r1.usage.cache_read_tokens >= r0.usage.prompt_tokens - GENERATION_PROMPT_TOKENS, (r0.usage, r1.usage)
        else:  # a new turn still re-uses at least the stable prefix (system + tools)
            assert r1.usage.cache_read_tokens > 0
    assert any(n.detail.get("outcome") == "cancelled" for n in probe_notes), [n.detail for n in probe_notes]
    assert all(r.outcome in ("completed", "degraded") for r in reports)


async def _until_probing(probe: ProbeActor, target: ProbeRequest) -> None:
    """Wait until the background probe turn_finished started has reached the model (its first progress
    report), so the next turn start cancels a probe that is running, and the cancel is in the ledger."""
    state = await probe.state(target.key)
    assert state["in_flight"], f"turn_finished started no background probe: {state}"
    state = await probe.wait_running(target.key, timeout=300)
    assert state["in_flight"] and state["stage"] is not None, f"the probe never reached the model: {state}"


def _turn_of_each_receipt(entries: list[tuple[str, Any]]) -> list[tuple[int, Receipt]]:
    turn, out = 0, []
    for kind, payload in entries:
        if kind == "directive":
            turn += 1
        elif isinstance(payload, Receipt):
            out.append((turn, payload))
    return out


async def test_a_current_value_question_never_gets_a_carried_over_figure(qwen: LocalModelServer,
                                                                         tmp_path: Path) -> None:
    """Issue 11, the live freshness check: a figure is recorded in turn 1; turn 2 asks for the current value
    with a search tool available (one that cannot answer here). From the ledger: unless an observation
    succeeded in turn 2, its answer is the system's fail-closed statement, never the old figure as current."""
    from vak_context.context.request.messages import ToolSpec
    from vak_context.context.request.surface import Surface, ToolDecl

    key = ProfileKey("local", "qwen2.5-coder-0.5b", "")
    profile = metadata_profile(key, ModelContext(provider="local", model=key.model, declared_window=N_CTX,
                                                 source="the server's n_ctx"), now=0.0)
    search = ToolDecl(ToolSpec(name="web_search", description="Search the web. Returns result titles and snippets.",
                               input_schema={"type": "object", "properties": {"query": {"type": "string"}},
                                             "required": ["query"]}), always_loaded=True, observes=True)
    surface = Surface.build([*default_surface().core, search, *default_surface().deferred])
    config = TurnConfig(model="qwen", provider="local", system=system_prompt(surface.catalogue()), surface=surface,
                        max_steps=2, max_tokens=128)
    with LedgerStore(tmp_path / "ledger") as store:
        async with httpx.AsyncClient(trust_env=False, timeout=900.0) as client:
            provider = OpenAICompatProvider(client, base_url=qwen.base_url, api_key=qwen.api_key, timeout_s=900.0)
            loop = TurnLoop(InProcessServices(store, "fresh"), provider, profile, config, workspace=_workspace(tmp_path))
            await loop.run("Remember this for later: the copper price was 8,950 USD per tonne on 1 November.")
            report = await loop.run("What is the current copper price?")
        entries = [(e.kind, Mapper().payload_of(e)) for e in store.entries("fresh")]
    second = entries[next(i for i, (k, _) in enumerate(entries) if k == "directive" and i > 0):]
    observed = any(k == "tool_result" and not p.is_error and surface.observes(p.tool_name) for k, p in second)
    closes = [p for k, p in second if isinstance(p, Activity) and p.activity == "rule.close"]
    if not observed:
        # The system's statement names the last recorded figure and when; any other answer must not carry it.
        assert "8950" not in report.answer.replace(",", "") or closes, report.answer
