"""``session_search`` on Ray: the turn loop over RayServices, the search run by the LedgerActor (where the
session's writer lock is), which catches the session's index up from the ledger under ``_search/``; the
recall a hit names, answered by the EvidenceActor, returns the exact lines. The same in this process:
tests/unit/test_session_search_tool.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.httpserver import serve
from tests.fakes.scripted import PROFILE, Scripted, completion, fixed
from vak_context.agent.loop import TurnConfig, TurnLoop
from vak_context.agent.tools import ToolRegistry, surface_for
from vak_context.agent.tools.sessionsearch import recall_calls
from vak_context.context.request.assemble import system_prompt
from vak_context.events.envelope import Mapper
from vak_context.providers.base import RetryPolicy
from vak_context.providers.openai_compat import OpenAICompatProvider

LOG = "".join(f"row {i} filler words here\n" for i in range(1, 201)).replace("row 120 ", "row 120 quokka ")


def _follow(body: dict[str, Any], _n: int) -> tuple[int, dict[str, Any]]:
    found = next(m["content"] for m in reversed(body["messages"]) if m["role"] == "tool")
    return 200, completion(calls=[("recall", recall_calls(found)[0])])


@pytest.mark.ray
async def test_session_search_runs_in_the_ledger_actor_and_its_recall_returns_the_lines(
        ray_cluster: Any, tmp_path: Path) -> None:
    import ray

    from vak_context.actors.factory import ledger_actor
    from vak_context.actors.turn_services import RayServices

    registry = ToolRegistry()

    @registry.tool(read_only=True, observes=True)
    def fetch_log(name: str) -> str:
        """Fetch a service's log."""
        return LOG

    root = tmp_path / "ledger"
    script = Scripted([fixed(completion(calls=[("fetch_log", {"name": "billing"})])), fixed(completion("Long.")),
                       fixed(completion(calls=[("session_search", {"query": "quokka"})])), _follow,
                       fixed(completion("Row 120."))])
    surface = surface_for(registry)
    with serve(script.handle) as server:
        async with httpx.AsyncClient() as client:
            provider = OpenAICompatProvider(client, base_url=server.base_url, retry=RetryPolicy(attempts=1))
            config = TurnConfig(model="scripted", provider="openai-compat", system=system_prompt(surface.catalogue()),
                                surface=surface, max_steps=4, max_tokens=64)
            loop = TurnLoop(RayServices(root, "s1"), provider, PROFILE, config, tools=registry)
            await loop.run("fetch the billing log")
            report = await loop.run("which row named the animal?")
    assert report.outcome == "completed"
    actor = ledger_actor(root)
    entries = ray.get(actor.entries.remote("s1", 0, None))
    mapper = Mapper()
    results = [mapper.payload_of(e) for e in entries if e.kind == "tool_result"]
    found = next(r for r in results if r.tool_name == "session_search")
    [args] = recall_calls(found.content)
    assert found.content.startswith("session_search 'quokka': 1 hit(s)") and args["range"] == [91, 130]
    recalled = next(r for r in results if r.tool_name == "recall")
    assert recalled.content == "".join(LOG.splitlines(keepends=True)[90:130])
    assert (root / "sessions" / "s1" / "_search" / "vak-state.json").is_file()  # written by the LedgerActor
    direct = ray.get(actor.session_search.remote("s1", "quokka", "ledger", 5))
    assert args in [json.loads(h.recall[7:-1]) for h in direct.hits]  # now turn 2's card names the query too


@pytest.mark.ray
async def test_the_ledger_actor_catches_the_index_up_after_a_turn(ray_cluster: Any, tmp_path: Path) -> None:
    """``RayServices.turn_finished`` queues the catch-up in the LedgerActor (the call returns at once); once
    it is idle the index names the turn's last entry, and a search there indexes nothing more."""
    import ray

    from vak_context.actors.factory import ledger_actor
    from vak_context.actors.turn_services import RayServices
    from vak_context.storage.search import read_state, search_path

    registry = ToolRegistry()

    @registry.tool(read_only=True, observes=True)
    def fetch_log(name: str) -> str:
        """Fetch a service's log."""
        return LOG

    root = tmp_path / "ledger"
    script = Scripted([fixed(completion(calls=[("fetch_log", {"name": "billing"})])), fixed(completion("Long."))])
    surface = surface_for(registry)
    with serve(script.handle) as server:
        async with httpx.AsyncClient() as client:
            provider = OpenAICompatProvider(client, base_url=server.base_url, retry=RetryPolicy(attempts=1))
            config = TurnConfig(model="scripted", provider="openai-compat", system=system_prompt(surface.catalogue()),
                                surface=surface, max_steps=4, max_tokens=64)
            loop = TurnLoop(RayServices(root, "s2"), provider, PROFILE, config, tools=registry)
            await loop.run("fetch the billing log")
    actor = ledger_actor(root)
    ray.get(actor.index_idle.remote())
    last = ray.get(actor.entries.remote("s2", 0, None))[-1]
    state = read_state(search_path(root, "s2"))
    assert state is not None and (state["seq"], state["id"]) == (last.seq, last.id)
    found = ray.get(actor.session_search.remote("s2", "quokka", None, 5))
    assert [h.start for h in found.hits] == [91] and read_state(search_path(root, "s2")) == state
