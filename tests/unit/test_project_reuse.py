"""``project`` builds a plan's history (the turns before the current one) once and resumes it at each later step
of the turn (issue 37): the bytes are those of a projection over a view built afresh from the same entries, the
history's messages are the same objects step after step, and an entry that changes what the history shows (a
withdrawn step of a closed turn, a new turn) makes it build again."""

from __future__ import annotations

from tests.fakes.sessions import SessionBuilder, body_for, build_session, profile
from vak_context.context.history import render
from vak_context.context.history.render import closed_record
from vak_context.context.planner.plan import Plan
from vak_context.context.planner.records import Fidelity
from vak_context.context.planner.sizes import card_text
from vak_context.context.planner.view import SessionView
from vak_context.context.request import assemble
from vak_context.context.request.assemble import project
from vak_context.context.request.messages import ChatRequest, Message
from vak_context.events.blocks import MessageBlock, TextBlock, ToolResultBlock
from vak_context.events.envelope import DECODED
from vak_context.events.payloads import (
    Activity,
    AssistantStep,
    Directive,
    EvidenceBody,
    ToolResult,
    ToolUseBlock,
)

PROFILE = profile(4_000)  # some turns whole, some as cards, no packet


def _plan(b: SessionBuilder) -> Plan:
    current = len(b.view.index.turns)
    return b.view.plan(PROFILE, "", prefix_tokens=50, tail_tokens=20, current=current)


def _project(view: SessionView, p: Plan) -> ChatRequest:
    return project(view.index, p, model="m", infos=view.infos, system="sys", tail="<t>now</t>")


def _fresh(b: SessionBuilder, p: Plan) -> str:
    """The request over a view built afresh from the same entries, with nothing kept by any projection before."""
    for kept in (assemble._HISTORIES, assemble._TURN_RECORDS, assemble._CARDS, assemble._CARD_RUNS, assemble._BLOCKS, assemble._PACKETS,
                 render._RECORDS, DECODED):
        kept.clear()
    return _project(SessionView.build(b.entries), p).model_dump_json()


def _open_turn(b: SessionBuilder) -> str:
    b.add(Directive(text="Read storage/ledger.py again and compare (open turn)."))
    call = "call_open"
    b.add(AssistantStep(blocks=(ToolUseBlock(id=call, name="read_file", input={"path": "storage/ledger.py"}),),
                        stop_reason="tool_use"))
    return call


def test_a_frozen_plan_projected_again_reuses_its_history_and_sends_the_same_bytes_as_without_it() -> None:
    b = build_session(30)
    call = _open_turn(b)
    p = _plan(b)
    fidelities = {t.fidelity for t in p.shown()}
    assert {Fidelity.FULL, Fidelity.CARD} <= fidelities  # the history merges cards and whole turns
    first = _project(b.view, p)
    sent = first.model_dump_json()
    body = body_for("read_file", 99)
    ev = b.add(EvidenceBody(tool_use_id=call, tool_name="read_file", chars=len(body), bytes=len(body)), body.encode())
    b.add(ToolResult(tool_use_id=call, tool_name="read_file", content=body, evidence_id=ev))
    second = _project(b.view, p)  # the next step, on the plan frozen for the turn
    history = len(first.messages) - 3  # the current turn: directive (and tail), its call, its result
    assert all(a is c for a, c in zip(first.messages[:history], second.messages[:history], strict=True))
    assert "line 7 of the ledger module" in second.messages[-1].model_dump_json()  # the step's result, sent
    assert "line 7 of the ledger module" not in first.messages[-1].model_dump_json()
    assert second.model_dump_json() == _fresh(b, p)
    b.entries.pop()  # the first step's entries, as the first step projected them
    b.entries.pop()
    assert sent == _fresh(b, p)


def test_an_entry_that_changes_a_closed_turn_builds_the_history_again() -> None:
    b = build_session(30)
    _open_turn(b)
    p = _plan(b)
    before = _project(b.view, p).model_dump_json()
    full = [t.ordinal for t in p.shown() if t.fidelity == Fidelity.FULL]
    turn = b.view.index.turn(full[-1])
    step = turn.steps[0].id  # the whole turn's tool call, withdrawn by the client
    b.add(Activity(activity="history.withdrawn", detail={"steps": [step]}))
    after = _project(b.view, p).model_dump_json()
    assert after == _fresh(b, p)
    assert after != before and step not in after


def test_the_last_turn_shown_whole_is_rendered_as_it_grows_and_kept_once_another_follows_it() -> None:
    """A plan for a directive not appended yet shows the index's last turn, which may still grow: what is kept of
    a turn is kept only once another turn follows it."""
    b = build_session(12)
    call = _open_turn(b)
    ahead = b.view.plan(PROFILE, "What next?", prefix_tokens=50, tail_tokens=20)  # the last turn, open, shown
    assert ahead.current_ordinal is None
    _project(b.view, ahead)
    body = body_for("read_file", 7)
    ev = b.add(EvidenceBody(tool_use_id=call, tool_name="read_file", chars=len(body), bytes=len(body)), body.encode())
    b.add(ToolResult(tool_use_id=call, tool_name="read_file", content=body, evidence_id=ev))
    again = b.view.plan(PROFILE, "What next?", prefix_tokens=50, tail_tokens=20)
    assert _project(b.view, again).model_dump_json() == _fresh(b, again)
    b.add(Directive(text="And now?"))  # the open turn is closed by the next one
    p = _plan(b)
    assert _project(b.view, p).model_dump_json() == _fresh(b, p)
    assert _project(b.view, p).model_dump_json() == _fresh(b, p)


def _reference(view: SessionView, p: Plan) -> tuple[Message, ...]:
    """The history ``project`` carries, from ``Plan.shown`` turn by turn: retrieved turns first, whole; then each
    shown turn whole at Full, or its card, a run of cards one user message; roles merged as providers want them."""
    index, infos = view.index, view.infos
    out: list[tuple[str, list[MessageBlock]]] = []

    def add(role: str, content: tuple[MessageBlock, ...] | list[MessageBlock]) -> None:
        if out and out[-1][0] == role:
            parts = out[-1][1]
            results = [c for c in content if isinstance(c, ToolResultBlock)]
            if role == "user" and results:
                parts[:] = [*(c for c in parts if isinstance(c, ToolResultBlock)), *results,
                            *(c for c in parts if not isinstance(c, ToolResultBlock)),
                            *(c for c in content if not isinstance(c, ToolResultBlock))]
            else:
                parts.extend(content)
        else:
            out.append((role, list(content)))

    shown = p.shown()
    for t in shown:
        if t.retrieved:
            for m in closed_record(index.turn(t.ordinal), infos):
                add(m.role, m.content)
    cards: list[MessageBlock] = []
    for t in shown:
        if t.retrieved:
            continue
        if t.fidelity == Fidelity.FULL:
            if cards:
                add("user", cards)
                cards = []
            for m in closed_record(index.turn(t.ordinal), infos):
                add(m.role, m.content)
        else:
            cards.append(TextBlock(text=card_text(index, index.turn(t.ordinal), infos)))
    if cards:
        add("user", cards)
    return tuple(Message(role=role, content=tuple(parts)) for role, parts in out)  # type: ignore[arg-type]


def test_the_history_is_the_plans_shown_turns_at_their_fidelity_under_every_budget() -> None:
    """``project`` reads the turns a plan shows from its rows, as runs (no ``PlannedTurn`` each, a run of cards
    as a slice of the blocks kept by position): the same messages as the plan's ``shown`` turns rendered one by
    one, under budgets that show all, some or few turns whole, with retrieved turns among them; and again on
    the kept blocks, and after a closed turn changed."""
    b = build_session(30)
    b.add(Directive(text="Find my reservation ABC123 again and list its flights (turn 1)."))
    current = len(b.view.index.turns)
    seen: set[Fidelity] = set()
    retrieved = 0
    for withdraw in (False, True):
        if withdraw:  # a closed turn changes (revision moves): the kept card blocks are made again
            b.add(Activity(activity="history.withdrawn", detail={"steps": [b.view.index.turn(3).steps[0].id]}))
        for horizon in (1_500, 2_000, 2_500, 3_000, 4_000, 20_000):
            p = b.view.plan(profile(horizon), "", prefix_tokens=50, tail_tokens=20, current=current,
                            reading_terms=("reservation", "ABC123", "flights"))
            for _ in range(2):  # built, then from the card blocks kept
                assemble._HISTORIES.clear()
                history = assemble._history(b.view.index, p, b.view.infos, None).build()
                assert [m.model_dump() for m in history] == [m.model_dump() for m in _reference(b.view, p)]
            seen |= {t.fidelity for t in p.shown()}
            retrieved += sum(t.retrieved for t in p.shown())
    assert {Fidelity.FULL, Fidelity.CARD} <= seen
    assert retrieved  # packeted turns retrieved whole among them
