"""``vak serve`` with a client that hands over many tools (BFCL's entries offer 28, ~5.7k tokens of schemas):
under ``defer_tools="auto"`` their schemas over a quarter of the model's horizon go behind ``find_tools``
(the catalogue in the system prompt names each one), a call to one by name still goes back to the client,
and ``"never"`` keeps them all in every upstream request. The official ``openai`` client; a loopback
upstream that records what it was sent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.fakes.httpserver import serve
from tests.fakes.vak_server import CLIENT_KEY, running

TOOLS = [{"type": "function", "function": {
    "name": f"tool_{i:02d}", "description": f"Tool number {i} of the client: it does task {i} on a record.",
    "parameters": {"type": "object", "properties": {
        f"field_{j}": {"type": "string", "description": f"the record's field {j}, as the user gave it"}
        for j in range(8)}, "required": ["field_0"]}}} for i in range(30)]


class Recorder:
    """An OpenAI-compatible upstream: it calls ``tool_07`` first, then answers once it has the result."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        if not request.url.path.endswith("/chat/completions"):
            return httpx.Response(404, json={"error": "no tokenizer here"})  # requests are sized by estimate
        body = json.loads(request.content)
        self.bodies.append(body)
        if any(m.get("role") == "tool" for m in body["messages"]):
            message: dict[str, Any] = {"role": "assistant", "content": "Task 7 is done."}
        else:
            message = {"role": "assistant", "content": None, "tool_calls": [{
                "id": f"call_{len(self.bodies)}", "type": "function",
                "function": {"name": "tool_07", "arguments": json.dumps({"field_0": "x"})}}]}
        return httpx.Response(200, json={
            "id": "c", "object": "chat.completion", "created": 0, "model": "scripted",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 5, "total_tokens": 105}})


def _conversation(server_url: str) -> tuple[list[str], str]:
    with openai.OpenAI(base_url=server_url, api_key=CLIENT_KEY, max_retries=0,
                       default_headers={"x-vak-session": "many-tools"}) as client:
        messages: list[Any] = [{"role": "user", "content": "Do task 7 on record x."}]
        first = client.chat.completions.create(model="scripted", messages=messages, tools=TOOLS)  # type: ignore[arg-type]
        calls = first.choices[0].message.tool_calls or []
        messages.append(first.choices[0].message.model_dump(exclude_none=True))
        messages += [{"role": "tool", "tool_call_id": c.id, "content": "record x: task 7 ran"} for c in calls]
        second = client.chat.completions.create(model="scripted", messages=messages, tools=TOOLS)  # type: ignore[arg-type]
    return [c.function.name for c in calls], second.choices[0].message.content or ""


@pytest.mark.parametrize("defer", ["auto", "never"])
def test_many_client_tools_go_behind_find_tools_unless_told_never(tmp_path: Path, defer: str) -> None:
    upstream = Recorder()
    with serve(upstream.handle) as up, running(tmp_path / "ledger", "openai-compat:scripted", up.base_url,
                                                 window=8_400, defer_tools=defer) as server:  # 30 schemas + the engine's tools
        called, answer = _conversation(server.base_url)
    assert called == ["tool_07"] and answer == "Task 7 is done."
    sent = [t["function"]["name"] for t in upstream.bodies[0]["tools"]]
    client_sent = [n for n in sent if n.startswith("tool_")]
    system = upstream.bodies[0]["messages"][0]["content"]
    if defer == "auto":
        assert client_sent == [] and "find_tools" in sent
        assert all(f"tool_{i:02d}" in system for i in range(30))  # the catalogue names every one
    else:
        assert client_sent == [f"tool_{i:02d}" for i in range(30)]
    assert [t["function"]["name"] for t in upstream.bodies[1]["tools"]] == sent  # the prefix stays
