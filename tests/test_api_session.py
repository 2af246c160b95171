"""The public API end to end, through ``import vak_context`` names only: a 26-turn in-process session
with two tools of the embedder's own and a scripted OpenAI-compatible model (httpx.MockTransport
answering with OpenAI's documented chat-completions bodies, passed in through ``http_client=``).

The window is small, so older turns go to packets once the budget requires them: the engine writes their
summaries with the session's own model (no summariser wired here). At turn 26 the model recalls turn 1's
search result by the evidence id the request shows it and gets the body back byte for byte."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

import vak_context

CLOCK_QUERY = "query-001"  # turn 1's search: unique, so the scripted model can find its evidence id later


def search_results(query: str) -> list[dict[str, Any]]:
    """20 results, about 10k characters in all, deterministic per query."""
    return [{"rank": i, "title": f"{query} result {i}", "url": f"https://example.org/{query}/{i}",
             "snippet": f"{query} " + " ".join(f"w{i}x{j}" for j in range(60))} for i in range(1, 21)]


def command_output(command: str) -> str:
    lines = [f"{command}: line {n:02d} " + "." * 30 for n in range(1, 66)]
    return "\n".join([*lines, "exit code: 1"])  # 66 lines, the last one the exit code


def make_tools() -> tuple[list[Any], list[str]]:
    calls: list[str] = []

    def web_search(query: str) -> list[dict[str, Any]]:
        """Search the web; returns 20 ranked results.

        Args:
            query: what to search for
        """
        calls.append(f"search {query}")
        return search_results(query)

    def run_command(command: str) -> str:
        """Run a shell command; returns its output and exit code.

        Args:
            command: the command line
        """
        calls.append(f"run {command}")
        if command == "explode":
            raise RuntimeError("the sandbox refused the command")
        return command_output(command)

    return [web_search, run_command], calls


def completion(body: dict[str, Any], text: str = "", call: tuple[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """OpenAI's chat.completion object; usage sized from the request (about 4 characters a token), so the
    profile's calibration sees a real ratio."""
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if call is not None:
        message["tool_calls"] = [{"id": f"call_{abs(hash(json.dumps(call))) % 10**8}", "type": "function",
                                  "function": {"name": call[0], "arguments": json.dumps(call[1])}}]
    prompt = math.ceil(len(json.dumps(body["messages"])) / 4)
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 1_764_504_000, "model": body["model"],
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": "tool_calls" if call else "stop"}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": 20, "total_tokens": prompt + 20,
                      "prompt_tokens_details": {"cached_tokens": 0}}}


def text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


def directive_of(message: dict[str, Any]) -> str:
    """The directive's own words: the last text part of the turn's message (cards and the tail come first)."""
    content = message["content"]
    return content[-1]["text"] if isinstance(content, list) else content


class ScriptedModel:
    """The model's side of the session: each directive names what to do; a step after a tool result answers."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []  # turn requests (they carry tools)
        self.summaries: list[dict[str, Any]] = []  # the engine's packet summaries (no tools)
        self.recalled: str | None = None  # the evidence id the model recalled

    def handle(self, request: httpx.Request) -> httpx.Response:
        if not request.url.path.endswith("/chat/completions"):
            return httpx.Response(404, json={"error": {"message": "not found", "type": "invalid_request_error"}})
        body = json.loads(request.content)
        if not body.get("tools"):
            self.summaries.append(body)
            return httpx.Response(200, json=completion(body, "Earlier turns searched and ran commands."))
        self.requests.append(body)
        last = body["messages"][-1]
        if last["role"] == "tool":
            return httpx.Response(200, json=completion(body, f"Done: {text_of(last)[:40]}"))
        directive = directive_of(last)
        if "recall turn 1" in directive:
            return httpx.Response(200, json=completion(body, call=("recall", {"id": self.find_turn1(body)})))
        if "run " in directive:
            command = directive.rsplit("run ", 1)[1].strip()
            return httpx.Response(200, json=completion(body, call=("run_command", {"command": command})))
        query = directive.rsplit("search ", 1)[1].strip()
        return httpx.Response(200, json=completion(body, call=("web_search", {"query": query})))

    def find_turn1(self, body: dict[str, Any]) -> str:
        """The evidence id the request shows next to turn 1's query (in a packet, a card or a digest)."""
        for line in json.dumps(body["messages"]).replace("\\n", "\n").splitlines():
            if CLOCK_QUERY in line and (m := re.search(r"evidence:([0-9a-f]{6,64})", line)):
                self.recalled = m.group(1)
                return self.recalled
        raise AssertionError("turn 1's evidence id is not in the request")


EXPLODES, CALLER_RAISES, RECALLS = 14, 25, 26  # a tool that raises; the caller's on_step raises; the recall


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
