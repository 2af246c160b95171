"""Streaming chat completions (``"stream": true``) for the OpenAI-compatible shape, llama.cpp's included.

``StreamAssembler`` is pure: fed the ``data:`` payloads of a server-sent-event stream in order, it
collects the text deltas, the tool-call deltas (by index: id and name once, arguments in pieces), the
finish reason, the usage of the last chunk (``stream_options.include_usage``) and llama.cpp's
``timings``, and gives back the body a non-streamed reply would have had, so the adapter's own
``parse`` reads it: a streamed step leaves the same receipt as a plain one.

``ShownText`` decides what of the text may be shown while it streams: the text so far with the API key
scrubbed in every form the redactor covers, up to the last whitespace. A key has no whitespace, nor has
any form of it the redactor covers (escapes, base64, hex), so a key arriving split over several deltas
sits whole in the held-back last word before any of it is shown. The rest is shown when the stream ends.
"""

from __future__ import annotations

import json
import re
from typing import Any

from vak_context.errors import ProviderRequestError
from vak_context.providers.redaction import Redactor

_LAST_SPACE = re.compile(r"\s(?=\S*\Z)")


class StreamAssembler:
    """The chunks of one streamed completion, assembled into a chat.completion body."""

    def __init__(self, provider: str) -> None:
        self.provider = provider
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish: str | None = None
        self.usage: dict[str, Any] = {}
        self.timings: dict[str, Any] = {}
        self.model = ""
        self.done = False

    def feed(self, data: str) -> str:
        """One event's ``data`` payload; returns the text it added (may be empty)."""
        if data.strip() == "[DONE]":
            self.done = True
            return ""
        try:
            chunk = json.loads(data)
        except RecursionError:
            raise ProviderRequestError(
                f"{self.provider}: a streamed chunk is JSON nested too deep to decode; check that the server "
                "speaks OpenAI-compatible streaming, or send the request without streaming.",
                provider=self.provider,
            ) from None
        except json.JSONDecodeError as exc:
            raise ProviderRequestError(
                f"{self.provider}: a streamed chunk is not JSON ({exc.msg} at {exc.pos}); check that the server "
                "speaks OpenAI-compatible streaming, or send the request without streaming.",
                provider=self.provider,
            ) from None
        if not isinstance(chunk, dict):
            return ""
        if isinstance(chunk.get("error"), dict):
            message = str(chunk["error"].get("message", chunk["error"]))[:300]
            raise ProviderRequestError(f"{self.provider}: the stream ended with an error: {message}. "
                                       "Retry the turn, or send it without streaming.", provider=self.provider)
        self.model = str(chunk.get("model") or self.model)
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        if isinstance(chunk.get("timings"), dict):
            self.timings = chunk["timings"]
        added = ""
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict):
                continue
            self.finish = choice.get("finish_reason") or self.finish
            delta = choice.get("delta") or {}
            if not isinstance(delta, dict):
                continue
            content = delta.get("content")
            if isinstance(content, str) and content:
                self.text.append(content)
                added += content
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if isinstance(reasoning, str):
                self.reasoning.append(reasoning)
            for call in delta.get("tool_calls") or []:
                self._call(call)
        return added

    def _call(self, call: Any) -> None:
        if not isinstance(call, dict):
            return
        index = call.get("index")
        slot = self.calls.setdefault(index if isinstance(index, int) else len(self.calls),
                                     {"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
        if call.get("id"):
            slot["id"] = call["id"]
        fn = call.get("function") or {}
        if isinstance(fn, dict):
            if fn.get("name"):
                slot["function"]["name"] += str(fn["name"])
            if isinstance(fn.get("arguments"), str):
                slot["function"]["arguments"] += fn["arguments"]

    def body(self) -> dict[str, Any]:
        """What the same reply would have been without streaming."""
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.text) or None}
        if self.reasoning:
            message["reasoning_content"] = "".join(self.reasoning)
        if self.calls:
            message["tool_calls"] = [self.calls[i] for i in sorted(self.calls)]
        out: dict[str, Any] = {"object": "chat.completion", "model": self.model,
                               "choices": [{"index": 0, "message": message, "finish_reason": self.finish}],
                               "usage": self.usage}
        if self.timings:
            out["timings"] = self.timings
        return out


class ShownText:
    """How much of the streamed text is safe to show yet (see the module docstring)."""

    def __init__(self, redactor: Redactor) -> None:
        self.redactor = redactor
        self.received = ""
        self.shown = 0

    def add(self, delta: str) -> str:
        """The newly safe text after ``delta`` arrived."""
        self.received += delta
        if not self.redactor.active:
            out, self.shown = self.received[self.shown:], len(self.received)
            return out
        scrubbed = self.redactor.text(self.received)
        space = _LAST_SPACE.search(scrubbed)
        safe = scrubbed[: space.end()] if space else ""
        out = safe[self.shown:]
        self.shown = max(self.shown, len(safe))
        return out

    def finish(self) -> str:
        """The rest, scrubbed, once the stream has ended."""
        final = self.redactor.text(self.received)
        out, self.shown = final[self.shown:], len(final)
        return out
