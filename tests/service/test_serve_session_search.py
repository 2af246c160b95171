"""``vak serve`` answers ``session_search`` itself: a scripted OpenAI-compatible upstream calls it in the
second turn of a conversation the official ``openai`` client holds, and gets the hit in the first turn's
client-run tool result with the recall call for its lines; the client sees only its own tool's call and
the answer, and the search's result is stored in the session's ledger like any tool result."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import openai

from tests.fakes.httpserver import serve
from tests.fakes.vak_server import CLIENT_KEY, running
from vak_context.agent.tools.sessionsearch import recall_calls
from vak_context.engine.api import Engine
from vak_context.events.envelope import Mapper

LOG = "".join(f"row {i} filler words here\n" for i in range(1, 201)).replace("row 120 ", "row 120 quokka ")
TOOLS = [{"type": "function", "function": {"name": "fetch_log", "description": "Fetch a service's log.",
                                           "parameters": {"type": "object", "properties": {
                                               "name": {"type": "string"}}, "required": ["name"]}}}]


class Upstream:
    """Turn 1: calls the client's fetch_log, then answers; turn 2: calls session_search, then answers
    with what it found. Keeps what the search returned."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.found = ""

    def handle(self, request: httpx.Request) -> httpx.Response:
        if not request.url.path.endswith("/chat/completions"):
            return httpx.Response(404, json={"error": "no tokenizer here"})
        body = json.loads(request.content)
        self.bodies.append(body)
        last = body["messages"][-1]
        message: dict[str, Any] = {"role": "assistant", "content": None}
        if last["role"] == "tool" and str(last["content"]).startswith("session_search"):
            self.found = str(last["content"])
            message["content"] = "Row 120 names the quokka."
        elif last["role"] == "tool":
            message["content"] = "The log is long."
        else:
            asked = json.dumps(last)
            name, args = (("session_search", {"query": "quokka"}) if "animal" in asked
                          else ("fetch_log", {"name": "billing"}))
            message["tool_calls"] = [{"id": f"call_{len(self.bodies)}", "type": "function",
                                      "function": {"name": name, "arguments": json.dumps(args)}}]
        return httpx.Response(200, json={
            "id": "c", "object": "chat.completion", "created": 0, "model": "scripted",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 5, "total_tokens": 105}})


def test_vak_serve_answers_session_search_and_the_client_never_sees_it(tmp_path: Path) -> None:
    upstream = Upstream()
    seen: list[str] = []
    with serve(upstream.handle) as up, running(tmp_path / "ledger", "openai-compat:scripted", up.base_url,
                                                 window=8_000) as server:
        with openai.OpenAI(base_url=server.base_url, api_key=CLIENT_KEY, max_retries=0,
                           default_headers={"x-vak-session": "logs"}) as client:
            messages: list[Any] = [{"role": "user", "content": "Fetch the billing log."}]
            first = client.chat.completions.create(model="scripted", messages=messages, tools=TOOLS)  # type: ignore[arg-type]
            calls = first.choices[0].message.tool_calls or []
            seen += [c.function.name for c in calls]  # type: ignore[union-attr]
            messages.append(first.choices[0].message.model_dump(exclude_none=True))
            messages += [{"role": "tool", "tool_call_id": c.id, "content": LOG} for c in calls]
            second = client.chat.completions.create(model="scripted", messages=messages, tools=TOOLS)  # type: ignore[arg-type]
            messages.append({"role": "assistant", "content": second.choices[0].message.content})
            messages.append({"role": "user", "content": "Which row named the animal?"})
            third = client.chat.completions.create(model="scripted", messages=messages, tools=TOOLS)  # type: ignore[arg-type]
    assert seen == ["fetch_log"] and not third.choices[0].message.tool_calls
    assert third.choices[0].message.content == "Row 120 names the quokka."
    assert "session_search" in [t["function"]["name"] for t in upstream.bodies[0]["tools"]]
    assert upstream.found.startswith("session_search 'quokka': 1 hit(s) in this session")
    assert "lines 91-130 of evidence" in upstream.found and "row 120 quokka" in upstream.found
    [args] = recall_calls(upstream.found)
    assert args["range"] == [91, 130]
    with Engine.open(tmp_path / "ledger") as engine:
        ledger = engine.ledger()
        mapper = Mapper()
        results = [mapper.payload_of(e) for e in ledger.entries("logs") if e.kind == "tool_result"]
        body = ledger.get(next(r.evidence_id for r in results if r.tool_name == "fetch_log"))
    assert args["id"] == body.id[:12]
    assert [r.content for r in results if r.tool_name == "session_search"] == [upstream.found]
