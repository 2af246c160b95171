"""The caller's loop through public names only (``import vak_context``), once per wire format: the embedder
takes each request rendered for the bound model's format, "sends" it to a scripted model answering with
the provider's documented bodies (tests/fakes/wire_models.py), hands back the reply and the results of its
own two tools (a search with 20 JSON results of about 10k characters, a command with 66 lines and an exit
code). The engine's own side calls (packet summaries, counts) go through the session's ``http_client``.

In each run: 27 turns; the model calls ``find_tools`` and ``recall`` once each and meets one documented
over-length 400, re-planned once; packets appear once the small window needs them (no summariser wired);
turn 26 recalls turn 1's search result byte for byte; a tool that raised and a result marked ``is_error``
reach the model as errors; the caller's code raising at turn 25 leaves a failed turn with a card, and turn
27 works."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

import vak_context
from tests.fakes.embedder import CALLER_RAISES, CLOCK_QUERY, EXPLODES, RECALLS, make_tools, search_results
from tests.fakes.wire_models import FORMATS, WireModel

SPECS = {"openai": "openai:gpt-4o-mini", "openai-responses": "openai-responses:gpt-4o-mini",
         "anthropic": "anthropic:claude-sonnet-4-5", "gemini": "gemini:gemini-2.5-flash"}
# The window override each run plans against (the fake counts and bills the whole prompt: system, tools
# and conversation): small enough that older turns go to packets, with room for a summary, well before
# turn 26; Gemini's rendering of the same turns is larger.
WINDOWS = {"openai": 9_500, "openai-responses": 9_500, "anthropic": 9_500, "gemini": 10_500}
KEY = "sk-test-callers-loop-0123456789abcdef"
FINDS, LONG, BOTH, FAILS = 5, 23, 10, 16  # find_tools; the over-length 400; two calls in one step; is_error


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
    """The embedder's own code failing mid-turn."""


async def drive(session: vak_context.Session, text: str, model: WireModel, tools: dict[str, Any],
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


@pytest.mark.parametrize("wire", sorted(SPECS))
async def test_27_turns_of_the_callers_loop(tmp_path: Path, wire: str) -> None:
    model = WireModel(FORMATS[wire])
    functions, ran = make_tools()
    tools = {f.__name__: f for f in functions}
    results: dict[int, vak_context.TurnResult] = {}
    sent: list[vak_context.ModelRequest] = []
    async with httpx.AsyncClient(transport=httpx.MockTransport(model.handle)) as client:
        with vak_context.Engine.open(tmp_path / "ledger") as engine:
            async with engine.session("agent-1", model=SPECS[wire], api_key=KEY, http_client=client,
                                      tools=functions, window=WINDOWS[wire]) as session:
                for turn in range(1, 28):
                    if turn == CALLER_RAISES:
                        with pytest.raises(CallerError):
                            async with session.begin(directive(turn)) as open_turn:
                                request = await open_turn.request()
                                assert request is not None
                                await open_turn.reply(model.answer(request.body)[1])
                                raise CallerError("the embedder's code failed before running the call")
                        assert open_turn.done and open_turn.result.outcome == "failed"
                        continue
                    results[turn] = await drive(session, directive(turn), model, tools, sent)
                cards = session.cards()
    # Every turn ended with a card; the caller's failure is turn 25's, and turn 27 after it worked.
    assert [c.turn for c in cards] == list(range(1, 28))
    assert [(c.turn, c.outcome) for c in cards if c.outcome != "completed"] == [(CALLER_RAISES, "failed")]
    assert all(r.outcome == "completed" for r in results.values()), {t: r.outcome for t, r in results.items()}
    assert {t: r.card.id for t, r in results.items()} == {c.turn: c.id for c in cards if c.turn != CALLER_RAISES}
    assert results[27].steps[0].calls == ("web_search",) and ran[-1] == "search query-027"
    # Rendered for the wire, with the path to send it to, and never the key.
    assert {r.wire for r in sent} == {wire}
    assert all(r.url.endswith(FORMATS[wire].path) and r.url.endswith(r.path) for r in sent)
    assert all(KEY not in json.dumps(r.body) for r in sent)
    # find_tools and recall once each, answered inside: the caller never saw them as calls to run.
    assert model.called.count("find_tools") == 1 and model.called.count("recall") == 1
    assert results[FINDS].steps[0].calls == ("find_tools",) and results[FINDS].answer.startswith("Done:")
    # One documented over-length 400, re-planned once: the turn's next request is smaller and it completed.
    assert model.overflows == 1
    long_requests = [r for r in sent if FORMATS[wire].last(r.body) == ("user", [(directive(LONG), None)])]
    assert len(long_requests) == 2
    assert len(json.dumps(long_requests[1].body)) < len(json.dumps(long_requests[0].body))
    assert results[LONG].steps[0].replanned and results[LONG].answer.startswith("Done:")
    # Two calls in one step, handed back last first: stored (and shown to the model) in the model's order.
    both = next(b for b in model.requests if FORMATS[wire].last(b)[0] == "tool"
                and "both-10" in json.dumps(FORMATS[wire].last(b)[1]))
    shown = [text for text, _ in FORMATS[wire].last(both)[1]]
    assert len(shown) == 2 and CLOCK_QUERY not in shown[0] and "query-010" in shown[0] and "both-10" in shown[1]
    # The tool that raised and the result marked is_error reach the model as errors.
    errors = {t: e for b in model.requests if FORMATS[wire].last(b)[0] == "tool" for t, e in FORMATS[wire].last(b)[1]}
    raised = next(t for t in errors if "sandbox refused" in t)
    assert "run_command failed: RuntimeError: the sandbox refused the command" in raised
    failed = next(t for t in errors if "fail-16: line 01" in t)
    if wire in ("anthropic", "gemini"):  # the wires that carry the flag
        assert errors[raised] is True and errors[failed] is True
    # Packets appear once the budget requires them, written with the session's own model.
    packets = [max(s.fidelity.get("packet", 0) for s in results[t].steps) for t in sorted(results)]
    assert packets[:6] == [0] * 6 and any(packets), packets
    assert model.summaries
    # Turn 26: the recall's tool result is turn 1's search body, byte for byte.
    assert model.recalled is not None and results[RECALLS].steps[0].calls == ("recall",)
    recalled = [b for b in model.requests if FORMATS[wire].last(b)[0] == "tool"
                and CLOCK_QUERY in FORMATS[wire].last(b)[1][0][0]]
    assert [FORMATS[wire].last(b)[1][0][0] for b in recalled][-1] == json.dumps(search_results(CLOCK_QUERY),
                                                                               ensure_ascii=False)
