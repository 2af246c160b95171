"""OpenAI chat-completions replies as the server-sent events of a streamed reply (``"stream": true``), as
llama.cpp and OpenAI write them: a role chunk, the text a word at a time, each tool call's id and name
then its arguments in two pieces, the finish reason, a last chunk with ``usage`` (``include_usage``) and
``[DONE]``. ``gate`` holds every chunk after the first text delta until the test sets it, so a test can
read the first delta while the upstream still holds the rest of its stream: no sleeps, no timing."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx


def _event(data: Any) -> bytes:
    return f"data: {json.dumps(data)}\n\n".encode()


def chunks(reply: dict[str, Any]) -> list[dict[str, Any]]:
    """The chunks of a chat.completion body, in order (the text split after each run of whitespace)."""
    base = {"id": reply.get("id", "chatcmpl-1"), "object": "chat.completion.chunk", "created": 1,
            "model": reply.get("model", "scripted")}
    choice = reply["choices"][0]
    message = choice["message"]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return base | {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    out = [chunk({"role": "assistant", "content": ""})]
    out += [chunk({"content": word}) for word in re.findall(r"\S+\s*|\s+", message.get("content") or "")]
    for i, call in enumerate(message.get("tool_calls") or ()):
        arguments = call["function"]["arguments"]
        half = len(arguments) // 2
        out.append(chunk({"tool_calls": [{"index": i, "id": call["id"], "type": "function",
                                          "function": {"name": call["function"]["name"], "arguments": ""}}]}))
        out += [chunk({"tool_calls": [{"index": i, "function": {"arguments": part}}]})
                for part in (arguments[:half], arguments[half:])]
    out.append(chunk({}, choice.get("finish_reason") or "stop"))
    out.append(base | {"choices": [], "usage": reply.get("usage") or {}})
    return out


def streamed(reply: dict[str, Any], gate: threading.Event | None = None,
             reached: threading.Event | None = None) -> httpx.Response:
    """``reply`` as an event stream. With ``gate``: the stream sets ``reached`` (when given) as it hands over
    the first text delta, then waits for ``gate`` before the rest."""

    def body() -> Iterator[bytes]:
        held = False
        for c in chunks(reply):
            text = any(ch.get("delta", {}).get("content") for ch in c.get("choices", ()))
            if gate is None or not text or held:
                yield _event(c)
                continue
            held = True
            # Set before the delta is handed over, so whoever receives it finds it set: set after, the
            # server could forward the delta before this generator is resumed to set it.
            if reached is not None:
                reached.set()
            yield _event(c)
            if not gate.wait(60):  # a bound, not a timing: a test that never sets it fails, not hangs
                raise RuntimeError("the test never released the upstream's stream")
        yield b"data: [DONE]\n\n"

    return httpx.Response(200, content=body(), headers={"content-type": "text/event-stream"})


class ScriptedStream:
    """A scripted OpenAI-compatible upstream that streams: the n-th turn request (a body with tools) gets
    ``replies[n]`` (chat.completion bodies, e.g. ``tests.fakes.scripted.completion``) as events, gated
    on ``gates[n]`` where one is given; other requests (packet summaries) a plain one-line summary, other
    paths 404; a callable in ``replies`` makes its own response. ``bodies`` are the turn requests as sent; ``reached[n]`` is set once reply n's first text
    delta went out."""

    def __init__(self, replies: list[dict[str, Any] | Callable[[dict[str, Any]], httpx.Response]],
                 gates: dict[int, threading.Event] | None = None) -> None:
        self.replies, self.gates = replies, gates or {}
        self.reached = {n: threading.Event() for n in self.gates}
        self.bodies: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def handle(self, request: httpx.Request) -> httpx.Response:
        if not request.url.path.endswith("/chat/completions"):
            return httpx.Response(404, json={"error": {"message": "not found", "type": "invalid_request_error"}})
        body = json.loads(request.content)
        if not body.get("tools"):
            from tests.fakes.scripted import completion

            return httpx.Response(200, json=completion("Earlier turns searched the notes."))
        with self._lock:
            n = len(self.bodies)
            self.bodies.append(body)
        if n >= len(self.replies):
            raise AssertionError(f"turn request {n + 1} is past the script ({len(self.replies)} replies)")
        reply = self.replies[n]
        if callable(reply):  # a reply of its own: an error status, a stream that breaks
            return reply(body)
        if not body.get("stream"):
            return httpx.Response(200, json=reply)
        return streamed(reply, self.gates.get(n), self.reached.get(n))


def broken_after_text(text: str) -> Callable[[dict[str, Any]], httpx.Response]:
    """A stream that sends ``text`` then an ``error`` chunk (as OpenAI and llama.cpp end a stream that fails)."""

    def reply(_body: dict[str, Any]) -> httpx.Response:
        events = [_event(c) for c in chunks({"choices": [{"message": {"content": text}}]})[:-2]]
        events.append(_event({"error": {"message": "the model crashed", "type": "server_error"}}))
        return httpx.Response(200, content=iter(events), headers={"content-type": "text/event-stream"})

    return reply


def status(code: int) -> Callable[[dict[str, Any]], httpx.Response]:
    """An error status before any event (a 429 as OpenAI words it, else a server error)."""
    error = ({"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"} if code == 429
             else {"message": "overloaded", "type": "server_error"})
    return lambda _body: httpx.Response(code, json={"error": error})
