"""Packet summaries under ``vak serve``. A 40-turn OpenAI tool conversation (the client runs its own two
tools) through the server at a 6,000-token window, so older turns go to packets.

With summaries on, each summary is an upstream call made after the reply that closed a turn went out,
while the server still holds the session's lock: the ledger has every ``packet.summarise`` activity
between a turn's card and the next directive, each range summarised once, before the request that
carries it; no client request waited on the summariser on its own path.

``--summaries off``: packet summaries are upstream calls the client's upstream bills, so the operator can
turn them off: the upstream gets no summariser request, and every packet carries the engine's extract of
its turns (directive, outcome, evidence ids)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from tests.fakes.embedder import command_output, search_results
from tests.fakes.httpserver import serve
from tests.fakes.packet_session import PacketModel, directive, packet_figures, summary_timing
from tests.fakes.vak_server import CLIENT_KEY, running
from vak_context.events.envelope import Mapper
from vak_context.events.payloads import Activity
from vak_context.storage.ledger import LedgerStore

TOOLS = [
    {"type": "function", "function": {"name": "web_search", "description": "Search the web; 20 ranked results.",
                                      "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                                                     "required": ["query"]}}},
    {"type": "function", "function": {"name": "run_command", "description": "Run a shell command.",
                                      "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                                                     "required": ["command"]}}},
]


def _run_tool(call: dict[str, Any]) -> str:
    args = json.loads(call["function"]["arguments"])
    if call["function"]["name"] == "web_search":
        return json.dumps(search_results(args["query"]))
    return command_output(args["command"])


def _conversation(base_url: str, turns: int, session: str) -> None:
    messages: list[dict[str, Any]] = []
    with httpx.Client(base_url=base_url, headers={"authorization": f"Bearer {CLIENT_KEY}",
                                                  "x-vak-session": session}, timeout=60) as client:
        def ask() -> dict[str, Any]:
            r = client.post("/chat/completions", json={"model": "scripted", "messages": messages, "tools": TOOLS})
            assert r.status_code == 200, r.text
            message: dict[str, Any] = r.json()["choices"][0]["message"]
            messages.append({k: v for k, v in message.items() if v is not None})
            return message

        for turn in range(1, turns + 1):
            messages.append({"role": "user", "content": directive(turn)})
            reply = ask()
            for call in reply.get("tool_calls") or []:
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": _run_tool(call)})
            if reply.get("tool_calls"):
                ask()


def test_summaries_off_make_no_upstream_summary_call(tmp_path: Path) -> None:
    model = PacketModel(summaries="answer")
    with serve(model.handle) as upstream, running(tmp_path / "ledger", "openai-compat:scripted", upstream.base_url,
                                                  window=6_000, summaries="off") as server:
        _conversation(server.base_url, 40, "summaries-off")
    f = packet_figures(model)
    assert f.packets and f.extract == len(f.packets) and f.bare == 0
    assert model.summary_prompts == []  # no summariser request reached the upstream
    mapper = Mapper()
    with LedgerStore(tmp_path / "ledger", readonly=True) as store:
        details = [p.detail for s in store.sessions() for e in store.entries(s) if e.kind == "activity"
                   and (p := mapper.payload_of(e)).activity == "packet.summarise"]
    assert details and all(d["failed"] == "off" and d["calls"] == [] for d in details)


def test_summaries_are_written_after_the_reply_that_closed_a_turn(tmp_path: Path) -> None:
    model = PacketModel(summaries="answer")
    with serve(model.handle) as upstream, running(tmp_path / "ledger", "openai-compat:scripted", upstream.base_url,
                                                  window=6_000) as server:
        _conversation(server.base_url, 40, "summaries-on")
    f = packet_figures(model)
    assert f.packets and f.model_summary >= 0.9 * len(f.packets) and f.bare == 0 and f.extract == 0
    ahead, on_path, carried = summary_timing(tmp_path / "ledger", "summaries-on")
    assert ahead and on_path == [], (ahead, on_path)  # no client request waited on the summariser
    assert sorted(f"{a}-{b}" for a, b in ahead) == sorted(set(f.ranges))  # one upstream call per range
    assert len(model.summary_prompts) == len(ahead) and set(carried.values()) == {"before"}
    # Each after the reply that closed its turn: the request's history note (written as the reply goes out)
    # comes right before the summary's activity, and marks the turn closed.
    mapper = Mapper()
    with LedgerStore(tmp_path / "ledger", readonly=True) as store:
        payloads = [mapper.payload_of(e) for e in store.entries("summaries-on")]
    before = [payloads[i - 1] for i, p in enumerate(payloads)
              if isinstance(p, Activity) and p.activity == "packet.summarise"]
    assert len(before) == len(ahead) and all(isinstance(p, Activity) and p.activity == "serve.history"
                                             and p.detail["closed"] for p in before), before
    print(f"\nvak serve, window 6000: {f.model_summary} of {len(f.packets)} packet-bearing requests carry a model "
          f"summary; {len(model.summary_prompts)} summariser calls for {len(set(f.ranges))} ranges")
