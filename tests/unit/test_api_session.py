"""The public API end to end, through ``import vak_context`` names only: a 26-turn in-process session
with two tools of the embedder's own and a scripted OpenAI-compatible model (httpx.MockTransport
answering with OpenAI's documented chat-completions bodies, passed in through ``http_client=``).

The window is small, so older turns go to packets once the budget requires them: the engine writes their
summaries with the session's own model (no summariser wired here). At turn 26 the model recalls turn 1's
search result by the evidence id the request shows it and gets the body back byte for byte."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

import vak_context
from tests.fakes.embedder import (
    CALLER_RAISES,
    CLOCK_QUERY,
    EXPLODES,
    RECALLS,
    ScriptedModel,
    make_tools,
    search_results,
    text_of,
)


def directive(turn: int) -> str:
    if turn == RECALLS:
        return "recall turn 1's search result in full"
    if turn == EXPLODES:
        return "please run explode"
    return f"please run make check-{turn}" if turn % 2 == 0 else f"please search query-{turn:03d}"


class CallerError(Exception):
    """The embedder's own code failing mid-turn (not an engine error)."""


@pytest.fixture
def model() -> ScriptedModel:
    return ScriptedModel()


async def test_a_27_turn_session_through_the_public_api(tmp_path: Path, model: ScriptedModel) -> None:
    """Turns 1-26 (older turns packed once the budget needs it, turn 1 recalled byte for byte at 26), a tool
    that raises at 14 (an error result; the turn completes), the caller's on_step raising at 25 (the turn is
    closed failed with its card and the exception propagates), and turn 27 after it works."""
    tools, calls = make_tools()
    steps: list[vak_context.Step] = []
    raise_in: list[int] = []

    def on_step(step: vak_context.Step) -> None:
        steps.append(step)
        if raise_in:
            raise CallerError("the embedder's step hook failed")

    results: dict[int, vak_context.TurnResult] = {}
    async with httpx.AsyncClient(transport=httpx.MockTransport(model.handle)) as client:
        with vak_context.Engine.open(tmp_path / "ledger") as engine:
            async with engine.session("agent-1", model="openai-compat:scripted", base_url="http://127.0.0.1:9/v1",
                                      http_client=client, tools=tools, window=6_000, on_step=on_step) as session:
                for turn in range(1, 28):
                    if turn == CALLER_RAISES:
                        raise_in.append(turn)
                        with pytest.raises(CallerError):
                            await session.run(directive(turn))
                        raise_in.clear()
                        continue
                    results[turn] = await session.run(directive(turn))
                cards = session.cards()
                assert await session.cards_async() == cards  # the async form reads the same
    assert all(r.outcome == "completed" for r in results.values()), {t: r.outcome for t, r in results.items()}
    assert [c.turn for c in cards] == list(range(1, 28))
    assert [c.outcome for c in cards if c.outcome != "completed"] == ["failed"]
    assert cards[CALLER_RAISES - 1].outcome == "failed" and cards[CALLER_RAISES - 1].asked == directive(CALLER_RAISES)
    assert {t: r.card.id for t, r in results.items()} == {c.turn: c.id for c in cards if c.turn != CALLER_RAISES}
    assert results[1].card.asked == directive(1) and results[1].answer.startswith("Done:")
    assert calls[:2] == ["search query-001", "run make check-2"]
    # The tool that raised gave the model an error result naming the exception; the turn went on.
    errored = next(b for b in model.requests if b["messages"][-1]["role"] == "tool"
                   and "sandbox refused" in text_of(b["messages"][-1]))
    assert "run_command failed: RuntimeError: the sandbox refused the command" in text_of(errored["messages"][-1])
    # Packets appear once the budget requires them, and not before: the first turns carry no packet.
    packets = [max(s.fidelity.get("packet", 0) for s in results[t].steps) for t in sorted(results)]
    assert packets[:6] == [0] * 6 and any(packets), packets
    assert model.summaries, "the engine summarised older turns with the session's own model"
    # Turn 26: the recall's tool result is turn 1's search body, byte for byte.
    assert model.recalled is not None and results[RECALLS].steps[0].calls == ("recall",)
    after = [b["messages"] for b in model.requests if b["messages"][-1]["role"] == "tool"
             and [c["function"]["name"] for c in b["messages"][-2].get("tool_calls") or []] == ["recall"]]
    assert len(after) == 1
    recalled = after[0][-1]
    assert text_of(recalled) == json.dumps(search_results(CLOCK_QUERY), ensure_ascii=False)
    # Turn 27, after the failed one, ran its search and answered.
    assert results[27].steps[0].calls == ("web_search",) and calls[-1] == "search query-027"
    assert steps[0].calls == ("web_search",)


async def test_packet_summaries_on_a_cheaper_model(tmp_path: Path) -> None:
    """``summary_model=``: the packet summaries go to the other model's server (its spec, its base URL), and
    the session's own model gets only the turns' requests."""
    own, cheap = ScriptedModel(), ScriptedModel()

    def route(request: httpx.Request) -> httpx.Response:
        return (cheap if request.url.port == 10 else own).handle(request)

    tools, _calls = make_tools()
    async with httpx.AsyncClient(transport=httpx.MockTransport(route)) as client:
        with vak_context.Engine.open(tmp_path / "ledger") as engine:
            async with engine.session("agent-2", model="openai-compat:scripted", base_url="http://127.0.0.1:9/v1",
                                      http_client=client, tools=tools, window=5_000,
                                      summary_model="openai-compat:cheap",
                                      summary_base_url="http://127.0.0.1:10/v1") as session:
                results = [await session.run(directive(turn)) for turn in range(1, 26) if turn != EXPLODES]
    packets = [max(s.fidelity.get("packet", 0) for s in r.steps) for r in results]
    assert any(packets), packets
    assert cheap.summaries and not own.summaries
    assert not cheap.requests and own.requests
    assert {b["model"] for b in cheap.summaries} == {"cheap"}
