"""The adapters and the turn rules (issue 33), through the pydantic-ai adapter and pydantic-ai's own
``FunctionModel`` (no network): three prompts that share no word, each answered "OK.", end completed,
completed, completed with their answers, by default (``observe``) and under ``enforce``; and a run the
framework finished is never cancelled by a rule: under ``enforce``, a live question answered from nothing
(the freshness rule wants one more model call) closes completed with the framework's answer, the rule's
nudge and a ``turn.accepted`` activity in the ledger."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import vak_context
from vak_context.adapters.pydantic_ai import VakHistory
from vak_context.events.envelope import Mapper

KEY = "sk-test-adapter-0123456789abcdef"  # never sent: the framework calls its own model
PROMPTS = ["Summarise the quarterly invoices", "Book a meeting room", "Translate this greeting"]


def note(summary: str) -> str:
    """Keep a note.

    Args:
        summary: what to note
    """
    return "noted"


async def runs(tmp_path: Path, prompts: list[str], reply: str, **options: Any) -> tuple[list[Any], list[str], list[str]]:
    """Each prompt run through the agent (each model call answered ``reply``): the engine's results, the
    agent's outputs and the session's activity names."""
    calls: list[int] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls.append(1)
        return ModelResponse(parts=[TextPart(reply)])

    with vak_context.Engine.open(tmp_path / "ledger") as engine:
        vak = VakHistory(engine, "pyd-rules", model="openai:gpt-4o-mini", api_key=KEY, window=32_000, **options)
        agent = Agent(FunctionModel(model), tools=[note], capabilities=[vak.capability()], toolsets=[vak.toolset()])
        history: list[ModelMessage] = []
        outputs = []
        for prompt in prompts:
            result = await agent.run(prompt, message_history=history)
            history = result.all_messages()
            outputs.append(result.output)
        await vak.settle(history)
        await vak.close()
        mapper = Mapper()
        names = [mapper.payload_of(e).activity for e in engine.ledger().entries("pyd-rules") if e.kind == "activity"]
    assert len(calls) == len(prompts)  # one model call a run: the engine asked for none more
    return vak.results, outputs, names


@pytest.mark.parametrize("rules", [None, "enforce"])
async def test_three_ok_runs_complete(tmp_path: Path, rules: str | None) -> None:
    results, outputs, names = await runs(tmp_path, PROMPTS, "OK.", **({"rules": rules} if rules else {}))
    assert [(r.outcome, r.answer) for r in results] == [("completed", "OK.")] * 3
    assert outputs == ["OK."] * 3
    assert "turn.cancelled" not in names and not any(n.startswith("rule.") for n in names)


async def test_a_finished_run_is_never_cancelled_by_a_rule(tmp_path: Path) -> None:
    answer = "Copper is at 9,400 dollars."
    results, outputs, names = await runs(tmp_path, ["What is the copper price today?"], answer, rules="enforce")
    assert [(r.outcome, r.answer) for r in results] == [("completed", answer)] and outputs == [answer]
    assert "turn.accepted" in names and "turn.cancelled" not in names
    # By default the rule only records what it would have done: the turn ends on the framework's answer.
    results, _, names = await runs(tmp_path / "default", ["What is the copper price today?"], answer)
    assert [(r.outcome, r.answer) for r in results] == [("completed", answer)]
    assert "rule.observed" in names and "turn.accepted" not in names
