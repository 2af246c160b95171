"""A scripted OpenAI-compatible model for the stated-state tests (docs/STATE.md): it answers ``done``, calls
the engine's ``commitments`` tool with the text after ``RECORD:`` in the turn's last user words, calls the
embedder's ``lookup`` tool when they hold ``LOOKUP``, and answers ``noted`` once a tool result came back (each
answer numbered, so none repeats an earlier one). Every
chat-completions body is kept, so a test reads what each request carried. Serves ``httpx.MockTransport`` and
the loopback server alike (a handler of ``httpx.Request``).

The model pass's side calls (``stated_pass="model"``: the system prompt is ``STATED_SYSTEM``) are answered
apart, with ``stated_answer`` (a function of the call's prompt, else the text as it is), or a 400 where
``stated_fails``; their prompts are kept in ``stated_prompts``, in ``order`` as ``"stated"`` between the
turn requests' ``"turn"``."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import httpx

from vak_context.agent.probe import SYSTEM as PROBE_SYSTEM
from vak_context.context.stated.model_pass import STATED_SYSTEM

CONTRACT = re.compile(r"<work_contract>.*?</work_contract>", re.DOTALL)


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


class StatedModel:
    def __init__(self, stated_answer: str | Callable[[str], str] = "[]", stated_fails: bool = False) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.stated_answer, self.stated_fails = stated_answer, stated_fails
        self.stated_prompts: list[str] = []
        self.order: list[str] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        if not request.url.path.endswith("/chat/completions"):
            return httpx.Response(404, json={"error": {"message": "not here"}})
        body = json.loads(request.content)
        if _text(body["messages"][0]).startswith(STATED_SYSTEM[:60]):
            return self._stated(body)
        if PROBE_SYSTEM[:40] in _text(body["messages"][0]):  # a ProbeActor's ladder (on Ray): refused, so the
            return httpx.Response(400, json={"error": {  # caller's window stands, whenever a probe finishes
                "message": "no probes here", "type": "invalid_request_error"}})
        self.order.append("turn")
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

    def _stated(self, body: dict[str, Any]) -> httpx.Response:
        prompt = _text(body["messages"][-1])
        self.stated_prompts.append(prompt)
        self.order.append("stated")
        if self.stated_fails:
            return httpx.Response(400, json={"error": {"message": "the side model is down", "type": "invalid_request_error"}})
        answer = self.stated_answer(prompt) if callable(self.stated_answer) else self.stated_answer
        return httpx.Response(200, json={
            "id": "chatcmpl-2", "object": "chat.completion", "created": 1_764_504_000, "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": len(prompt) // 4, "completion_tokens": len(answer) // 4,
                      "total_tokens": (len(prompt) + len(answer)) // 4}})

    def contracts(self) -> list[str]:
        """Each request's ``<work_contract>`` block ("" where it carried none), in order."""
        out = []
        for body in self.bodies:
            found = CONTRACT.findall("\n".join(_text(m) for m in body["messages"]))
            out.append(found[-1] if found else "")
        return out
