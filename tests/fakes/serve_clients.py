"""The official ``openai`` and ``anthropic`` clients holding a conversation with tool calls against ``vak
serve``, plain or streaming: each keeps its history as its protocol does, runs the calls it gets with the
embedder fakes' tools, and records every call it saw and every reply's usage."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anthropic
import httpx
import openai

from tests.fakes.embedder import command_output, search_results

SCHEMAS = {
    "web_search": ("Search the notes; returns the matching notes, best first.",
                   {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}),
    "run_command": ("Run a shell command; returns its output.",
                    {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}),
}
SYSTEM = "You are the support team's assistant."


def run_tool(name: str, arguments: Mapping[str, Any]) -> str:
    if name == "web_search":
        return json.dumps(search_results(str(arguments["query"])), ensure_ascii=False)
    if name == "run_command":
        return command_output(str(arguments["command"]))
    raise AssertionError(f"the client was handed a call of {name!r}, which is not its tool")


@dataclass
class Client:
    protocol: str  # openai or anthropic
    base_url: str  # the server's /v1
    api_key: str
    stream: bool = False
    session: str | None = None  # sent as x-vak-session
    messages: list[dict[str, Any]] = field(default_factory=list)
    seen: list[str] = field(default_factory=list)  # every call name the client was handed
    usage: list[tuple[int, int]] = field(default_factory=list)  # (prompt, completion) per reply
    on_response: Callable[[httpx.Response], None] | None = None  # called with each HTTP response (its headers)
    keep_alive: bool = False  # reuse connections, as a client left alone does (then close() it)

    def __post_init__(self) -> None:
        headers = {"x-vak-session": self.session} if self.session else None
        # No keep-alive: the tests never close their clients, and a pooled idle connection would otherwise be
        # closed by the garbage collector whenever it runs (an unclosed-socket ResourceWarning, an error under
        # filterwarnings=error, in whichever test or teardown the collection happens to fall).
        limits = httpx.Limits(max_keepalive_connections=None if self.keep_alive else 0)
        hooks = {"response": [self.on_response]} if self.on_response is not None else {}
        if self.protocol == "openai":
            self._openai = openai.OpenAI(base_url=self.base_url, api_key=self.api_key, max_retries=0,
                                         default_headers=headers,
                                         http_client=openai.DefaultHttpxClient(limits=limits, event_hooks=hooks))
        else:
            self._anthropic = anthropic.Anthropic(base_url=self.base_url.removesuffix("/v1"), api_key=self.api_key,
                                                  max_retries=0, default_headers=headers,
                                                  http_client=anthropic.DefaultHttpxClient(limits=limits, event_hooks=hooks))

    def close(self) -> None:
        (self._openai if self.protocol == "openai" else self._anthropic).close()

    def turn(self, text: str) -> str:
        """One user message, then requests until the server answers (running the calls it hands back)."""
        self.messages.append({"role": "user", "content": text})
        return self.resume()

    def resume(self) -> str:
        while True:
            answer, calls = self.send()
            if not calls:
                return answer
            self.give_results(calls)

    def give_results(self, calls: list[tuple[str, str, dict[str, Any]]]) -> None:
        if self.protocol == "openai":
            self.messages += [{"role": "tool", "tool_call_id": i, "content": run_tool(n, a)} for i, n, a in calls]
        else:
            self.messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": i, "content": run_tool(n, a)} for i, n, a in calls]})

    def send(self) -> tuple[str, list[tuple[str, str, dict[str, Any]]]]:
        """One request: (the answer's text, the calls it made), the reply appended to the history."""
        text, calls = self._openai_send() if self.protocol == "openai" else self._anthropic_send()
        self.seen += [n for _, n, _ in calls]
        return text, calls

    def _openai_send(self) -> tuple[str, list[tuple[str, str, dict[str, Any]]]]:
        tools: Any = [{"type": "function", "function": {"name": n, "description": d, "parameters": s}}
                      for n, (d, s) in SCHEMAS.items()]
        messages: Any = [{"role": "system", "content": SYSTEM}, *self.messages]
        if self.stream:
            text = ""
            parts: dict[int, dict[str, str]] = {}
            for chunk in self._openai.chat.completions.create(model="scripted", messages=messages, tools=tools,
                                                              stream=True, stream_options={"include_usage": True}):
                if chunk.usage is not None:
                    self.usage.append((chunk.usage.prompt_tokens, chunk.usage.completion_tokens))
                for choice in chunk.choices:
                    text += choice.delta.content or ""
                    for d in choice.delta.tool_calls or ():
                        part = parts.setdefault(d.index, {"id": "", "name": "", "arguments": ""})
                        part["id"] += d.id or ""
                        part["name"] += d.function.name or "" if d.function else ""
                        part["arguments"] += d.function.arguments or "" if d.function else ""
            calls = [(p["id"], p["name"], json.loads(p["arguments"] or "{}")) for _, p in sorted(parts.items())]
        else:
            reply = self._openai.chat.completions.create(model="scripted", messages=messages, tools=tools)
            assert reply.usage is not None
            self.usage.append((reply.usage.prompt_tokens, reply.usage.completion_tokens))
            message = reply.choices[0].message
            text = message.content or ""
            calls = [(c.id, c.function.name, json.loads(c.function.arguments))
                     for c in message.tool_calls or () if c.type == "function"]
        entry: dict[str, Any] = {"role": "assistant", "content": text or None}
        if calls:
            entry["tool_calls"] = [{"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
                                   for i, n, a in calls]
        self.messages.append(entry)
        return text, calls

    def _anthropic_send(self) -> tuple[str, list[tuple[str, str, dict[str, Any]]]]:
        tools: Any = [{"name": n, "description": d, "input_schema": s} for n, (d, s) in SCHEMAS.items()]
        messages: Any = self.messages
        if self.stream:
            with self._anthropic.messages.stream(model="scripted", max_tokens=512, system=SYSTEM, messages=messages,
                                                 tools=tools) as events:
                message: Any = events.get_final_message()
        else:
            message = self._anthropic.messages.create(model="scripted", max_tokens=512, system=SYSTEM,
                                                      messages=messages, tools=tools)
        u = message.usage
        self.usage.append(((u.input_tokens or 0) + (u.cache_read_input_tokens or 0), u.output_tokens))
        self.messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in message.content]})
        text = "".join(b.text for b in message.content if b.type == "text")
        calls = [(b.id, b.name, dict(b.input)) for b in message.content if b.type == "tool_use"]
        return text, calls
