"""A recorded compaction is a stored packet (issue 9, item 5), on a real Claude Code session.

The spotter session (``../shared/data/trajectories``) compacted automatically in the middle of its
second turn: a ``compact_boundary`` and a summary, then 31 more steps. ``vak import`` writes it as a
``compaction`` entry over turns 1–2 that the index records as covering turn 2's first steps only.
Replaying turn 2 on a model whose room the turn outgrows reuses it like the engine's own packet: the
summary and every evidence id it names replace turn 1 and those steps, with no summariser call; a
model that holds everything gets the turns from the ledger instead (a packet is a cache).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.request import SessionView, prefix_tokens, project, request_tokens
from context.capacity import CapacityProfile, Ewma, Horizon, ProfileKey
from context.messages import ChatRequest, TextPart, ToolUsePart
from context.planner import Plan
from context.render import api_problems
from context.turncard import short_id
from farm.importers import import_path
from storage.ledger import LedgerStore
from tests.fixtures_import import FILES

SYSTEM = "You are Claude Code, an interactive coding agent. " * 10


def _profile(name: str, horizon: int, window: int, out: int) -> CapacityProfile:
    return CapacityProfile(ProfileKey("test", name), window, Horizon(horizon, 0.9, 0.0), Ewma(0.25, 10), out)


MID = _profile("mid-32k", 24_576, 32_768, 1_024)
FRONTIER = _profile("frontier-200k", 200_000, 200_000, 8_192)


@pytest.fixture(scope="module")
def spotter(tmp_path_factory: pytest.TempPathFactory, trajectories: Path) -> Iterator[SessionView]:
    root = tmp_path_factory.mktemp("spotter") / "ledger"
    store = LedgerStore(root)
    report = import_path(store, trajectories / FILES["spotter"], tokens_per_char=0.25)
    session = report.sessions[0].session
    head = store.head(session)
    assert head is not None
    yield SessionView.build(store.chain_to_root(head))
    store.close()


def _plan(view: SessionView, prof: CapacityProfile) -> tuple[Plan, ChatRequest]:
    p = view.plan(prof, "", prefix_tokens=prefix_tokens(prof, SYSTEM), tail_tokens=0, current=2)
    return p, project(view.index, p, model="m", infos=view.infos, system=SYSTEM)


def test_the_recorded_compaction_covers_turn_one_and_the_first_steps_of_turn_two(spotter: SessionView) -> None:
    """The import keeps the recording's compaction as a packet over turns 1–2 that covers the steps of
    turn 2 written before it (a mid-turn compaction), with every evidence id of those steps."""
    (summary,) = spotter.index.summaries
    turn1, turn2 = spotter.index.turns
    assert (summary.first_ordinal, summary.last_ordinal) == (1, 2)
    assert summary.through_step is not None and 0 < summary.through_step < len(turn2.steps)
    before = [ex.evidence_id for s in turn2.steps[: summary.through_step] for ex in s.exchanges if ex.evidence_id]
    assert set(summary.covered_evidence) == set(turn1.evidence) | set(before)
    assert summary.summary.startswith("This session is being continued from a previous conversation")


def test_replaying_turn_two_on_a_32k_model_renders_the_recorded_compaction(spotter: SessionView) -> None:
    """On a 32k profile the turn (84k tokens as carried) must compact: the plan reuses the recorded
    packet (no summary to write) and the request carries its summary and every id it names instead of
    turn 1 and turn 2's first steps, whose calls are gone whole; the later steps follow; the request
    fits the horizon, is API-valid, and is the same bytes when planned again."""
    (summary,) = spotter.index.summaries
    k = summary.through_step
    assert k is not None
    p, request = _plan(spotter, MID)
    assert p.packet is not None and p.packet.stored_id == summary.id and p.packet.through_step == k
    assert not p.packet.needs_summary and p.fidelities == "p*"
    ct = p.current_turn
    assert ct is not None and ct.covered == k and ct.steps == len(spotter.index.turn(2).steps)
    packet = request.messages[0].content[0]
    assert isinstance(packet, TextPart)
    assert packet.text.startswith(f'<context_summary turns="1-2" through_step="{k}">')
    assert summary.summary in packet.text
    assert all(short_id(eid) in packet.text for eid in summary.covered_evidence)
    calls = {part.id for m in request.messages for part in m.content if isinstance(part, ToolUsePart)}
    turn1, turn2 = spotter.index.turns
    covered_calls = {ex.tool_use_id for ex in turn1.exchanges} | {
        ex.tool_use_id for s in turn2.steps[:k] for ex in s.exchanges}
    assert not calls & covered_calls
    later = {ex.tool_use_id for s in turn2.steps[ct.packet_through :] for ex in s.exchanges}
    assert later and later <= calls
    assert request_tokens(MID, request) + MID.output_reserve <= p.budget.horizon
    assert api_problems(request.messages) == []
    again_plan, again = _plan(spotter, MID)
    assert again_plan.digest == p.digest
    assert json.dumps(again.model_dump(mode="json")) == json.dumps(request.model_dump(mode="json"))


def test_a_model_that_holds_the_whole_turn_gets_it_from_the_ledger(spotter: SessionView) -> None:
    """A packet is a cache, never a boundary: on a 200k profile the turn fits as carried, so turn 1 is
    Full, no packet is rendered and every step of turn 2 is there."""
    p, request = _plan(spotter, FRONTIER)
    assert p.packet is None and p.fidelities == "F*"
    text = json.dumps(request.model_dump(mode="json"), ensure_ascii=False)
    assert "<context_summary" not in text
    calls = {part.id for m in request.messages for part in m.content if isinstance(part, ToolUsePart)}
    assert {ex.tool_use_id for t in spotter.index.turns for ex in t.exchanges} <= calls
    assert request_tokens(FRONTIER, request) + FRONTIER.output_reserve <= p.budget.horizon
