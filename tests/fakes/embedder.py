"""An embedder's side of a session, shared by the public-API tests and docs/EMBEDDING.md's example test:
two tools of the embedder's own (a web search with 20 JSON results, a command with 66 lines and an exit
code) and a scripted OpenAI-compatible model answering through ``httpx.MockTransport`` with OpenAI's
documented chat-completions bodies."""

from __future__ import annotations

import json
import math
import re
from typing import Any

import httpx

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


