"""The engine's own time per step, embedded, at 10, 100 and 1,000 closed turns, against the JSON floor.

A step is what the engine does around one model call: the next request (plan, project, size), the
reply (parse, receipt, profile update) and the tool result (run, window, digest, store). The model answers
instantly (an ``httpx.MockTransport`` handler; its own time is measured and taken out), so what is left is
the engine's work. Each session is a generated one (``vak_context.sessions.generator``, about 15 entries a
turn) continued through the public API (``vak_context.Engine``); each timed turn is two steps: the model
calls the embedder's tool, then answers. The first turn after binding is a warm-up (the view is built, the
packets the plan needs are written, and the search index of the whole session is built in the background
at its close, in this process or on Ray in the LedgerActor) and not timed: the timed turns start once that index is built and the warm-up's
garbage collected, so what they measure is a step of a session already running.

The goals (issue 37), each printed with its ratio to the goal, side by side: in-process engine time per step
at 1,000 turns at most 5 ms (``GOAL_MS``) and at most 1.5x its 10-turn figure (``GOAL_GROWTH``); at most one
durable commit per step (``GOAL_COMMITS``); on Ray at most 5 ms added per step. The floor is serializing the
same request to JSON (``json.dumps`` of the body the model received); its ratio is printed too.

Each column is the fastest of ``--repeat`` runs (default 3), as the floor is the fastest of its runs: every run
makes the same turns on its own copy of the built ledger (the same entries, packets and plans), so what varies
between runs is only the machine (another process, the host's neighbours), which can only add. Every run's
figure is printed beside it (``runs``), so the spread is there to read.

The split: of each step's time, how much is durable appends (writing the step's entries and the one fsync a
model call makes: a turn's appends are written behind and synced before its next model call and at its card,
``vak_context.storage.group_commit.COMMITS``) and how much is the rest (planning, projecting, encoding,
folding, the tool). ``cpu ms`` is the process's CPU time per step (every thread), which a loaded machine
stretches far less than the wall time; ``main cpu`` the part of it on the thread that runs the turns (the
request path; the rest is worker threads: appends, evidence, and the search index's catch-up at a turn's
close, ``storage/catchup.py``, which waits until no step has assembled a request for 0.5 s, at most 30 s: with
this instant model the timed turns' closes are mostly caught up by one run after them); ``gc ms`` the CPU the garbage collector took
inside the timed turns, and ``full`` how many of its collections were full ones (a full collection visits
every object the engine holds, so it grows with the session; one comes every few dozen steps, so a run of 10
steps holds none or one: more ``--turns`` give its share a step). ``plan B`` the mean size of the timed turns' ``plan`` entries (a delta
against the plan before: it does not grow with the session). The load average is printed before and after.

The Ray column (``--ray``), with the floor of Ray's own calls measured beside it (``bench/raycall.py``: an
empty actor call and one that makes another, the shapes of a step's crossings, with nothing in them): the same turns through the public API on Ray (``Engine.open(folder, ray=True)``:
the folder's LedgerActor, PlannerActor, AssemblerActor, EvidenceActor and ProbeActor on the local Ray this
process joined, bound to 127.0.0.1). An actor cannot reach a MockTransport, so both runs of that comparison
talk to one loopback HTTP server (the in-process reference is run again on it): the added ms per step is
Ray's minus that. Goal: at most 5 ms added per step. The ledger records a measured profile for the scripted
model, so both columns bind the same profile and the ProbeActor finds it fresh (no background probe).

    .venv/bin/python bench/embed.py                 # 10, 100, 1,000 turns, in-process
    .venv/bin/python bench/embed.py --ray           # and the Ray column
    .venv/bin/python bench/embed.py --sizes 10 --turns 2   # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx

import vak_context
from vak_context.context.capacity.profile import ProfileKey, metadata_profile, to_record
from vak_context.context.request.messages import ModelContext
from vak_context.events.payloads import CapacityProfileRecord
from vak_context.sessions.generator import generate_session
from vak_context.storage.group_commit import COMMITS
from vak_context.storage.ledger import LedgerStore

SIZES = (10, 100, 1_000)
SESSION = "bench"
PROBE_SESSION = "capacity"  # where the ProbeActor looks for a recorded profile
MODEL = "openai-compat:scripted"
WINDOW = 32_000  # a mid-sized model: at 1,000 turns most of the history is cards and packets
INPROCESS_GOAL = 2.0  # x the JSON floor at 1,000 turns
GOAL_MS = 5.0  # in-process engine ms per step at 1,000 turns
GOAL_GROWTH = 1.5  # the 1,000-turn figure over the 10-turn one
GOAL_COMMITS = 1.0  # durable commits per step
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
    and the time its own handling took (wall, and CPU on the thread that ran it: the CPU columns take out
    the CPU, since a loaded machine stretches the wall time of the handling far past what it used)."""

    bodies: list[dict[str, Any]] = field(default_factory=list)
    handler_s: float = 0.0
    handler_cpu_s: float = 0.0

    def handle(self, request: httpx.Request) -> httpx.Response:
        start, cpu = time.perf_counter(), time.thread_time()
        if not request.url.path.endswith("/chat/completions"):  # llama.cpp's /tokenize: not this server
            self.handler_s += time.perf_counter() - start
            self.handler_cpu_s += time.thread_time() - cpu
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
        self.handler_cpu_s += time.thread_time() - cpu
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
class Run:
    """Timed turns of one column: seconds of engine work, steps, and the durable commits they made."""

    seconds: float
    steps: int
    commits: int
    commit_s: float
    cpu_s: float = 0.0  # the process's CPU time over the timed turns (every thread), the model's handling out
    plan_bytes: float = 0.0  # mean size of the timed turns' plan entries' payloads
    main_cpu_s: float = 0.0  # the CPU time of the thread that ran the turns, the model's handling out
    gc_s: float = 0.0  # the CPU time garbage collections took inside the timed turns
    gc_full: int = 0  # how many of them were full (generation 2) collections

    @property
    def main_cpu_ms(self) -> float:
        return 1000 * self.main_cpu_s / self.steps

    @property
    def gc_ms(self) -> float:
        return 1000 * self.gc_s / self.steps

    @property
    def cpu_ms(self) -> float:
        return 1000 * self.cpu_s / self.steps

    @property
    def commits_per_step(self) -> float:
        return self.commits / self.steps

    @property
    def ms(self) -> float:
        return 1000 * self.seconds / self.steps

    @property
    def append_ms(self) -> float:
        """Per step, the time durable appends spent writing and syncing (on the critical path: each append
        returns only once its batch is fsync'd)."""
        return 1000 * self.commit_s / self.steps


@dataclass
class Row:
    turns: int
    engine: Run  # in-process over a MockTransport: the fastest of ``runs``
    floor_ms: float  # json.dumps of the same request bodies, per step
    ray: Run | None = None  # on Ray, over the loopback server: the fastest of ``ray_runs``
    loopback: Run | None = None  # in-process over the same loopback server: the fastest of ``loopback_runs``
    runs: list[Run] = field(default_factory=list)  # every in-process run, in the order made
    ray_runs: list[Run] = field(default_factory=list)
    loopback_runs: list[Run] = field(default_factory=list)

    @property
    def steps(self) -> int:
        return self.engine.steps

    @property
    def engine_ms(self) -> float:  # per step, the model's handling taken out
        return self.engine.ms

    @property
    def rest_ms(self) -> float:
        """Per step, what is not a durable append."""
        return self.engine.ms - self.engine.append_ms

    @property
    def ratio(self) -> float:
        return self.engine_ms / self.floor_ms

    @property
    def rest_ratio(self) -> float:
        return self.rest_ms / self.floor_ms

    @property
    def ray_ms(self) -> float | None:
        return None if self.ray is None else self.ray.ms

    @property
    def loopback_ms(self) -> float | None:
        return None if self.loopback is None else self.loopback.ms

    @property
    def ray_added_ms(self) -> float | None:
        return None if self.ray is None or self.loopback is None else self.ray.ms - self.loopback.ms


def recorded_profile() -> CapacityProfileRecord:
    """The scripted model's profile as a probe would have recorded it (now, horizon = the window): what both
    columns bind, and what the ProbeActor finds fresh, so no background probe runs during the timed turns."""
    key = ProfileKey("openai-compat", "scripted")
    ctx = ModelContext(provider="openai-compat", model="scripted", declared_window=WINDOW, source="bench")
    profile = metadata_profile(key, ctx, now=time.time())
    probed = replace(profile.provenance, source="probe", probed_at=time.time(), passed_any=True)
    return to_record(replace(profile, provenance=probed))


def build_ledger(folder: Path, turns: int) -> None:
    """``turns`` closed turns of a generated session, appended to a new ledger, and the model's profile."""
    with LedgerStore(folder) as store:
        store.hold(SESSION)  # written behind, synced once: the setup, not what is measured
        generate_session(seed=turns, turns=turns, append=lambda p, b: store.append(SESSION, [p], blobs=[b])[0])
        store.release(SESSION)
        store.append(PROBE_SESSION, [recorded_profile()])


def floor_s(bodies: list[dict[str, Any]], repeat: int = 5) -> float:
    """The fastest of ``repeat`` runs of ``json.dumps`` over every body: the least any engine pays."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for body in bodies:
            json.dumps(body)
        best = min(best, time.perf_counter() - start)
    return best


def tally(folder: Path, ray: bool) -> tuple[int, float]:
    """(commits, seconds writing and syncing them) so far: this process's, and on Ray the LedgerActor's."""
    here = COMMITS.snapshot()
    commits, seconds = int(here["commits"]), here["seconds"]
    if ray:
        import ray as ray_module

        from vak_context.actors.factory import ledger_actor

        there = ray_module.get(ledger_actor(folder.resolve()).commit_tally.remote())
        commits, seconds = commits + int(there["commits"]), seconds + there["seconds"]
    return commits, seconds


async def timed(folder: Path, timed_turns: int, model: InstantModel, base_url: str | None = None,
                ray: bool = False) -> tuple[Run, list[dict[str, Any]]]:
    """``timed_turns`` turns through the public API, and the bodies the model received: in this process
    over ``model``'s MockTransport, or over the loopback server at ``base_url`` that serves it (in this
    process, or with ``ray`` on the Ray this process joined)."""
    transport = httpx.MockTransport(model.handle) if base_url is None else None
    async with httpx.AsyncClient(transport=transport, trust_env=False) as client:
        with vak_context.Engine.open(folder, ray=ray or None) as engine:
            async with engine.session(SESSION, model=MODEL, http_client=client, tools=[lookup], window=WINDOW,
                                      max_steps=4, base_url=base_url or "http://127.0.0.1:9/v1") as session:
                await session.run("warm-up: look up k0")
                # the whole session's search index: warm-up (in this process's store, or on Ray in the LedgerActor)
                await asyncio.to_thread(engine.index_idle)
                gc.collect()  # the warm-up's garbage (binding, the index build) is not the timed turns'
                model.bodies.clear()
                model.handler_s, model.handler_cpu_s, steps, elapsed = 0.0, 0.0, 0, 0.0
                commits0, commit_s0 = tally(folder, ray)
                with collections() as collected:
                    cpu0, main0 = time.process_time(), time.thread_time()
                    for i in range(timed_turns):
                        start = time.perf_counter()
                        result = await session.run(f"look up the note k{i}")
                        elapsed += time.perf_counter() - start
                        steps += len(result.steps)
                    cpu, main = time.process_time() - cpu0, time.thread_time() - main0
                commits, commit_s = tally(folder, ray)
    run = Run(elapsed - model.handler_s, steps, commits - commits0, commit_s - commit_s0,
              cpu - model.handler_cpu_s, plan_bytes(folder, timed_turns),
              main - (model.handler_cpu_s if base_url is None else 0.0), collected[0],
              int(collected[1]))
    return run, list(model.bodies)


@contextmanager
def collections() -> Iterator[list[float]]:
    """[CPU seconds, full collections] of the garbage collections inside the block (each timed on the thread
    that ran it, where its cost lands)."""
    totals, started = [0.0, 0.0], [0.0]

    def note(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started[0] = time.thread_time()
        else:
            totals[0] += time.thread_time() - started[0]
            totals[1] += info["generation"] == 2

    gc.callbacks.append(note)
    try:
        yield totals
    finally:
        gc.callbacks.remove(note)


def plan_bytes(folder: Path, turns: int) -> float:
    """The mean payload size of the session's last ``turns`` plan entries (the timed turns' own)."""
    with LedgerStore(folder, readonly=True) as store:
        sizes = [len(e.payload) for e in store.entries(SESSION) if e.kind == "plan"][-turns:]
    return sum(sizes) / len(sizes) if sizes else 0.0


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


def stop_actors(folder: Path) -> None:
    """Stop a finished run's folder actors (detached, they would stay up beside the next runs' own)."""
    import ray as ray_module

    from vak_context.actors import factory

    for name_of in (factory.assembler_actor_name, factory.planner_actor_name, factory.evidence_actor_name,
                    factory.probe_actor_name, factory.session_leases_name, factory.ledger_actor_name):
        try:
            ray_module.kill(ray_module.get_actor(name_of(folder.resolve()), namespace=factory.NAMESPACE))
        except ValueError:
            pass  # not started for this folder


def fastest(runs: list[Run]) -> Run:
    """The run of least engine time a step: the same work each run, so the others only add the machine's noise."""
    return min(runs, key=lambda r: r.ms)


def measure(turns: int, timed_turns: int, ray: bool, root: Path, repeat: int = 3) -> Row:
    """``repeat`` runs of each column, each on its own copy of one built ledger (the Ray column's alternating
    with its in-process reference on the loopback server), and each column's fastest."""
    built = root / f"ledger-{turns}"
    build_ledger(built, turns)
    copies = iter(range(1 << 30))

    def copy() -> Path:
        folder = root / f"ledger-{turns}-run{next(copies)}"
        shutil.copytree(built, folder)
        return folder

    runs, bodies = [], []
    for _ in range(repeat):
        run, bodies = asyncio.run(timed(copy(), timed_turns, InstantModel()))
        runs.append(run)
    row = Row(turns, fastest(runs), 1000 * floor_s(bodies) / len(bodies), runs=runs)
    if ray:
        model = InstantModel()
        with loopback(model) as base_url:
            for _ in range(repeat):
                row.loopback_runs.append(asyncio.run(timed(copy(), timed_turns, model, base_url))[0])
                folder = copy()
                row.ray_runs.append(asyncio.run(timed(folder, timed_turns, model, base_url, ray=True))[0])
                stop_actors(folder)
        row.loopback, row.ray = fastest(row.loopback_runs), fastest(row.ray_runs)
    return row


def table(rows: list[Row]) -> str:
    lines = [f"{'turns':>6} {'steps':>5} {'engine ms/step':>14} {'= appends':>9} {'+ rest':>7} {'cpu ms':>7}"
             f" {'main cpu':>8} {'gc ms':>6} {'full':>4} {'commits':>7} {'plan B':>7} {'JSON floor ms':>13} {'ratio':>6} {'rest ratio':>10}"
             f" {'loopback ms':>11} {'Ray ms':>8} {'Ray appends':>11} {'Ray added':>9}"]
    for r in rows:
        e = r.engine
        line = (f"{r.turns:>6} {r.steps:>5} {e.ms:>14.2f} {e.append_ms:>9.2f} {r.rest_ms:>7.2f} {e.cpu_ms:>7.2f}"
                f" {e.main_cpu_ms:>8.2f} {e.gc_ms:>6.2f} {e.gc_full:>4} {e.commits_per_step:>7.1f} {e.plan_bytes:>7.0f} {r.floor_ms:>13.3f} {r.ratio:>5.1f}x"
                f" {r.rest_ratio:>9.1f}x")
        if r.ray is not None and r.loopback is not None and r.ray_added_ms is not None:
            line += f" {r.loopback.ms:>11.2f} {r.ray.ms:>8.2f} {r.ray.append_ms:>11.2f} {r.ray_added_ms:>+9.2f}"
        lines.append(line)
    for r in rows:
        spread = [f"in-process {_each(r.runs)}"]
        if r.ray_runs:
            spread += [f"loopback {_each(r.loopback_runs)}", f"Ray {_each(r.ray_runs)}"]
        lines.append(f"{r.turns:>6} runs (ms a step; the fastest is the row's): " + "; ".join(spread))
    lines.append("per step: appends = appends written and synced (`commits` fsyncs); rest = everything else; cpu = the "
                 "process's CPU time, main cpu = its turns' thread's, gc ms = garbage collection's (full = how many full "
                 "collections in the run); plan B = a timed turn's plan entry; ratio = engine / floor; rest ratio = rest / floor")
    return "\n".join(lines)


def _each(runs: list[Run]) -> str:
    return " ".join(f"{r.ms:.2f}" for r in runs)


def _met(ratio: float) -> str:
    return f"{ratio:.2f}x the goal: {'met' if ratio <= 1.0 else 'not met'}"


def verdicts(rows: list[Row], calls: Any = None) -> list[str]:
    """Each goal against the largest size measured (the goals are stated at 1,000 turns), with its ratio to
    the goal (<= 1: met). ``calls``: Ray's own calls measured here (``bench/raycall.py``), the Ray goal's floor."""
    top = max(rows, key=lambda r: r.turns)
    low = min(rows, key=lambda r: r.turns)
    growth = top.engine_ms / low.engine_ms
    commits = max(run.commits_per_step for r in rows for run in r.runs or [r.engine])
    out = [f"in-process at {top.turns} turns: {top.engine_ms:.2f} ms a step (goal <= {GOAL_MS:.0f} ms; cpu "
           f"{top.engine.cpu_ms:.2f} ms, {top.engine.main_cpu_ms:.2f} on the turns' thread): "
           f"{_met(top.engine_ms / GOAL_MS)}",
           f"in-process growth {low.turns} -> {top.turns} turns: {growth:.2f}x (goal <= {GOAL_GROWTH}x; cpu "
           f"{top.engine.cpu_ms / low.engine.cpu_ms:.2f}x): {_met(growth / GOAL_GROWTH)}",
           f"commits per step: {commits:.2f} at most (goal <= {GOAL_COMMITS:.0f}): {_met(commits / GOAL_COMMITS)}",
           f"in-process at {top.turns} turns: {top.ratio:.1f}x the JSON floor (goal <= {INPROCESS_GOAL:.0f}x): "
           f"{'met' if top.ratio <= INPROCESS_GOAL else 'not met'} ({top.engine.append_ms:.1f} of "
           f"{top.engine_ms:.1f} ms a step durable appends; the rest {top.rest_ratio:.1f}x the floor)"]
    if top.ray_added_ms is not None:
        out.append(f"Ray at {top.turns} turns: {top.ray_added_ms:+.2f} ms per step over in-process "
                   f"(goal <= {RAY_GOAL_MS:.0f} ms): {_met(max(top.ray_added_ms, 0.0) / RAY_GOAL_MS)}"
                   + (f"; the floor of Ray's own calls here {calls.floor_ms:.2f} ms a step: the goal is "
                      f"{'above' if calls.floor_ms < RAY_GOAL_MS else 'below'} it" if calls is not None else ""))
    return out


def main(argv: list[str] | None = None, *, start_ray: Callable[[], Any] | None = None) -> list[Row]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="closed turns per session, comma-separated")
    parser.add_argument("--turns", type=int, default=5, help="timed turns per size (two steps each)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs of each column per size, each on a copy of the built ledger (the fastest counts)")
    parser.add_argument("--ray", action="store_true", help="also the Ray column (starts a local Ray on 127.0.0.1)")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    if args.ray:
        if start_ray is None:
            from vak_context.engine.localray import start_local_ray as start_ray
        start_ray()
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="vak-bench-embed-") as tmp:
        rows = [measure(n, args.turns, args.ray, Path(tmp), max(args.repeat, 1)) for n in sizes]
    calls = None
    if args.ray:  # Ray's own calls, with nothing in them: the floor under the Ray column, measured here
        from bench.raycall import measure as ray_calls

        calls = ray_calls()
    print(table(rows))
    if calls is not None:
        print(calls.line())
    print("load average (1/5/15 min): before {:.1f} {:.1f} {:.1f}, after {:.1f} {:.1f} {:.1f} on {} CPUs".format(
        *load, *os.getloadavg(), os.cpu_count()))
    lines = verdicts(rows, calls)
    for line in lines:
        print(line)
    print("summary: " + "; ".join(lines))
    return rows


if __name__ == "__main__":
    main()
