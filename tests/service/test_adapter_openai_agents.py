"""The OpenAI Agents SDK adapter against the real SDK: an ``Agent`` with two tools of its own and the
engine's tools, its model ``OpenAIChatCompletionsModel`` over an ``AsyncOpenAI`` pointed at a loopback
scripted upstream (tests/fakes/httpserver.py; the SDK ships no test model), the adapter's input filter and
append-only session. Three runs: a search (about 10k characters), a command, then a ``recall`` of the first
run's result by the evidence id the projection shows: the upstream gets the body back byte for byte; the
ledger holds three completed turns; ``pop_item`` and ``clear_session`` are refused."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from agents import Agent, OpenAIChatCompletionsModel, RunConfig, Runner, function_tool
from openai import AsyncOpenAI

import vak_context
from tests.fakes.httpserver import serve
from vak_context.adapters.openai_agents import VakAgents

RESULTS = [{"title": f"result {i} for query-001", "body": f"{i:02d} " + "lorem ipsum dolor " * 28} for i in range(20)]
SEARCH_BODY = json.dumps(RESULTS)
KEY = "sk-test-adapter-0123456789abcdef"


@function_tool
def search(query: str) -> str:
    """Search the notes; returns the matching notes as JSON.

    Args:
        query: what to search for
    """
    return SEARCH_BODY if query == "query-001" else "[]"


@function_tool
def run_command(command: str) -> str:
    """Run a shell command; returns its output and exit code.

    Args:
        command: the command line
    """
    return f"$ {command}\nok\nexit code: 0"


class Upstream:
    """A chat-completions model: one tool call per directive, then an answer; keeps every request body."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.bodies.append(body)
        messages = body["messages"]
        users = [m["content"] for m in messages if m["role"] == "user" and isinstance(m["content"], str)]
        asked = users[-1].splitlines()[-1]
        if messages[-1]["role"] == "tool":
            return reply(body, content=f"Done: {asked}.")
        if "recall turn 1" in asked:
            text = json.dumps(messages)
            found = re.search(r"query-001.*?evidence:([0-9a-f]{6,64})", text)
            assert found, "turn 1's evidence id is not in the projection"
            return reply(body, call=("call-recall", "recall", {"id": found.group(1)}))
        if "make check" in asked:
            return reply(body, call=("call-cmd", "run_command", {"command": "make check"}))
        return reply(body, call=("call-search", "search", {"query": "query-001"}))


def reply(body: dict[str, Any], *, content: str | None = None,
          call: tuple[str, str, dict[str, Any]] | None = None) -> httpx.Response:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if call:
        message["tool_calls"] = [{"id": call[0], "type": "function",
                                  "function": {"name": call[1], "arguments": json.dumps(call[2])}}]
    return httpx.Response(200, json={
        "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": body["model"],
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if call else "stop"}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}})


async def test_three_runs_with_a_recall(tmp_path: Path) -> None:
    upstream = Upstream()
    directives = ["please search query-001", "please run make check", "recall turn 1's search result in full"]
    with serve(upstream.handle) as server, vak_context.Engine.open(tmp_path / "ledger") as engine:
        client = AsyncOpenAI(base_url=server.base_url, api_key=KEY)
        vak = VakAgents(engine, "agents-1", model="openai:scripted", api_key=KEY, window=32_000)
        agent = Agent(name="notes", instructions="Answer briefly.", tools=[search, run_command, *vak.tools()],
                      model=OpenAIChatCompletionsModel(model="scripted", openai_client=client))
        config = RunConfig(call_model_input_filter=vak.input_filter, tracing_disabled=True)
        for directive in directives:
            result = await Runner.run(agent, directive, session=vak.session, run_config=config)
            assert result.final_output == f"Done: {directive}."
        with pytest.raises(vak_context.AppendOnlyHistory, match="pop_item"):
            await vak.session.pop_item()
        with pytest.raises(vak_context.AppendOnlyHistory, match="clear_session"):
            await vak.session.clear_session()
        session = vak.vak_session
        assert session is not None
        cards = await session.cards_async()
        await vak.close()
        await client.close()

    assert [r.outcome for r in vak.results] == ["completed"] * 3
    assert [c.asked for c in cards] == directives
    assert len(upstream.bodies) == 6
    # Every request carries the engine's system prompt, not the agent's instructions.
    assert all("Answer briefly." not in json.dumps(b["messages"]) for b in upstream.bodies)
    assert all(b["messages"][0]["role"] == "system" for b in upstream.bodies)
    # Turn 1's result reaches run 3 only as a digest; after the recall, the body byte for byte.
    assert SEARCH_BODY not in json.dumps(upstream.bodies[4])
    recalled = [m for m in upstream.bodies[5]["messages"] if m.get("tool_call_id") == "call-recall"]
    assert len(recalled) == 1 and SEARCH_BODY in recalled[0]["content"]
