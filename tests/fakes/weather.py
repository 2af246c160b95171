"""Issue 33's weather question: a smolagents-style agent asks "What is the weather in Oslo today?" with its
own ``get_weather(city)`` tool, through ``vak serve`` in front of a scripted OpenAI-compatible upstream.

``WeatherUpstream`` speaks OpenAI's documented chat-completions body: with ``call_tool`` it calls the
client's ``get_weather`` and answers from the tool's result once a ``tool`` message holding it is in the
request it receives; without, it answers the question from nothing, then, when the request carries the
freshness rule's nudge, says it has no live data. Requests with no tools (the engine's packet summaries)
get a summary; any other path a 404 (the exact-count probe falls back). ``ask`` is the client: it posts the
conversation with its tool to ``vak serve``, runs each call it is handed, and returns the answer (or the
error response). ``ScriptedChat`` is the same shape for an embedder's session: each turn request answered
by a function of its body.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

QUESTION = "What is the weather in Oslo today?"
FORECAST = "Snow, -3 C"
ANSWER = "In Oslo today: Snow, -3 C."
UNOBSERVED = "It is snowing in Oslo."
NO_DATA = "I have no live data for Oslo."
GET_WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city today.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def get_weather(city: str) -> str:
    return FORECAST if city == "Oslo" else "unknown city"


def chat_completion(text: str = "", calls: list[tuple[str, str, dict[str, Any]]] | None = None) -> dict[str, Any]:
    """An OpenAI chat-completions body: ``text``, or the calls ``(id, name, arguments)``."""
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = [{"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
                                 for i, n, a in calls]
    return {"id": "chatcmpl-weather", "object": "chat.completion", "created": 1, "model": "scripted",
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": {"prompt_tokens": 120, "completion_tokens": 12, "total_tokens": 132}}


def content_text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return "" if content is None else str(content)


@dataclass
class ScriptedChat:
    """Each turn request (one that carries tools) answered by ``answer(body)``; kept in ``requests``."""

    answer: Callable[[dict[str, Any]], dict[str, Any]]
    requests: list[dict[str, Any]] = field(default_factory=list)
    summaries: int = 0

    def handle(self, request: httpx.Request) -> httpx.Response:
        if not request.url.path.endswith("/chat/completions"):
            return httpx.Response(404, json={"error": {"message": "not found", "type": "invalid_request_error"}})
        body = json.loads(request.content)
        if not body.get("tools"):
            self.summaries += 1
            return httpx.Response(200, json=chat_completion("Earlier turns, summarised."))
        self.requests.append(body)
        return httpx.Response(200, json=self.answer(body))


class WeatherUpstream(ScriptedChat):
    def __init__(self, *, call_tool: bool = True) -> None:
        super().__init__(self._weather)
        self.call_tool = call_tool

    def _weather(self, body: dict[str, Any]) -> dict[str, Any]:
        messages = body["messages"]
        results = [content_text(m) for m in messages if m.get("role") == "tool"]
        if any(FORECAST in r for r in results):
            return chat_completion(ANSWER)
        if self.call_tool and not results:
            return chat_completion(calls=[("call_weather_1", "get_weather", {"city": "Oslo"})])
        nudged = any("[freshness-check]" in content_text(m) for m in messages)
        return chat_completion(NO_DATA if nudged else UNOBSERVED)


@dataclass
class Asked:
    status: int
    answer: str = ""
    calls: int = 0  # get_weather calls the client ran
    error: dict[str, Any] = field(default_factory=dict)


def ask(base_url: str, key: str, *, session: str, headers: Mapping[str, str] | None = None,
        question: str = QUESTION) -> Asked:
    """The client's side: the question with its tool, each call it is handed run, until an answer."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": question}]
    sent = {"authorization": f"Bearer {key}", "x-vak-session": session, **(headers or {})}
    calls = 0
    with httpx.Client(timeout=60, limits=httpx.Limits(max_keepalive_connections=0)) as http:
        while True:
            reply = http.post(f"{base_url}/chat/completions", headers=sent,
                              json={"model": "scripted", "messages": messages, "tools": [GET_WEATHER]})
            if reply.status_code != 200:
                return Asked(reply.status_code, calls=calls, error=reply.json())
            message = reply.json()["choices"][0]["message"]
            messages.append({k: v for k, v in message.items() if k in ("role", "content", "tool_calls")})
            if not message.get("tool_calls"):
                return Asked(200, content_text(message), calls)
            for call in message["tool_calls"]:
                calls += 1
                result = get_weather(**json.loads(call["function"]["arguments"]))
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
