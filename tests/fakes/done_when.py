"""Issue 23's done-when session, shared by the tests that run it (in-process and on Ray, through the engine's
loop and the caller's loop): the 27 directives, the embedder's driver of the caller's loop, the on_step hook
that fails mid-turn, and the checks every run passes. Public names only (``import vak_context``).

The directives drive tests/fakes/wire_models.py's scripted model: 26 turns with the embedder's two tools
(tests/fakes/embedder.py), ``find_tools`` at turn 5, two calls in one step at 10, a tool that raises at 14,
a result the embedder marks ``is_error`` at 16, one over-length 400 at 23, the embedder's own code raising
at 25, the recall of turn 1's search result at 26, and turn 27 after the failure."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

import vak_context
from tests.fakes.embedder import CALLER_RAISES, CLOCK_QUERY, EXPLODES, RECALLS, search_results
from tests.fakes.wire_models import WireModel

FINDS, LONG, BOTH, FAILS = 5, 23, 10, 16  # find_tools; the over-length 400; two calls in one step; is_error
TURNS = 27


def directive(turn: int) -> str:
    if turn == RECALLS:
        return "recall turn 1's search result in full"
    if turn == EXPLODES:
        return "please run explode"
    if turn == FINDS:
        return "please find tools that run a shell command"
    if turn == BOTH:
        return f"please search query-{turn:03d} and run make both-{turn}"
    if turn == FAILS:
        return "please run fail-16"
    if turn == LONG:
        return f"a long one: please search query-{turn:03d}"
    return f"please run make check-{turn}" if turn % 2 == 0 else f"please search query-{turn:03d}"


class CallerError(Exception):
    """The embedder's own code failing mid-turn (not an engine error)."""


@dataclass
class Run:
    """What one run of the session gave: each turn's result (the failed one aside), the session's cards."""

    results: dict[int, vak_context.TurnResult] = field(default_factory=dict)
    cards: list[vak_context.Card] = field(default_factory=list)
    sent: list[vak_context.ModelRequest] = field(default_factory=list)  # the caller's loop's requests


# ---------------------------------------------------------------- the caller's loop


async def drive(session: vak_context.Session, text: str, model: WireModel, tools: dict[str, Callable[..., Any]],
                sent: list[vak_context.ModelRequest]) -> vak_context.TurnResult:
    """The embedder's loop: request, send, reply, run the calls (results handed back last call first)."""
    async with session.begin(text) as turn:
        while (request := await turn.request()) is not None:
            sent.append(request)
            status, reply = model.answer(request.body)
            action = await turn.reply(reply, status=status)
            for call in reversed(action.calls):
                try:
                    value = tools[call.name](**call.arguments)
                except Exception as exc:  # the embedder's tool raised: the model reads it as an error
                    await turn.tool_result(call.id, exc)
                    continue
                await turn.tool_result(call.id, value, is_error=call.arguments.get("command") == "fail-16")
    assert turn.done
    return turn.result


async def callers_loop(session: vak_context.Session, model: WireModel, functions: list[Callable[..., Any]]) -> Run:
    """The 27 turns through ``session.begin``; at turn 25 the embedder's code raises after the first reply."""
    tools = {f.__name__: f for f in functions}
    run = Run()
    for turn in range(1, TURNS + 1):
        if turn == CALLER_RAISES:
            with pytest.raises(CallerError):
                async with session.begin(directive(turn)) as open_turn:
                    request = await open_turn.request()
                    assert request is not None
                    await open_turn.reply(model.answer(request.body)[1])
                    raise CallerError("the embedder's code failed before running the call")
            assert open_turn.done and open_turn.result.outcome == "failed"
            continue
        run.results[turn] = await drive(session, directive(turn), model, tools, run.sent)
    run.cards = await session.cards_async()
    return run


def check_callers_loop(run: Run, model: WireModel, ran: list[str], *, wire: str, key: str | None = None) -> None:
    """The caller's loop's own checks (``wire``: the adapter's name on each request), then the shared ones."""
    fmt = model.wire
    assert {r.wire for r in run.sent} == {wire}
    assert all(r.url.endswith(fmt.path) and r.url.endswith(r.path) for r in run.sent)
    if key is not None:  # rendered for the wire, and never with the key in the body
        assert all(key not in json.dumps(r.body) for r in run.sent)
    errors = {t: e for b in model.requests if fmt.last(b)[0] == "tool" for t, e in fmt.last(b)[1]}
    raised = next(t for t in errors if "sandbox refused" in t)
    failed = next(t for t in errors if "fail-16: line 01" in t)
    if fmt.name in ("anthropic", "gemini"):  # the wires that carry the flag
        assert errors[raised] is True and errors[failed] is True
    check_session(run, model, ran)


# ---------------------------------------------------------------- the engine's loop


class FailingHook:
    """The embedder's ``on_step``: records each step, and raises while ``armed`` (the caller's code failing)."""

    def __init__(self) -> None:
        self.steps: list[vak_context.Step] = []
        self.armed = False

    def __call__(self, step: vak_context.Step) -> None:
        self.steps.append(step)
        if self.armed:
            raise CallerError("the embedder's step hook failed")


async def engines_loop(session: vak_context.Session, hook: FailingHook) -> Run:
    """The 27 turns through ``session.run``; at turn 25 the session's on_step hook raises."""
    run = Run()
    for turn in range(1, TURNS + 1):
        if turn == CALLER_RAISES:
            hook.armed = True
            with pytest.raises(CallerError):
                await session.run(directive(turn))
            hook.armed = False
            continue
        run.results[turn] = await session.run(directive(turn))
    run.cards = await session.cards_async()
    return run


# ---------------------------------------------------------------- what every run shows


def check_session(run: Run, model: WireModel, ran: list[str]) -> None:
    """What the done-when item asks of every run, whichever loop drove it."""
    fmt, results, cards = model.wire, run.results, run.cards
    # Every turn ended with a card; the caller's failure is turn 25's, and turn 27 after it worked.
    assert [c.turn for c in cards] == list(range(1, TURNS + 1))
    assert [(c.turn, c.outcome) for c in cards if c.outcome != "completed"] == [(CALLER_RAISES, "failed")]
    assert cards[CALLER_RAISES - 1].asked == directive(CALLER_RAISES)
    assert all(r.outcome == "completed" for r in results.values()), {t: r.outcome for t, r in results.items()}
    assert {t: r.card.id for t, r in results.items()} == {c.turn: c.id for c in cards if c.turn != CALLER_RAISES}
    assert results[27].steps[0].calls == ("web_search",) and ran[-1] == "search query-027"
    # find_tools and recall once each, answered by the engine: the embedder never ran them.
    assert model.called.count("find_tools") == 1 and model.called.count("recall") == 1
    assert results[FINDS].steps[0].calls == ("find_tools",) and results[FINDS].answer.startswith("Done:")
    # One documented over-length 400, re-planned once: the turn's next request is smaller and it completed.
    assert model.overflows == 1
    long_requests = [b for b in model.requests if fmt.last(b) == ("user", [(directive(LONG), None)])]
    assert len(long_requests) == 2
    assert len(json.dumps(long_requests[1])) < len(json.dumps(long_requests[0]))
    assert results[LONG].steps[0].replanned and results[LONG].answer.startswith("Done:")
    # Two calls in one step: stored (and shown to the model) in the model's order.
    both = next(b for b in model.requests if fmt.last(b)[0] == "tool" and "both-10" in json.dumps(fmt.last(b)[1]))
    shown = [text for text, _ in fmt.last(both)[1]]
    assert len(shown) == 2 and CLOCK_QUERY not in shown[0] and "query-010" in shown[0] and "both-10" in shown[1]
    # The tool that raised reached the model as an error result naming the exception; the turn went on.
    errors = [t for b in model.requests if fmt.last(b)[0] == "tool" for t, _ in fmt.last(b)[1]]
    assert any("run_command failed: RuntimeError: the sandbox refused the command" in t for t in errors)
    assert results[EXPLODES].outcome == "completed"
    # Packets appear once the budget requires them (not in the first turns), written with the bound model.
    packets = [max(s.fidelity.get("packet", 0) for s in results[t].steps) for t in sorted(results)]
    assert packets[:6] == [0] * 6 and any(packets), packets
    assert model.summaries
    # Turn 26: the recall's tool result is turn 1's search body, byte for byte.
    assert model.recalled is not None and results[RECALLS].steps[0].calls == ("recall",)
    recalled = [b for b in model.requests if fmt.last(b)[0] == "tool" and CLOCK_QUERY in fmt.last(b)[1][0][0]]
    assert [fmt.last(b)[1][0][0] for b in recalled][-1] == json.dumps(search_results(CLOCK_QUERY),
                                                                    ensure_ascii=False)

