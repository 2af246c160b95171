"""Stated state through the public API (docs/STATE.md, issue 34): a pin through ``Session.pin`` and one the
model records with the ``commitments`` tool are carried in the next requests' ``<work_contract>``; a pin made
mid-turn applies from the next turn, the contract's bytes unchanged until then; what a directive states is
extracted at turn close, a later statement of the same key supersedes it, and an extracted rule whose turn
is behind a packet is still carried; a directive contradicting a pinned rule is recorded as a verdict."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

import vak_context
from tests.fakes.stated_model import StatedModel
from vak_context.events.envelope import Mapper

SCRIPTED = {"model": "openai-compat:scripted", "base_url": "http://127.0.0.1:9/v1", "summaries": "off"}


def activities(engine: vak_context.Engine, session: str, name: str) -> list[dict[str, Any]]:
    mapper = Mapper()
    return [dict(p.detail) for e in engine.ledger().entries(session) if e.kind == "activity"
            and (p := mapper.payload_of(e)).activity == name]


async def test_a_pin_through_the_api_is_carried_from_the_next_turn(tmp_path: Path) -> None:
    model = StatedModel()
    async with httpx.AsyncClient(transport=httpx.MockTransport(model.handle)) as client:
        async with vak_context.Engine.open(tmp_path / "ledger") as engine:
            session = engine.session("s", **SCRIPTED, window=8_000, http_client=client)
            pinned = await session.pin("Never push to main.")
            assert await session.pin("Never push to main.") == pinned  # the same pin again writes nothing
            await session.run("hello")
            await session.run("hello again")
            assert [(s.category, s.text, s.via) for s in session.state()] == [("rule", "Never push to main.", "api")]
            await session.unpin(pinned.key)
            await session.run("one more")
            with pytest.raises(vak_context.InvalidInput, match="no stated item"):
                await session.unpin(pinned.key)
            with pytest.raises(vak_context.InvalidInput, match="category must be one of"):
                await session.pin("x", category="law")
    first, second, third = model.contracts()
    assert "rule: Never push to main." in first
    assert second == first  # nothing stated since, and a pin is carried whatever turns are whole: the same bytes
    assert third == ""  # unpinned


async def test_a_pin_mid_turn_applies_from_the_next_turn(tmp_path: Path) -> None:
    model = StatedModel()
    holder: dict[str, Any] = {}

    async def lookup(query: str) -> str:
        """Look something up.

        Args:
            query: what to look up
        """
        await holder["session"].pin("The deadline is Friday.", category="constraint")
        return "found"

    async with httpx.AsyncClient(transport=httpx.MockTransport(model.handle)) as client:
        async with vak_context.Engine.open(tmp_path / "ledger") as engine:
            session = holder["session"] = engine.session("s", **SCRIPTED, window=8_000, http_client=client,
                                                         tools=[lookup])
            await session.pin("Always cite the file you read.")
            await session.run("LOOKUP please")  # two steps: the call (the tool pins), then the answer
            await session.run("thanks")
    step1, step2, next_turn = model.contracts()
    assert step1 == step2 and "cite the file" in step1 and "Friday" not in step2  # unchanged within the turn
    assert "constraint: The deadline is Friday." in next_turn and "cite the file" in next_turn


async def test_the_model_records_a_commitment_with_the_engine_tool(tmp_path: Path) -> None:
    model = StatedModel()
    async with httpx.AsyncClient(transport=httpx.MockTransport(model.handle)) as client:
        async with vak_context.Engine.open(tmp_path / "ledger") as engine:
            session = engine.session("s", **SCRIPTED, window=8_000, http_client=client)
            await session.run("RECORD: Only deploy on weekdays")
            await session.run("what now")
            state = session.state()
    assert [(s.category, s.text, s.via, s.turn) for s in state] == [("rule", "Only deploy on weekdays", "tool", 1)]
    assert any(t["function"]["name"] == "commitments" for t in model.bodies[0]["tools"])
    result = next(m for m in model.bodies[1]["messages"] if m["role"] == "tool")["content"]
    assert "recorded" in result and "in force from the next turn" in result
    # Its turn is carried whole in the next request (the call is in it), but a tool's item is always carried.
    assert "rule: Only deploy on weekdays (turn 1)" in model.contracts()[2]


async def test_a_superseded_budget_is_shown_only_at_its_new_value(tmp_path: Path) -> None:
    """Extracted at turn close; carried once its turn is not whole, also behind a packet; superseded by key."""
    model = StatedModel()
    pad = "Background: " + " ".join(f"context{i}" for i in range(150))
    async with httpx.AsyncClient(transport=httpx.MockTransport(model.handle)) as client:
        async with vak_context.Engine.open(tmp_path / "ledger") as engine:
            session = engine.session("s", **SCRIPTED, window=1_900, output_reserve=200, http_client=client)
            results = [await session.run(f"Never push to main. The budget is $100. {pad}"),
                       await session.run(f"The budget is now $200. {pad}")]
            # 20 turns: the prefix priced at the measured rate leaves the cards room until turn 19
            # (tests/unit/test_prefix_rate.py; at the first rate kept, the packet came at turn 11)
            results += [await session.run(f"Next task {i}. {pad}") for i in range(18)]
            state = session.state()
    assert [(s.key, s.text, s.turn, s.via) for s in state] == [
        ("never push to main", "Never push to main.", 1, "directive"),
        ("budget", "The budget is now $200.", 2, "directive")]
    contracts = model.contracts()
    assert contracts[0] == ""  # nothing stated before turn 1
    # Turn 2's request carries turn 1 whole: its words are there, so the contract does not repeat them.
    assert results[1].steps[0].fidelity["full"] == 1 and contracts[1] == ""
    assert all("$100" not in c for c in contracts)  # never current once superseded (and never in a contract)
    last = contracts[-1]
    assert "constraint: The budget is now $200. (turn 2)" in last and "rule: Never push to main. (turn 1)" in last
    # The first turns are behind a packet in the last request, and their items are carried all the same.
    assert results[-1].steps[0].fidelity["packet"] >= 2
    assert '<context_summary turns="1-' in "\n".join(str(m.get("content")) for m in model.bodies[-1]["messages"])


async def test_a_directive_contradicting_a_pinned_rule_is_a_verdict(tmp_path: Path) -> None:
    model = StatedModel()
    async with httpx.AsyncClient(transport=httpx.MockTransport(model.handle)) as client:
        async with vak_context.Engine.open(tmp_path / "ledger") as engine:
            session = engine.session("s", **SCRIPTED, window=8_000, http_client=client)
            await session.pin("Never push to main.")
            await session.run("Push the hotfix to main right away")
            await session.run("Open a pull request instead; do not push to main")
            found = activities(engine, "s", "rule.contradiction")
    assert [(f["where"], f["stated"], f["sentence"]) for f in found] == [
        ("directive", "Never push to main.", "Push the hotfix to main right away")]
