"""Helpers for the tool tests: a scripted OpenAI-compatible model (httpx.MockTransport answering with
llama.cpp's documented /v1/chat/completions bodies) and a real TurnLoop over in-process services."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from vak_context.actors.local_services import InProcessServices
from vak_context.agent.loop import TurnConfig, TurnLoop, TurnReport
from vak_context.agent.tools import ToolRegistry, surface_for
from vak_context.context.capacity.profile import CapacityProfile, Ewma, Horizon, ProfileKey
from vak_context.context.request.assemble import system_prompt
from vak_context.context.request.surface import Surface
from vak_context.events.envelope import Mapper
from vak_context.providers.base import RetryPolicy
from vak_context.providers.openai_compat import OpenAICompatProvider
from vak_context.storage.ledger import LedgerStore

PROFILE = CapacityProfile(ProfileKey("openai-compat", "scripted"), 32_768, Horizon(16_000, 0.9, 0.0), Ewma(0.25, 3), 256)


def completion(text: str = "", calls: list[tuple[str, dict[str, Any]]] | None = None) -> dict[str, Any]:
    """A llama.cpp chat completion body (OpenAI shape, llama.cpp's usage and timings)."""
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = [
            {"id": f"c{i}-{name}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
            for i, (name, args) in enumerate(calls)]
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "scripted",
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 12, "total_tokens": 112,
                      "prompt_tokens_details": {"cached_tokens": 0}},
            "timings": {"prompt_n": 100, "prompt_ms": 50.0, "cache_n": 0}}


class Scripted:
    """Answers each chat call with the next scripted body; keeps every request body it got."""

    def __init__(self, replies: list[dict[str, Any]]) -> None:
        self.replies, self.bodies = replies, []  # type: list[dict[str, Any]], list[dict[str, Any]]

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(json.loads(request.content))
        return httpx.Response(200, json=self.replies[len(self.bodies) - 1])


def loop_for(store: LedgerStore, script: Scripted, registry: ToolRegistry, surface: Surface | None = None) -> TurnLoop:
    client = httpx.AsyncClient(transport=httpx.MockTransport(script.handle))
    provider = OpenAICompatProvider(client, base_url="http://127.0.0.1:9/v1", retry=RetryPolicy(attempts=1))
    surface = surface or surface_for(registry)
    config = TurnConfig(model="scripted", provider="openai-compat", system=system_prompt(surface.catalogue()),
                        surface=surface, max_steps=6, max_tokens=128)
    return TurnLoop(InProcessServices(store, "s1"), provider, PROFILE, config, tools=registry,
                    clock=lambda: 1_764_504_000.0)


async def run_turn(tmp_path: Path, registry: ToolRegistry, replies: list[dict[str, Any]], directive: str = "go",
                   ) -> tuple[TurnReport, dict[str, list[Any]], Scripted]:
    """One turn; returns its report, the session's payloads by kind, and the script (its request bodies)."""
    script = Scripted(replies)
    with LedgerStore(tmp_path / "ledger") as store:
        report = await loop_for(store, script, registry).run(directive)
        mapper, kinds = Mapper(), {}  # type: Mapper, dict[str, list[Any]]
        for entry in store.entries("s1"):
            kinds.setdefault(entry.kind, []).append(mapper.payload_of(entry))
    return report, kinds, script
