"""What a step costs in durable commits (docs/EMBEDDING.md, "What a step costs"): one per model call. While a
turn runs in-process its appends are written behind (``LedgerStore.hold``: on disk and readable, not yet
synced); they are made durable in one fsync before the turn's next model call, and at the card, before
``Session.run`` returns. A two-step turn (a tool call, then the answer) makes two commits: the directive with
its tail, the plan, the first step with its receipt and profile, the evidence body and its result before the
second call; the second step and the card at the close. The plan entry each turn records is the
PlannerActor's, and the next turn's plan state comes from it."""

from __future__ import annotations

from pathlib import Path

import httpx

import vak_context
from tests.fakes.embedder import ScriptedModel, make_tools
from vak_context.events.envelope import Mapper
from vak_context.events.payloads import PlanRecord
from vak_context.storage.group_commit import COMMITS
from vak_context.storage.ledger import LedgerStore

TURN_COMMITS = 2  # one per model call


async def test_a_two_step_turn_makes_one_durable_commit_per_model_call(tmp_path: Path) -> None:
    model = ScriptedModel()
    tools, _calls = make_tools()
    per_turn: list[int] = []
    async with httpx.AsyncClient(transport=httpx.MockTransport(model.handle)) as client:
        with vak_context.Engine.open(tmp_path / "ledger") as engine:
            async with engine.session("s", model="openai-compat:scripted", base_url="http://127.0.0.1:9/v1",
                                      http_client=client, tools=tools, window=32_000) as session:
                for turn in range(1, 4):
                    before = COMMITS.snapshot()["commits"]
                    result = await session.run(f"please search query-{turn:03d}")
                    per_turn.append(int(COMMITS.snapshot()["commits"] - before))
                    assert result.outcome == "completed" and len(result.steps) == 2
                    # acknowledged: the card and everything before it is durable once run returns
                    assert not engine._live_store().written_behind("s")  # type: ignore[union-attr]
    assert per_turn == [TURN_COMMITS] * 3

    with LedgerStore(tmp_path / "ledger", readonly=True) as store:
        entries = store.entries("s")
    kinds = [e.kind for e in entries]
    mapper = Mapper()
    for i, entry in enumerate(entries):
        if entry.kind == "directive":  # its tail is the next entry, written in the same append
            tail = entries[i + 1]
            assert tail.kind == "turn_tail" and tail.parent == entry.id and tail.time_us == entry.time_us
    plans = [mapper.payload_of(e) for e in entries if e.kind == "plan"]
    assert kinds.count("directive") == 3 and len(plans) == 3  # one plan a turn: the second step reuses it
    assert all(isinstance(p, PlanRecord) and p.producer == "PlannerActor" for p in plans)
