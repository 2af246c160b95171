"""An OpenAI chat-completions upstream that plays a script: each turn request (a body with tools) gets the
next reply of the list, as the documented body (or its server-sent events when the request streams);
a request without tools (a packet summary) gets a fixed summary; any other path 404 (the token-count
probe falls back). It records every turn request's body, and can be made slow once: :meth:`hold` makes
the next turn request set ``arrived`` and wait for ``release`` before it is answered (a test sets it on
an event of its own: no sleeps).

Made for the shapes real agents give their histories (a reply dropped and asked again, replies rewritten
as text, retries), where what matters is which requests reach the upstream and what they carry."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from typing import Any

import httpx

from tests.fakes.sse_upstream import streamed


def text(content: str) -> dict[str, Any]:
    """A reply that answers in text."""
    return {"role": "assistant", "content": content}


def call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    """A reply that calls one tool."""
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}]}


class ScriptUpstream:
    def __init__(self, replies: Iterable[dict[str, Any]]) -> None:
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []  # the turn requests answered, bodies as sent
        self.arrived = threading.Event()
        self.release = threading.Event()
        self._held = False
        self._lock = threading.Lock()

    def hold(self) -> None:
        """The next turn request waits for ``release`` (``arrived`` is set when it comes)."""
        self._held = True

    def handle(self, request: httpx.Request) -> httpx.Response:
        if not request.url.path.endswith("/chat/completions"):
            return httpx.Response(404, json={"error": {"message": "not found", "type": "invalid_request_error"}})
        body = json.loads(request.content)
        if not body.get("tools"):
            message = text("Earlier turns: the task so far.")
        else:
            with self._lock:
                held, self._held = self._held, False
                if not self.replies:
                    raise AssertionError(f"the script has no reply left for turn request {len(self.requests) + 1}")
                self.requests.append(body)
                message = self.replies.pop(0)
            if held:
                self.arrived.set()
                if not self.release.wait(60):
                    raise AssertionError("the held request was never released")
        reply = {"id": "chatcmpl-script", "object": "chat.completion", "created": 1, "model": "scripted",
                 "choices": [{"index": 0, "message": message, "logprobs": None,
                              "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
                 "usage": {"prompt_tokens": len(request.content) // 4, "completion_tokens": 9,
                           "total_tokens": len(request.content) // 4 + 9}}
        if body.get("stream"):
            return streamed(reply)
        return httpx.Response(200, json=reply)
