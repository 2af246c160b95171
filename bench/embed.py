"""The engine's own time per step, embedded, at 10, 100 and 1,000 closed turns, against the JSON floor.

A step is what the engine does around one model call: the next request (plan, project, size), the
reply (parse, receipt, profile update) and the tool result (run, window, digest, store). The model answers
instantly (an ``httpx.MockTransport`` handler; its own time is measured and taken out), so what is left is
the engine's work. Each session is a generated one (``vak_context.sessions.generator``, about 15 entries a
turn) continued through the public API (``vak_context.Engine``); each timed turn is two steps: the model
calls the embedder's tool, then answers. The first turn after binding is a warm-up (the view is built, the
packets the plan needs are written) and not timed.

The floor is serializing the same request to JSON: ``json.dumps`` of the body the model received. Goal: the
engine within 2x of the floor at 1,000 turns.

The Ray column (``--ray``): the same turns through ``RayServices`` (actors/turn_services.py: the
LedgerActor, AssemblerActor and EvidenceActor on a local Ray bound to 127.0.0.1) driven by the same
``TurnLoop``. The public API has no Ray option yet (``Engine.open`` is in-process only), so this column uses
RayServices directly. An actor cannot reach a MockTransport, so both runs of that comparison talk to a
loopback HTTP server (the in-process reference is run again on it): the added ms per step is Ray's minus
that. Goal: at most 5 ms added per step.

    .venv/bin/python bench/embed.py                 # 10, 100, 1,000 turns, in-process
    .venv/bin/python bench/embed.py --ray           # and the Ray column
    .venv/bin/python bench/embed.py --sizes 10 --turns 2   # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx

import vak_context
from vak_context.sessions.generator import generate_session
from vak_context.storage.ledger import LedgerStore

SIZES = (10, 100, 1_000)
SESSION = "bench"
MODEL = "openai-compat:scripted"
WINDOW = 32_000  # a mid-sized model: at 1,000 turns most of the history is cards and packets
INPROCESS_GOAL = 2.0  # x the JSON floor at 1,000 turns
RAY_GOAL_MS = 5.0  # added per step over in-process


def lookup(key: str) -> str:
    """Look ``key`` up in the team's notes.

    Args:
        key: what to look up
    """
    return json.dumps([{"key": key, "note": f"note {i} about {key}: " + "details " * 40} for i in range(5)])


@dataclass
class InstantModel:
    """An OpenAI-compatible model that answers at once: a turn's first step calls ``lookup``, the step after
    the result answers; a request without tools (a packet summary) gets a summary. Keeps each request body
    and the time its own handling took."""

    bodies: list[dict[str, Any]] = field(default_factory=list)
    handler_s: float = 0.0

    def handle(self, request: httpx.Request) -> httpx.Response:
        start = time.perf_counter()
        if not request.url.path.endswith("/chat/completions"):  # llama.cpp's /tokenize: not this server
            self.handler_s += time.perf_counter() - start
            return httpx.Response(404, json={"error": {"message": "not found"}})
        body = json.loads(request.content)
        # The usage a real server bills, about 4 chars a token: receipts calibrate the profile from it.
        prompt = len(request.content) // 4
        if not body.get("tools"):
            reply = _completion(prompt, "Earlier turns asked about the repository and quoted its files.")
        elif body["messages"][-1]["role"] == "tool":
            self.bodies.append(body)
            reply = _completion(prompt, "Done: the note says what was asked.")
        else:
            self.bodies.append(body)
            reply = _completion(prompt, "", {"key": f"k{len(self.bodies)}"})
        response = httpx.Response(200, json=reply)
        self.handler_s += time.perf_counter() - start
        return response


def _completion(prompt: int, text: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if args is not None:
        message["tool_calls"] = [{"id": "call_1", "type": "function",
                                  "function": {"name": "lookup", "arguments": json.dumps(args)}}]
    return {"id": "chatcmpl-bench", "object": "chat.completion", "model": "scripted",
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if args else "stop"}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": 10, "total_tokens": prompt + 10}}


@dataclass
class Row:
    turns: int
    steps: int
    engine_ms: float  # per step, the model's handling taken out
    floor_ms: float  # json.dumps of the same request bodies, per step
    ray_ms: float | None = None  # per step on Ray
    loopback_ms: float | None = None  # per step in-process over the same loopback server

    @property
    def ratio(self) -> float:
        return self.engine_ms / self.floor_ms

    @property
    def ray_added_ms(self) -> float | None:
        return None if self.ray_ms is None or self.loopback_ms is None else self.ray_ms - self.loopback_ms


def build_ledger(folder: Path, turns: int) -> None:
    """``turns`` closed turns of a generated session, appended to a new ledger."""
    with LedgerStore(folder) as store:
        generate_session(seed=turns, turns=turns, append=lambda p, b: store.append(SESSION, [p], blobs=[b])[0])


def floor_s(bodies: list[dict[str, Any]], repeat: int = 5) -> float:
    """The fastest of ``repeat`` runs of ``json.dumps`` over every body: the least any engine pays."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for body in bodies:
            json.dumps(body)
        best = min(best, time.perf_counter() - start)
    return best


async def in_process(folder: Path, timed_turns: int, model: InstantModel, base_url: str | None = None,
                     ) -> tuple[float, int, list[dict[str, Any]]]:
    """Seconds of engine work and steps over ``timed_turns`` turns through the public API, and the bodies:
    over ``model``'s MockTransport, or over the loopback server at ``base_url`` that serves it."""
    transport = httpx.MockTransport(model.handle) if base_url is None else None
    async with httpx.AsyncClient(transport=transport, trust_env=False) as client:
        with vak_context.Engine.open(folder) as engine:
            async with engine.session(SESSION, model=MODEL, http_client=client, tools=[lookup], window=WINDOW,
                                      max_steps=4, base_url=base_url or "http://127.0.0.1:9/v1") as session:
                await session.run("warm-up: look up k0")
                model.bodies.clear()
                model.handler_s, steps, elapsed = 0.0, 0, 0.0
                for i in range(timed_turns):
                    start = time.perf_counter()
                    result = await session.run(f"look up the note k{i}")
                    elapsed += time.perf_counter() - start
                    steps += len(result.steps)
    return elapsed - model.handler_s, steps, list(model.bodies)


@contextmanager
def loopback(model: InstantModel) -> Iterator[str]:
    """``model`` served on 127.0.0.1 (a free port) for the block; yields its /v1 base URL."""

    class Serve(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            request = httpx.Request("POST", f"http://127.0.0.1{self.path}", content=self.rfile.read(length))
            response = model.handle(request)
            data = response.read()
            self.send_response(response.status_code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Serve)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


async def on_ray(folder: Path, timed_turns: int, base_url: str, model: InstantModel) -> tuple[float, int]:
    """The same turns through RayServices and the TurnLoop (seconds of engine work, steps)."""
    from vak_context.actors.turn_services import RayServices
    from vak_context.agent.endpoint import ModelEndpoint
    from vak_context.agent.loop import TurnConfig, TurnLoop
    from vak_context.agent.tools import ToolRegistry, surface_for
    from vak_context.context.capacity.profile import ProfileKey, metadata_profile
    from vak_context.context.request.assemble import system_prompt
    from vak_context.context.request.messages import ModelContext
    from vak_context.providers.openai_compat import OpenAICompatProvider

    registry = ToolRegistry()
    registry.register(lookup)
    surface = surface_for(registry)
    ctx = ModelContext(provider="openai-compat", model="scripted", declared_window=WINDOW, source="bench")
    profile = metadata_profile(ProfileKey("openai-compat", "scripted"), ctx, now=time.time())
    config = TurnConfig(model="scripted", provider="openai-compat", system=system_prompt(surface.catalogue()),
                        surface=surface, max_steps=4, max_tokens=512, session_key=SESSION,
                        endpoint=ModelEndpoint(base_url=base_url, model="scripted", window_tokens=WINDOW))
    async with httpx.AsyncClient(trust_env=False) as client:
        provider = OpenAICompatProvider(client, base_url=base_url)
        loop = TurnLoop(RayServices(folder, SESSION), provider, profile, config, tools=registry)
        await loop.run("warm-up: look up k0")
        model.handler_s, steps, elapsed = 0.0, 0, 0.0
        for i in range(timed_turns):
            start = time.perf_counter()
            report = await loop.run(f"look up the note k{i}")
            elapsed += time.perf_counter() - start
            steps += len(report.steps)
    return elapsed - model.handler_s, steps


def measure(turns: int, timed_turns: int, ray: bool, root: Path) -> Row:
    folder = root / f"ledger-{turns}"
    build_ledger(folder, turns)
    seconds, steps, bodies = asyncio.run(in_process(folder, timed_turns, InstantModel()))
    row = Row(turns, steps, 1000 * seconds / steps, 1000 * floor_s(bodies) / len(bodies))
    if ray:
        model = InstantModel()
        with loopback(model) as base_url:
            seconds, steps, _ = asyncio.run(in_process(folder, timed_turns, model, base_url))
            row.loopback_ms = 1000 * seconds / steps
            seconds, steps = asyncio.run(on_ray(folder, timed_turns, base_url, model))
            row.ray_ms = 1000 * seconds / steps
    return row


def table(rows: list[Row]) -> str:
    lines = [f"{'turns':>6} {'steps':>5} {'engine ms/step':>14} {'JSON floor ms':>13} {'ratio':>6}"
             f" {'loopback ms':>11} {'Ray ms':>8} {'Ray added':>9}"]
    for r in rows:
        ray = (f" {r.loopback_ms:>11.2f} {r.ray_ms:>8.2f} {r.ray_added_ms:>9.2f}"
               if r.ray_ms is not None and r.loopback_ms is not None and r.ray_added_ms is not None else "")
        lines.append(f"{r.turns:>6} {r.steps:>5} {r.engine_ms:>14.2f} {r.floor_ms:>13.3f} {r.ratio:>5.1f}x{ray}")
    return "\n".join(lines)


def verdicts(rows: list[Row]) -> list[str]:
    """Each goal against the largest size measured (the goals are stated at 1,000 turns)."""
    top = max(rows, key=lambda r: r.turns)
    out = [f"in-process at {top.turns} turns: {top.ratio:.1f}x the JSON floor (goal <= {INPROCESS_GOAL:.0f}x): "
           f"{'met' if top.ratio <= INPROCESS_GOAL else 'not met'}"]
    if top.ray_added_ms is not None:
        out.append(f"Ray at {top.turns} turns: {top.ray_added_ms:+.2f} ms per step over in-process "
                   f"(goal <= {RAY_GOAL_MS:.0f} ms): {'met' if top.ray_added_ms <= RAY_GOAL_MS else 'not met'}")
    return out


def main(argv: list[str] | None = None, *, start_ray: Callable[[], Any] | None = None) -> list[Row]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="closed turns per session, comma-separated")
    parser.add_argument("--turns", type=int, default=5, help="timed turns per size (two steps each)")
    parser.add_argument("--ray", action="store_true", help="also the Ray column (starts a local Ray on 127.0.0.1)")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    if args.ray:
        if start_ray is None:
            from vak_context.engine.localray import start_local_ray as start_ray
        start_ray()
    with tempfile.TemporaryDirectory(prefix="vak-bench-embed-") as tmp:
        rows = [measure(n, args.turns, args.ray, Path(tmp)) for n in sizes]
    print(table(rows))
    lines = verdicts(rows)
    for line in lines:
        print(line)
    print("summary: " + "; ".join(lines))
    return rows


if __name__ == "__main__":
    main()
