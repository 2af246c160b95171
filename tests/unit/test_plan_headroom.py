"""The current turn's headroom (``vak_context.context.planner.headroom``): a turn planned at its first step
leaves room for what the session's recent turns took beside their plans' history, so its next step keeps
the frozen plan instead of outgrowing it and planning again; the headroom is a recorded plan input, so
``explain`` still plans the same."""

from __future__ import annotations

import math
from pathlib import Path

from pydantic import BaseModel

from vak_context.actors.assembler import AssemblerActor
from vak_context.actors.planner import PlannerActor
from vak_context.agent.steps import StepRequest
from vak_context.context.capacity.profile import CapacityProfile, Ewma, Horizon, ProfileKey
from vak_context.context.history.turncard import build_card
from vak_context.context.planner.headroom import MARGIN, RECENT_TURNS, Headroom, beside_history
from vak_context.context.planner.view import SessionView
from vak_context.context.request.messages import ToolSpec
from vak_context.events.envelope import Mapper
from vak_context.events.payloads import (
    AssistantStep,
    Directive,
    EvidenceBody,
    PlanRecord,
    TextBlock,
    ToolResult,
    ToolUseBlock,
)
from vak_context.storage.ledger import LedgerStore

PROFILE = CapacityProfile(ProfileKey("local", "m"), 8_192, Horizon(4_000, 0.9, 0.0), Ewma(0.25, 3), 256)
READ = StepRequest(model="m", system="You are careful.", tools=(ToolSpec(name="read_file", description="Read."),),
                   tail="<turn_context>now</turn_context>\n", max_tokens=64)


class _NoHeadroom(Headroom):
    """The planner as it was before the headroom: the EWMA of past turns' sizes alone."""

    def of(self, key: tuple[str, str]) -> int | None:
        return None


def _put(store: LedgerStore, payload: BaseModel, blob: bytes | None = None) -> str:
    return store.append("s", [payload], blobs=[blob])[0]


def _read_step(store: LedgerStore, k: int, lines: int) -> None:
    body = "\n".join(f"{j:4d}  line {j} read at step {k}" for j in range(lines))
    call = f"call_{k}"
    _put(store, AssistantStep(blocks=(ToolUseBlock(id=call, name="read_file", input={"path": f"f{k}.py"}),)))
    ev = _put(store, EvidenceBody(tool_use_id=call, tool_name="read_file", chars=len(body), bytes=len(body)),
              body.encode())
    _put(store, ToolResult(tool_use_id=call, tool_name="read_file", content=body, evidence_id=ev))


async def _turns(root: Path, assembler_of: type[Headroom], turns: int) -> list[tuple[bool, bool]]:
    """``turns`` turns of two steps each (a read of about the same size every turn, then the answer) through
    one assembler: per turn, whether its first and its second step planned."""
    out = []
    with LedgerStore(root) as store:
        assembler = AssemblerActor(str(root), store)
        assembler._headroom = assembler_of()
        for i in range(turns):
            _put(store, Directive(text=f"Read module {i} and explain it."))
            first = await assembler.assemble("s", PROFILE, READ)
            _read_step(store, i, 36 + 6 * (i % 4))
            second = await assembler.assemble("s", PROFILE, READ)
            _put(store, AssistantStep(blocks=(TextBlock(text="It keeps the ledger's segments in order. " * 4),)))
            view = SessionView.build(store.chain_to_root(store.head("s") or ""))
            turn = view.index.current
            assert turn is not None
            _put(store, build_card(view.index, turn, view.turn_infos(turn)))  # as the EvidenceActor does
            out.append((first.replanned, second.replanned))
    return out


async def test_a_turns_second_step_keeps_its_plan_once_the_sessions_turns_are_measured(tmp_path: Path) -> None:
    """Every first step plans; once the history fills the budget, with the EWMA alone some second steps
    outgrow the plan (the EWMA is the turns' mean size, and their reads vary); with the headroom, none does."""
    before = await _turns(tmp_path / "ewma", _NoHeadroom, 30)
    after = await _turns(tmp_path / "headroom", Headroom, 30)
    assert all(first for first, _ in before) and all(first for first, _ in after)
    assert sum(second for _, second in before) >= 2
    assert [second for _, second in after] == [False] * 30


async def test_the_headroom_is_a_recorded_input_and_explain_plans_the_same(tmp_path: Path) -> None:
    """Each plan after the first turn records the headroom it was planned with, and the PlannerActor's
    ``explain`` plans it again from the recorded inputs to the same digests."""
    root = tmp_path / "ledger"
    await _turns(root, Headroom, 14)
    with LedgerStore(root) as store:
        plans = [(e.id, Mapper().payload_of(e)) for e in store.entries("s") if e.kind == "plan"]
        planner = PlannerActor(str(root), store)
        assert all(isinstance(r, PlanRecord) for _, r in plans)
        recorded = [r.inputs.get("headroom") for _, r in plans if isinstance(r, PlanRecord)]
        assert recorded[0] is None and all(isinstance(h, int) and h > 0 for h in recorded[1:])
        assert all(planner.explain(entry_id)["matches"] for entry_id, _ in plans)


def test_the_headroom_is_the_largest_of_the_recent_turns_with_a_margin(tmp_path: Path) -> None:
    """Per key, each turn's largest figure (a request's tokens less the plan's history), the largest of the
    last ``RECENT_TURNS`` turns, times ``MARGIN``; an older turn's figure leaves the window."""
    with LedgerStore(tmp_path / "ledger") as store:
        _put(store, Directive(text="Read module 0 and explain it."))
        view = SessionView.build(store.chain_to_root(store.head("s") or ""))
    turn = view.index.current
    assert turn is not None
    p = view.plan(PROFILE, "", prefix_tokens=10, tail_tokens=10, current=turn.ordinal)
    base = beside_history(p)
    room = Headroom()
    assert room.of(("s", "m")) is None
    room.saw(("s", "m"), "t1", p, base + 900)  # a large turn, then smaller ones
    room.saw(("s", "m"), "t1", p, base + 100)  # the turn's largest request counts
    assert room.of(("s", "m")) == math.ceil(MARGIN * 900)
    for k in range(RECENT_TURNS):
        room.saw(("s", "m"), f"t{k + 2}", p, base + 200 + k)
    assert room.of(("s", "m")) == math.ceil(MARGIN * (200 + RECENT_TURNS - 1))
    assert room.of(("s", "other")) is None
