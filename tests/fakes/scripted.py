"""A scripted OpenAI-compatible model (llama.cpp's documented bodies) and what a turn-loop test builds around it.

``Scripted`` answers each chat call with the next scripted reply and keeps every request body it got;
its ``handle`` goes behind ``httpx.MockTransport`` in this process, or behind
``tests.fakes.httpserver.serve`` where the caller is a Ray actor. ``completion`` builds a
``/v1/chat/completions`` body, ``fence`` inline ```json calls as Qwen writes them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from vak_context.agent.workspace import TOOLS as WORKSPACE_TOOLS
from vak_context.agent.workspace import Workspace
from vak_context.context.capacity.profile import CapacityProfile, Ewma, Horizon, ProfileKey
from vak_context.context.evidence.digest import RECALL_TOOL
from vak_context.context.request.surface import Surface, ToolDecl
from vak_context.events.envelope import Mapper
from vak_context.storage.contract import Ledger

PROFILE = CapacityProfile(ProfileKey("openai-compat", "scripted"), 32_768, Horizon(16_000, 0.9, 0.0), Ewma(0.25, 3), 256)

Reply = Callable[[dict[str, Any], int], tuple[int, dict[str, Any]]]


def completion(text: str = "", calls: list[tuple[str, dict[str, Any]]] = (), *, prompt: int = 100,  # type: ignore[assignment]
               cached: int = 0) -> dict[str, Any]:
    """A llama.cpp /v1/chat/completions body (OpenAI shape, with llama.cpp's usage and timings)."""
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = [
            {"id": f"c{i}-{name}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
            for i, (name, args) in enumerate(calls)
        ]
    return {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "scripted",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": 12, "total_tokens": prompt + 12,
                  "prompt_tokens_details": {"cached_tokens": cached}},
        "timings": {"prompt_n": prompt - cached, "prompt_ms": 50.0, "cache_n": cached},
    }


class Scripted:
    """Answers each chat call with the next scripted reply; keeps every request body it got."""

    def __init__(self, replies: list[Reply]) -> None:
        self.replies, self.bodies = replies, []  # type: list[Reply], list[dict[str, Any]]

    def handle(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.bodies.append(body)
        status, out = self.replies[len(self.bodies) - 1](body, len(self.bodies) - 1)
        return httpx.Response(status, json=out)


def fixed(out: dict[str, Any]) -> Reply:
    return lambda _body, _n: (200, out)


def fence(*calls: tuple[str, dict[str, Any]]) -> str:
    """Inline ```json calls as Qwen writes them (their ids come from the turn, step and position)."""
    return "".join(f'```json\n{{"name": "{n}", "arguments": {json.dumps(a)}}}\n```\n' for n, a in calls)


def tool_surface(extra: list[ToolDecl] = ()) -> Surface:  # type: ignore[assignment]
    """The turn loop's core tools (recall and the workspace's), always loaded, plus ``extra``."""
    core = [ToolDecl(RECALL_TOOL, always_loaded=True)]
    core += [ToolDecl(t.spec, always_loaded=True, observes=t.observes) for t in WORKSPACE_TOOLS]
    return Surface.build([*core, *extra])


def notes_workspace(tmp_path: Path) -> Workspace:
    """A workspace with a three-line notes.txt and a 400-line big.log (a result too large for one step)."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "notes.txt").write_text("alpha\nbeta\ngamma\n")
    (root / "big.log").write_text("".join(f"line {i} " + "x" * 120 + "\n" for i in range(400)))
    return Workspace(root)


def payloads_of(ledger: Ledger, kind: str, session: str = "s1") -> list[Any]:
    """The payloads of one kind in a session, in order, as their models."""
    mapper = Mapper()
    return [mapper.payload_of(e) for e in ledger.entries(session) if e.kind == kind]
