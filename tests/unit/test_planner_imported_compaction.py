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

from tests.fakes.imported import FILES
from tests.fakes.sessions import SessionBuilder
from vak_context.context.capacity.profile import CapacityProfile, Ewma, Horizon, ProfileKey
from vak_context.context.history.packets import seed_packet
from vak_context.context.history.render import api_problems
from vak_context.context.history.turncard import short_id
from vak_context.context.planner.plan import Plan
from vak_context.context.planner.view import SessionView
from vak_context.context.request.assemble import prefix_tokens, project, request_tokens
from vak_context.context.request.messages import ChatRequest
from vak_context.events.blocks import TextBlock, ToolUseBlock
from vak_context.events.payloads import AssistantStep, Compaction, CoveredEvidence, EvidenceBody, ToolResult
from vak_context.importers import import_path
from vak_context.storage.ledger import LedgerStore

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
    assert isinstance(packet, TextBlock)
    assert packet.text.startswith(f'<context_summary turns="1-2" through_step="{k}">')
    assert summary.summary in packet.text
    assert all(short_id(eid) in packet.text for eid in summary.covered_evidence)
    calls = {part.id for m in request.messages for part in m.content if isinstance(part, ToolUseBlock)}
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
    calls = {part.id for m in request.messages for part in m.content if isinstance(part, ToolUseBlock)}
    assert {ex.tool_use_id for t in spotter.index.turns for ex in t.exchanges} <= calls
    assert request_tokens(FRONTIER, request) + FRONTIER.output_reserve <= p.budget.horizon


def test_a_compaction_inside_the_first_turn_covers_its_first_steps() -> None:
    """A recording that compacted inside its only turn (as `vak import` writes it: a compaction over
    that turn, mid-turn): replaying the turn where it must compact reuses it, `turns="1-1"` through
    the steps before it, and the steps after it follow; it is not used as a seed for a grown packet."""
    b = SessionBuilder()
    tools = [("read_file", {"path": f"src/m{k}.py"}, "\n".join(f"{j:4d}  line {j} of module {k}, code" for j in range(120)),
              False) for k in range(10)]
    b.turn("Refactor the modules one by one.", tools[:6], "Halfway.", close=False)
    index = b.view.index
    turn = index.turn(1)
    b.add(Compaction(first_turn_id=turn.id, last_turn_id=turn.id, summary="Modules 0-5 were refactored.",
                     covered_evidence=tuple(CoveredEvidence(id=e, description="read") for e in turn.evidence),
                     model="anthropic:claude"))
    k = len(turn.steps)
    for n, (name, args, body, _err) in enumerate(tools[6:], start=6):
        call = f"call_late_{n}"
        b.add(AssistantStep(blocks=(ToolUseBlock(id=call, name=name, input=dict(args)),), stop_reason="tool_use"))
        ev = b.add(EvidenceBody(tool_use_id=call, tool_name=name, chars=len(body), bytes=len(body)), body.encode())
        b.add(ToolResult(tool_use_id=call, tool_name=name, content=body, evidence_id=ev))
    (summary,) = index.summaries
    assert summary.through_step == k < len(turn.steps)
    prof = _profile("small", 6_000, 8_192, 256)
    p = b.view.plan(prof, "", prefix_tokens=0, tail_tokens=0, current=1)
    assert p.packet is not None and p.packet.stored_id == summary.id and p.packet_range == (1, 1)
    request = project(index, p, model="m", infos=b.view.infos)
    lead = request.messages[0].content[0]
    assert isinstance(lead, TextBlock) and lead.text.startswith(f'<context_summary turns="1-1" through_step="{k}">')
    assert f"Steps 1–{k} of turn 1 are not shown whole here" in lead.text and "Modules 0-5" in lead.text
    calls = {part.id for m in request.messages for part in m.content if isinstance(part, ToolUseBlock)}
    assert not calls & {ex.tool_use_id for s in turn.steps[:k] for ex in s.exchanges}
    assert "call_late_9" in calls
    assert request_tokens(prof, request) + prof.output_reserve <= p.budget.horizon
    assert api_problems(request.messages) == []
    assert seed_packet(index, turn.id, 2) is None  # it covers turn 1 partly: never a seed
