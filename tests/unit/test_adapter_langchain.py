"""The LangChain adapter against the real framework: ``create_agent`` with two tools of its own and the
adapter's middleware (which registers the engine's tools), driven by langchain-core's own
``GenericFakeChatModel`` (no network). Three runs: a search (a result of about 10k characters), a command,
then a ``recall`` of the first run's search result by the evidence id the projection shows; the model
receives the engine's projection (the engine's system prompt instead of the agent's, turn 1 as a digest by
the third run) and the recalled body byte for byte; the ledger holds three completed turns with their
cards, each closed as its run ended; an edited history is refused; a call after the engine closed the
turn raises TurnOver."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatResult
from langchain_core.tools import tool
from pydantic import Field

import vak_context
from vak_context.adapters.langchain import VakMiddleware

RESULTS = [{"title": f"result {i} for query-001", "body": f"{i:02d} " + "lorem ipsum dolor " * 28} for i in range(20)]
SEARCH_BODY = json.dumps(RESULTS)
KEY = "sk-test-adapter-0123456789abcdef"  # never sent: the framework calls its own model


@tool
def search(query: str) -> str:
    """Search the notes; returns the matching notes as JSON."""
    return SEARCH_BODY if query == "query-001" else "[]"


@tool
def run_command(command: str) -> str:
    """Run a shell command; returns its output and exit code."""
    return f"$ {command}\nok\nexit code: 0"


class Recording(GenericFakeChatModel):
    """langchain-core's fake chat model, recording what each call received and which tools were bound (its
    replies come from ``messages``, a generator reading what the model got so far)."""

    seen: list[list[BaseMessage]] = Field(default_factory=list)
    bound: list[list[str]] = Field(default_factory=list)

    def bind_tools(self, tools: Sequence[Any], **_: Any) -> Any:
        self.bound.append([getattr(t, "name", "") or t["function"]["name"] for t in tools])
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        self.seen.append(list(messages))
        return super()._generate(messages, *args, **kwargs)


def script(model: Recording) -> Iterator[AIMessage]:
    """One tool call per directive, then an answer naming the directive."""
    usage = {"input_tokens": 900, "output_tokens": 20, "total_tokens": 920}
    yield AIMessage("", tool_calls=[{"id": "call-search", "name": "search", "args": {"query": "query-001"}}],
                    usage_metadata=usage)
    yield AIMessage("Done: please search query-001.", usage_metadata=usage)
    yield AIMessage("", tool_calls=[{"id": "call-cmd", "name": "run_command", "args": {"command": "make check"}}])
    yield AIMessage("Done: please run make check.")
    yield AIMessage("", tool_calls=[{"id": "call-recall", "name": "recall",
                                     "args": {"id": evidence_of_turn_1(model.seen[-1])}}])
    yield AIMessage("Done: recall turn 1's search result in full.")


def evidence_of_turn_1(messages: list[BaseMessage]) -> str:
    """The evidence id the projection shows with turn 1's search result (its digest or card)."""
    for m in messages:
        text = m.content if isinstance(m.content, str) else str(m.content)
        if "query-001" in text and (found := re.search(r"evidence:([0-9a-f]{6,64})", text)):
            return found.group(1)
    raise AssertionError(f"turn 1's evidence id is not in the projection: {messages!r}"[:6000])


def fake_model() -> Recording:
    model = Recording(messages=iter(()))
    model.messages = script(model)
    return model


async def test_three_runs_with_a_recall(tmp_path: Path) -> None:
    model = fake_model()
    directives = ["please search query-001", "please run make check", "recall turn 1's search result in full"]
    with vak_context.Engine.open(tmp_path / "ledger") as engine:
        vak = VakMiddleware(engine, "lc-1", model="openai:gpt-4o-mini", api_key=KEY, window=32_000)
        agent = create_agent(model, tools=[search, run_command], middleware=[vak],
                             system_prompt="Answer briefly.")
        messages: list[Any] = []
        for done, directive in enumerate(directives, 1):
            state = await agent.ainvoke({"messages": [*messages, HumanMessage(directive)]})
            messages = state["messages"]
            assert messages[-1].content == f"Done: {directive}."
            assert len(vak.results) == done  # the turn closed as its run ended, with no settle call
        results = vak.results
        session = vak.session
        assert session is not None
        cards = await session.cards_async()
        await vak.close()

    assert [r.outcome for r in results] == ["completed"] * 3
    assert [c.asked for c in cards] == directives
    assert len(model.seen) == 6
    # Every model call got the engine's projection: the engine's system prompt, not the agent's.
    for seen in model.seen:
        assert seen[0].type == "system" and "Answer briefly." not in str(seen[0].content)
    # The tools bound are the agent's and the middleware's, as the engine's surface names them.
    assert all({"search", "run_command", "recall"} <= set(names) for names in model.bound)
    # The framework ran the recall tool (the placeholder); the engine answered it inside the turn and the
    # model's next call carries the body byte for byte.
    ran = [m for m in messages if isinstance(m, ToolMessage) and m.tool_call_id == "call-recall"]
    assert len(ran) == 1 and SEARCH_BODY not in str(ran[0].content)
    returned = [m for m in model.seen[-1] if isinstance(m, ToolMessage) and m.tool_call_id == "call-recall"]
    assert len(returned) == 1 and SEARCH_BODY in str(returned[0].content)
    # Turn 1's result reaches the third run's first call only as the engine's digest, not in full.
    assert SEARCH_BODY not in "".join(str(m.content) for m in model.seen[4])


async def test_an_edited_history_is_refused(tmp_path: Path) -> None:
    with vak_context.Engine.open(tmp_path / "ledger") as engine:
        vak = VakMiddleware(engine, "lc-2", model="openai:gpt-4o-mini", api_key=KEY, window=32_000)
        agent = create_agent(fake_model(), tools=[search, run_command], middleware=[vak])
        state = await agent.ainvoke({"messages": [HumanMessage("please search query-001")]})
        edited = [HumanMessage("something else"), *state["messages"][1:], HumanMessage("please run make check")]
        with pytest.raises(vak_context.AppendOnlyHistory, match="append-only"):
            await agent.ainvoke({"messages": edited})
        await vak.close()


async def test_a_call_after_the_engine_closed_the_turn_raises_turn_over(tmp_path: Path) -> None:
    """The same search, over and over: the engine ends the turn; the agent's next model call raises
    TurnOver, and the turn's result is recorded (the next user message begins a new turn)."""
    repeated = (AIMessage("", tool_calls=[{"id": f"call-{i}", "name": "search", "args": {"query": "query-001"}}])
                for i in range(40))
    model = Recording(messages=iter([*repeated]))
    with vak_context.Engine.open(tmp_path / "ledger") as engine:
        vak = VakMiddleware(engine, "lc-3", model="openai:gpt-4o-mini", api_key=KEY, window=32_000)
        agent = create_agent(model, tools=[search, run_command], middleware=[vak])
        with pytest.raises(vak_context.TurnOver, match="closed this turn") as over:
            await agent.ainvoke({"messages": [HumanMessage("please search query-001")]})
        assert len(model.seen) < 40
        assert [r.outcome for r in vak.results] == [over.value.outcome]
        await vak.close()
