"""A scripted OpenAI-compatible model for the stated-state tests (docs/STATE.md): it answers ``done``, calls
the engine's ``commitments`` tool with the text after ``RECORD:`` in the turn's last user words, calls the
embedder's ``lookup`` tool when they hold ``LOOKUP``, and answers ``noted`` once a tool result came back (each
answer numbered, so none repeats an earlier one). Every
chat-completions body is kept, so a test reads what each request carried. Serves ``httpx.MockTransport`` and
the loopback server alike (a handler of ``httpx.Request``)."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx

CONTRACT = re.compile(r"<work_contract>.*?</work_contract>", re.DOTALL)


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


class StatedModel:
    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        if not request.url.path.endswith("/chat/completions"):
            return httpx.Response(404, json={"error": {"message": "not here"}})
        body = json.loads(request.content)
        self.bodies.append(body)
        last = body["messages"][-1]
        call = None
        if last["role"] != "tool":
            words = _text(last).rsplit("</work_contract>", 1)[-1]
            if "RECORD:" in words:
                call = ("commitments", {"text": words.split("RECORD:", 1)[1].strip(), "category": "rule"})
            elif "LOOKUP" in words:
                call = ("lookup", {"query": "x"})
        # Each answer its own (a verbatim repeat of an earlier turn's answer is model drift to the rules).
        n = len(self.bodies)
        message: dict[str, Any] = {"role": "assistant", "content": None if call else (
            f"noted ({n})" if last["role"] == "tool" else f"done ({n})")}
        if call is not None:
            message["tool_calls"] = [{"id": f"call_{len(self.bodies)}", "type": "function",
                                      "function": {"name": call[0], "arguments": json.dumps(call[1])}}]
        prompt = len(json.dumps(body["messages"])) // 4
        return httpx.Response(200, json={
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1_764_504_000, "model": body["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if call else "stop"}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": 5, "total_tokens": prompt + 5}})

    def contracts(self) -> list[str]:
        """Each request's ``<work_contract>`` block ("" where it carried none), in order."""
        out = []
        for body in self.bodies:
            found = CONTRACT.findall("\n".join(_text(m) for m in body["messages"]))
            out.append(found[-1] if found else "")
        return out
