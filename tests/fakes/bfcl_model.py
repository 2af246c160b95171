"""A "perfect" OpenAI-compatible model for BFCL multi-turn entries: each turn's first step calls the entry's
ground truth for that turn (all its calls in one step), and the step after the results answers in text.

Stateless, so the same model serves the direct mode (the whole history as BFCL's handler sends it) and
the engine's projections (cards, packets, a tail): the turn is the one whose user text occurs last in the
request's user messages, and it has been answered when a tool result follows that message. ``corrupt``
spoils one entry's first turn: ``"argument"`` changes the first call's first value (BFCL reports
``multi_turn:execution_response_mismatch`` or a state mismatch), ``"drop"`` leaves out its last call
(``multi_turn:instance_state_mismatch``), ``"inject"`` calls a name that is code, which must be refused."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

import httpx

from vak_context.farm.bfcl.multiturn import Entry, ground_truth_call

INJECTED = "__import__('os').getpid"


def _text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content or "")


class PerfectModel:
    def __init__(self, entries: Iterable[Entry], corrupt: Mapping[str, str] | None = None) -> None:
        self.script: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        for entry in entries:
            for index, truth in enumerate(entry.ground_truth):
                calls = [ground_truth_call(c, entry) for c in truth]
                if index == 0 and (how := (corrupt or {}).get(entry.id)):
                    calls = _corrupted(calls, how)
                key = _text(entry.turns[index][-1]) if entry.turns[index] else ""
                if key and self.script.setdefault(key, calls) != calls:
                    raise AssertionError(f"two turns share the text {key[:60]!r} with different ground truths")
        self.requests: list[dict[str, Any]] = []
        self.summaries = 0

    def handle(self, request: httpx.Request) -> httpx.Response:
        if not request.url.path.endswith("/chat/completions"):
            return httpx.Response(404, json={"error": {"message": "not found", "type": "invalid_request_error"}})
        body = json.loads(request.content)
        if not body.get("tools"):  # a packet summary the engine asks for
            self.summaries += 1
            return httpx.Response(200, json=completion(body, text="Earlier turns ran the file and API calls."))
        self.requests.append(body)
        messages = body["messages"]
        at, key, calls = self._turn(messages)
        if at < 0:
            return httpx.Response(200, json=completion(body, text="I cannot tell which request this is."))
        answered = any(m.get("role") == "tool" for m in messages[at + 1:])
        if answered or not calls:
            # each turn's answer its own (an answer repeating an earlier turn's is steered by the engine)
            return httpx.Response(200, json=completion(body, text=f"Done: {key[:120]}"))
        return httpx.Response(200, json=completion(body, calls=calls, turn=len(self.requests)))

    def _turn(self, messages: list[dict[str, Any]]) -> tuple[int, str, list[tuple[str, dict[str, Any]]]]:
        """(the index of the user message of the current turn, its text, its ground truth), or (-1, "", [])."""
        for at in range(len(messages) - 1, -1, -1):
            if messages[at].get("role") != "user":
                continue
            text = _text(messages[at])
            found = [(text.rfind(key), key) for key in self.script if key in text]
            if found:
                key = max(found)[1]
                return at, key, self.script[key]
        return -1, "", []


def _corrupted(calls: list[tuple[str, dict[str, Any]]], how: str) -> list[tuple[str, dict[str, Any]]]:
    if how == "drop":
        return calls[:-1]
    if how == "inject":
        return [(INJECTED, {}), *calls]
    name, args = calls[0]
    first = next(iter(args))
    return [(name, {**args, first: f"{args[first]}_wrong"}), *calls[1:]]


def completion(body: dict[str, Any], *, text: str = "", calls: list[tuple[str, dict[str, Any]]] | None = None,
               turn: int = 0) -> dict[str, Any]:
    """OpenAI's chat.completion object; usage sized from the messages and tools (about 4 characters a token)."""
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = [{"id": f"call_{turn}_{i}", "type": "function",
                                  "function": {"name": name, "arguments": json.dumps(args)}}
                                 for i, (name, args) in enumerate(calls)]
    prompt = math.ceil(len(json.dumps(body["messages"]) + json.dumps(body.get("tools", []))) / 4)
    return {"id": "chatcmpl-bfcl", "object": "chat.completion", "created": 1_764_504_000, "model": body["model"],
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": 20, "total_tokens": prompt + 20,
                      "prompt_tokens_details": {"cached_tokens": 0}}}
