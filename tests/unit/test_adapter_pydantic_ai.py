"""The pydantic-ai adapter against the real framework: an ``Agent`` with two tools of its own, the
adapter's history processor and the engine's tools, driven by pydantic-ai's own ``FunctionModel`` (no
network). Three runs: a search (a result of about 10k characters), a command, then a ``recall`` of the
first run's search result by the evidence id the projection shows; the model receives the engine's
projection (the engine's system prompt, turn 1 as a card by the third run) and the recalled body byte for
byte; the ledger holds three completed turns with their cards; an edited history is refused."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

import vak_context
from vak_context.adapters.pydantic_ai import VakHistory

RESULTS = [{"title": f"result {i} for query-001", "body": f"{i:02d} " + "lorem ipsum dolor " * 28} for i in range(20)]
SEARCH_BODY = json.dumps(RESULTS)
KEY = "sk-test-adapter-0123456789abcdef"  # never sent: the framework calls its own model


def search(query: str) -> str:
    """Search the notes; returns the matching notes as JSON.

    Args:
        query: what to search for
    """
    return SEARCH_BODY if query == "query-001" else "[]"


def run_command(command: str) -> str:
    """Run a shell command; returns its output and exit code.

    Args:
        command: the command line
    """
    return f"$ {command}\nok\nexit code: 0"


class Scripted:
    """pydantic-ai's FunctionModel body: one tool call per directive, then an answer; records what it got."""

    def __init__(self) -> None:
        self.seen: list[list[ModelMessage]] = []
        self.recalled = ""

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.seen.append(messages)
        last = messages[-1]
        assert isinstance(last, ModelRequest)
        if any(isinstance(p, ToolReturnPart) for p in last.parts):
            return ModelResponse(parts=[TextPart(f"Done: {latest_user(messages).splitlines()[-1]}.")])
        if "recall turn 1" in latest_user(messages).splitlines()[-1]:
            self.recalled = evidence_of_turn_1(messages)
            return ModelResponse(parts=[ToolCallPart("recall", {"id": self.recalled}, tool_call_id="call-recall")])
        if "make check" in latest_user(messages):
            return ModelResponse(parts=[ToolCallPart("run_command", {"command": "make check"}, tool_call_id="call-cmd")])
        return ModelResponse(parts=[ToolCallPart("search", {"query": "query-001"}, tool_call_id="call-search")])


def latest_user(messages: list[ModelMessage]) -> str:
    texts = [p.content for m in messages if isinstance(m, ModelRequest) for p in m.parts
             if isinstance(p, UserPromptPart) and isinstance(p.content, str)]
    return texts[-1] if texts else ""


def evidence_of_turn_1(messages: list[ModelMessage]) -> str:
    """The evidence id the projection shows with turn 1's search result (its digest or card)."""
    for m in messages:
        for p in m.parts:
            text = getattr(p, "content", "")
            if isinstance(text, str) and "query-001" in text and (found := re.search(r"evidence:([0-9a-f]{6,64})", text)):
                return found.group(1)
    raise AssertionError(f"turn 1's evidence id is not in the projection: {messages!r}"[:6000])


async def test_three_runs_with_a_recall(tmp_path: Path) -> None:
    model = Scripted()
    directives = ["please search query-001", "please run make check", "recall turn 1's search result in full"]
    with vak_context.Engine.open(tmp_path / "ledger") as engine:
        vak = VakHistory(engine, "pyd-1", model="openai:gpt-4o-mini", api_key=KEY,
                         window=32_000)
        agent = Agent(FunctionModel(model), tools=[search, run_command], capabilities=[vak.capability()],
                      toolsets=[vak.toolset()], instructions="Answer briefly.")
        history: list[ModelMessage] = []
        for directive in directives:
            result = await agent.run(directive, message_history=history)
            history = result.all_messages()
            assert result.output == f"Done: {directive}."
        settled = await vak.settle(history)
        session = vak.session
        assert session is not None
        cards = await session.cards_async()
        await vak.close()

    assert settled is not None and settled.outcome == "completed"
    assert [r.outcome for r in vak.results] == ["completed"] * 3
    assert [c.asked for c in cards] == directives
    # Every model call got the engine's projection: its system prompt, the agent's instructions kept.
    for seen in model.seen:
        first = seen[0]
        assert isinstance(first, ModelRequest) and isinstance(first.parts[0], SystemPromptPart)
        last = seen[-1]
        assert isinstance(last, ModelRequest) and last.instructions == "Answer briefly."
    # The recall: the engine answered it inside the turn; the model's next call carries the body byte for
    # byte (the framework's own run of the tool returned only the placeholder).
    after_recall = model.seen[-1]
    returned = [p for m in after_recall if isinstance(m, ModelRequest) for p in m.parts
                if isinstance(p, ToolReturnPart) and p.tool_call_id == "call-recall"]
    assert len(returned) == 1 and SEARCH_BODY in str(returned[0].content)
    # Turn 1's result reaches the third run's first call only as the engine's digest, not in full.
    third_first = model.seen[4]
    assert SEARCH_BODY not in "".join(str(getattr(p, "content", "")) for m in third_first for p in m.parts)


async def test_an_edited_history_is_refused(tmp_path: Path) -> None:
    with vak_context.Engine.open(tmp_path / "ledger") as engine:
        vak = VakHistory(engine, "pyd-2", model="openai:gpt-4o-mini", api_key=KEY,
                         window=32_000)
        agent = Agent(FunctionModel(Scripted()), tools=[search, run_command], capabilities=[vak.capability()],
                      toolsets=[vak.toolset()])
        result = await agent.run("please search query-001")
        edited: list[Any] = [ModelRequest(parts=[UserPromptPart("something else")]), *result.all_messages()[1:]]
        with pytest.raises(vak_context.AppendOnlyHistory, match="append-only"):
            await agent.run("please run make check", message_history=edited)
        await vak.close()
