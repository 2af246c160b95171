"""A scripted model on each wire format the caller's loop renders for (OpenAI chat completions, OpenAI
Responses, Anthropic Messages, Gemini generateContent), answering with the providers' documented reply
bodies and over-length errors (tests/fakes/provider_bodies).

The caller's loop hands it a rendered body directly (:meth:`WireModel.answer`); the engine's own side calls
(packet summaries, token counts) reach it through ``httpx.MockTransport`` (:meth:`WireModel.handle`), as
does the engine's loop. What the model does follows the directive: ``search Q``, ``run C`` (``search Q and
run C``: two calls in one step), ``find tools`` (find_tools), ``recall turn 1`` (recall of turn 1's search
result, by the evidence id the request shows), and ``long`` (one documented over-length 400 first); a
request whose last user text is one of the turn rules' nudges (they point at "the user's request above"
without quoting it) follows the turn's directive, as a model reads it above. A step after tool results answers ``Done: <the first result's first 40 characters>``. On OpenAI chat completions
a request with ``"stream": true`` is answered as server-sent events (tests/fakes/sse_upstream.py)."""

from __future__ import annotations

import json
import math
import re
import threading
from typing import Any

import httpx

from tests.fakes.embedder import CLOCK_QUERY
from tests.fakes.provider_bodies.wire import body as documented
from tests.fakes.sse_upstream import streamed
from vak_context.context.rules.drift import RULE_NOTE


def _tokens(body: dict[str, Any]) -> int:
    """The prompt's tokens, about 4 characters a token of the whole request (system, tools and conversation,
    as a provider counts and bills them; Gemini's count body wraps the request), so the profile's
    calibration and the count endpoints see one real ratio."""
    request = body.get("generateContentRequest", body)
    unbilled = ("max_tokens", "model", "stream", "stream_options")
    return math.ceil(len(json.dumps({k: v for k, v in request.items() if k not in unbilled})) / 4)


class Format:
    """One wire format: what the last message of a request is, and the documented reply bodies."""

    name: str
    path: str  # the chat path's ending

    def has_tools(self, body: dict[str, Any]) -> bool:
        return bool(body.get("tools"))

    def last(self, body: dict[str, Any]) -> tuple[str, list[tuple[str, bool | None]]]:
        """("tool", [(result text, is_error or None when the wire has no flag), ...]) or ("user", [(text, None)])."""
        raise NotImplementedError

    def reply(self, body: dict[str, Any], text: str, calls: list[tuple[str, str, dict[str, Any]]]) -> dict[str, Any]:
        raise NotImplementedError

    def overflow(self, prompt: int, limit: int) -> dict[str, Any]:
        raise NotImplementedError


class OpenAIChat(Format):
    name, path = "openai", "/chat/completions"

    def last(self, body: dict[str, Any]) -> tuple[str, list[tuple[str, bool | None]]]:
        messages = body["messages"]
        if messages[-1]["role"] == "tool":
            results: list[tuple[str, bool | None]] = []
            for m in reversed(messages):
                if m["role"] != "tool":
                    break
                results.insert(0, (_text(m.get("content")), None))
            return "tool", results
        content = messages[-1]["content"]
        return "user", [(content[-1]["text"] if isinstance(content, list) else content, None)]

    def reply(self, body: dict[str, Any], text: str, calls: list[tuple[str, str, dict[str, Any]]]) -> dict[str, Any]:
        reply = documented("openai_compat", "openai_chat_tool_call")
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if calls:
            message["tool_calls"] = [{"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
                                     for i, n, a in calls]
        prompt = _tokens(body)
        reply.update(model=body["model"], choices=[{"index": 0, "message": message, "logprobs": None,
                                                    "finish_reason": "tool_calls" if calls else "stop"}])
        reply["usage"].update(prompt_tokens=prompt, completion_tokens=20, total_tokens=prompt + 20)
        reply["usage"]["prompt_tokens_details"]["cached_tokens"] = 0
        return reply

    def overflow(self, prompt: int, limit: int) -> dict[str, Any]:
        error = documented("openai_compat", "openai_overflow")
        error["error"]["message"] = error["error"]["message"].replace("128000", str(limit)).replace("130541", str(prompt))
        return error


class Responses(Format):
    name, path = "openai-responses", "/responses"

    def last(self, body: dict[str, Any]) -> tuple[str, list[tuple[str, bool | None]]]:
        items = body["input"]
        if items[-1]["type"] == "function_call_output":
            results: list[tuple[str, bool | None]] = []
            for item in reversed(items):
                if item["type"] != "function_call_output":
                    break
                results.insert(0, (str(item["output"]), None))
            return "tool", results
        return "user", [(items[-1]["content"][-1]["text"], None)]

    def reply(self, body: dict[str, Any], text: str, calls: list[tuple[str, str, dict[str, Any]]]) -> dict[str, Any]:
        reply = documented("openai_responses", "response")
        output: list[dict[str, Any]] = []
        if text:
            output.append({"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
                           "content": [{"type": "output_text", "text": text, "annotations": []}]})
        output += [{"type": "function_call", "id": f"fc_{i}", "call_id": i, "name": n, "arguments": json.dumps(a),
                    "status": "completed"} for i, n, a in calls]
        prompt = _tokens(body)
        reply.update(model=body["model"], output=output)
        reply["usage"].update(input_tokens=prompt, output_tokens=20, total_tokens=prompt + 20)
        reply["usage"]["input_tokens_details"]["cached_tokens"] = 0
        reply["usage"]["output_tokens_details"]["reasoning_tokens"] = 0
        return reply

    def overflow(self, prompt: int, limit: int) -> dict[str, Any]:
        return documented("openai_responses", "overflow")  # OpenAI's Responses error names no sizes


class Anthropic(Format):
    name, path = "anthropic", "/messages"

    def last(self, body: dict[str, Any]) -> tuple[str, list[tuple[str, bool | None]]]:
        blocks = body["messages"][-1]["content"]
        results: list[tuple[str, bool | None]] = [(_text(b["content"]), bool(b.get("is_error"))) for b in blocks if b["type"] == "tool_result"]
        if blocks[-1]["type"] == "tool_result":  # (an earlier turn's dangling call can share the directive's message)
            return "tool", results
        return "user", [([b["text"] for b in blocks if b["type"] == "text"][-1], None)]

    def reply(self, body: dict[str, Any], text: str, calls: list[tuple[str, str, dict[str, Any]]]) -> dict[str, Any]:
        reply = documented("anthropic", "message")
        content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
        content += [{"type": "tool_use", "id": i, "name": n, "input": a} for i, n, a in calls]
        reply.update(model=body["model"], content=content, stop_reason="tool_use" if calls else "end_turn",
                     usage={"input_tokens": _tokens(body), "cache_creation_input_tokens": 0,
                            "cache_read_input_tokens": 0, "output_tokens": 20})
        return reply

    def overflow(self, prompt: int, limit: int) -> dict[str, Any]:
        error = documented("anthropic", "overflow")
        error["error"]["message"] = f"prompt is too long: {prompt} tokens > {limit} maximum"
        return error


class Gemini(Format):
    name, path = "gemini", ":generateContent"

    def has_tools(self, body: dict[str, Any]) -> bool:
        return bool(body.get("tools"))

    def last(self, body: dict[str, Any]) -> tuple[str, list[tuple[str, bool | None]]]:
        parts = body["contents"][-1]["parts"]
        results: list[tuple[str, bool | None]] = [(_text(next(iter(p["functionResponse"]["response"].values()))),
                    "error" in p["functionResponse"]["response"]) for p in parts if "functionResponse" in p]
        if "functionResponse" in parts[-1]:
            return "tool", results
        return "user", [([p["text"] for p in parts if "text" in p][-1], None)]

    def reply(self, body: dict[str, Any], text: str, calls: list[tuple[str, str, dict[str, Any]]]) -> dict[str, Any]:
        reply = documented("gemini", "generate")
        parts: list[dict[str, Any]] = [{"text": text}] if text else []
        parts += [{"functionCall": {"id": i, "name": n, "args": a}} for i, n, a in calls]
        prompt = _tokens(body)
        reply["candidates"][0]["content"]["parts"] = parts
        reply["usageMetadata"] = {"promptTokenCount": prompt, "candidatesTokenCount": 20,
                                  "totalTokenCount": prompt + 20}
        return reply

    def overflow(self, prompt: int, limit: int) -> dict[str, Any]:
        error = documented("gemini", "overflow")
        error["error"]["message"] = (f"The input token count ({prompt}) exceeds the maximum number of tokens "
                                     f"allowed ({limit}).")
        return error


FORMATS: dict[str, Format] = {f.name: f for f in (OpenAIChat(), Responses(), Anthropic(), Gemini())}


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


class WireModel:
    """The scripted model for one format; ``requests`` are the turn requests it answered (bodies as sent)."""

    def __init__(self, wire: Format) -> None:
        self.wire = wire
        self.requests: list[dict[str, Any]] = []
        self.sent: list[bytes] = []  # the bytes of each turn request that came through the transport
        self.summaries: list[dict[str, Any]] = []
        self.called: list[str] = []  # every call the model made, by tool name
        self.overflows = 0
        self.recalled: str | None = None
        self._calls = 0
        self._long: set[str] = set()
        self._directive = ""  # the last directive seen: what a rule's nudge refers to
        # Served over loopback (on Ray the actors call it from their processes) it answers in the server's
        # threads, beside the embedder's own calls: one answer at a time keeps the records in order.
        self._lock = threading.RLock()

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """(status, reply body) for one turn request (a body with tools) or a packet summary (none)."""
        with self._lock:
            return self._answer(body)

    def _answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if not self.wire.has_tools(body):
            self.summaries.append(body)
            return 200, self.wire.reply(body, "Earlier turns searched and ran commands.", [])
        self.requests.append(body)
        kind, last = self.wire.last(body)
        if kind == "tool":
            return 200, self.wire.reply(body, f"Done: {last[0][0][:40]}", [])
        directive = last[0][0]
        if RULE_NOTE.match(directive):
            directive = self._directive
        self._directive = directive
        if "long" in directive and directive not in self._long:
            self._long.add(directive)
            self.overflows += 1
            prompt = math.ceil(len(json.dumps(body)) / 4)  # the whole request, as the provider counts it
            return 400, self.wire.overflow(prompt, prompt - 64)
        return 200, self.wire.reply(body, "", [self._call(n, a) for n, a in self._plan(directive, body)])

    def _plan(self, directive: str, body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        if "find tools" in directive:
            return [("find_tools", {"query": "run a shell command"})]
        if "recall turn 1" in directive:
            return [("recall", {"id": self.find_turn1(body)})]
        calls: list[tuple[str, dict[str, Any]]] = []
        for part in directive.split(" and "):
            if "run " in part:
                calls.append(("run_command", {"command": part.rsplit("run ", 1)[1].strip()}))
            elif "search " in part:
                calls.append(("web_search", {"query": part.rsplit("search ", 1)[1].strip()}))
        return calls

    def _call(self, name: str, arguments: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
        self._calls += 1
        self.called.append(name)
        return f"call_{self._calls:04d}", name, arguments

    def find_turn1(self, body: dict[str, Any]) -> str:
        """The evidence id the request shows next to turn 1's query (in a packet, a card or a digest)."""
        for line in json.dumps(body).replace("\\n", "\n").splitlines():
            if CLOCK_QUERY in line and (m := re.search(r"evidence:([0-9a-f]{6,64})", line)):
                self.recalled = m.group(1)
                return self.recalled
        raise AssertionError("turn 1's evidence id is not in the request")

    def handle(self, request: httpx.Request) -> httpx.Response:
        """The transport: token counts (Anthropic's and Gemini's count endpoints) and chat requests."""
        path = request.url.path
        body = json.loads(request.content) if request.content else {}
        if path.endswith("/count_tokens"):
            return httpx.Response(200, json={"input_tokens": _tokens(body)})
        if path.endswith(":countTokens"):
            return httpx.Response(200, json={"totalTokens": _tokens(body)})
        if not path.endswith(self.wire.path):
            return httpx.Response(404, json={"error": {"message": "not found", "type": "invalid_request_error"}})
        with self._lock:
            if self.wire.has_tools(body):
                self.sent.append(request.content)
            status, reply = self.answer(body)
        if status == 200 and body.get("stream") and self.wire.name == "openai":
            return streamed(reply)  # as server-sent events, a word at a time
        return httpx.Response(status, json=reply)
