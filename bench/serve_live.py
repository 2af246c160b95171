"""A live run through ``vak serve``: the official ``openai`` client drives the local model as an agent would,
and the prompt cache is measured per step from the ledger's receipts.

``vak serve --upstream local:MODEL`` is started as a child process, as a user starts it (``serve_child``; a fresh ledger in a
temp folder unless ``--ledger``); its printed address and key file are read. The ``openai`` client then holds
``--turns`` turns (20) in one conversation (``x-vak-session: serve-live``) with its own two tools, run
client-side on a small temp workspace it writes: ``list_dir`` and ``read_file``. The directives ask for
several tool calls each (list, then read); some read files of 5-10k characters, so digests and packets
appear as the session grows. A step is one client request: the client runs the calls it is handed and
sends their results. Steps per turn are capped (``--steps``, 4) and so is ``max_tokens`` per request, so a
small model that keeps calling ends; a turn left at the cap is closed by the next user message.
``--stream`` makes every other turn streaming.

Printed per turn: the directive, each step (the client's request) with the upstream calls it made (prompt
and cached tokens per call, from the receipts the engine wrote for it), the calls handed to the client and
the answer (truncated), and the turn's wall time. Then the cache figure: for every pair of consecutive
upstream calls within a turn, ``min(cached(k+1), prompt(k)) / prompt(k)`` (as bench/cache.py computes P4:
cached tokens past ``prompt(k)`` are step k's own generation), per turn and pooled, beside the goal 99.5%.
A pair whose later call the engine planned again mid-turn (a ``plan`` entry between the two receipts: the
turn outgrew its frozen plan) is shown apart and left out of the pooled figure, as bench/cache.py does.
Last, the checks: ``vak verify`` on the ledger, each client message stored once (the session's
``serve.history`` digests equal the client's history), no fork, and no engine tool (``recall``,
``find_tools``) ever handed to the client.

    .venv/bin/python bench/serve_live.py                         # the demo's default model, 20 turns
    .venv/bin/python bench/serve_live.py --model smollm2 --turns 2 --n-ctx 4096   # the smoke test's size
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import openai

from vak_context.cli.mainjob import DEFAULT_MODEL
from vak_context.events.envelope import Mapper
from vak_context.serve.child import ServeChild, serve_child
from vak_context.serve.conversation import HISTORY, read_held
from vak_context.serve.protocol import read_openai
from vak_context.storage.ledger import LedgerStore

GOAL = 0.995
SESSION = "serve-live"
SYSTEM = ("You are a coding assistant. Use the tools to look at the project's files before you answer. "
          "Paths are relative to the project root, e.g. src/app.py.")
ENGINE_TOOLS = {"recall", "find_tools"}
TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": "list_dir", "description": "List the entries of a folder of the project (folders end with /).",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string", "description": "a folder relative to the project root; '.' is the root"}},
            "required": ["path"]}}},
    {"type": "function", "function": {
        "name": "read_file", "description": "Read a text file of the project; returns its lines, numbered.",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string", "description": "a file relative to the project root"}},
            "required": ["path"]}}},
]
TOOL_NAMES = {t["function"]["name"] for t in TOOLS}
DIRECTIVES = (
    "List the project's root folder with list_dir, then read README.md with read_file, and say what the project does.",
    "List the folder src with list_dir, then read src/config.py with read_file. Which port does it use?",
    "Read logs/build.log with read_file and say which step failed.",
    "List the folder docs with list_dir, then read docs/setup.md. What is the first setup step?",
    "Read data/inventory.json with read_file. How many items are out of stock?",
    "Read src/app.py with read_file, then read src/config.py, and say how the app loads its config.",
    "List the folder logs, then read logs/test.log. How many tests failed?",
    "Read docs/changelog.md with read_file. What changed in the latest version?",
    "List the folder src, then read src/utils.py. What does slugify do?",
    "Read data/users.csv with read_file. How many users are admins?",
)


# ---------------------------------------------------------------------- the workspace and its tools


def write_workspace(root: Path) -> None:
    """A small project: a few short files and some of 5-10k characters (logs, data, a changelog)."""
    files: dict[str, str] = {
        "README.md": "# tidepool\n\nA small web service that tracks tide gauges and serves their readings as JSON.\n"
                     "Run it with `python -m src.app`; configuration lives in src/config.py.\n",
        "src/config.py": 'PORT = 8731\nHOST = "127.0.0.1"\nDATABASE = "tides.sqlite"\nLOG_LEVEL = "info"\n',
        "src/app.py": '"""The service."""\n\nfrom src import config\n\n\ndef main() -> None:\n'
                      '    settings = {k: getattr(config, k) for k in dir(config) if k.isupper()}\n'
                      '    print(f"serving on {settings[\'HOST\']}:{settings[\'PORT\']}")\n',
        "src/utils.py": 'import re\n\n\ndef slugify(text: str) -> str:\n    """Lower-case, dashes for runs of '
                        'other characters."""\n    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")\n',
        "docs/setup.md": "# Setup\n\n1. Install Python 3.11.\n2. `pip install -e .`\n3. `python -m src.app`\n",
    }
    steps = ["fetch", "configure", "compile", "lint", "typecheck", "package", "sign", "upload"]
    build = [f"[{i // 60:02d}:{i % 60:02d}] step {steps[i % 8]}: {'ok' if i != 141 else 'FAILED (exit 2)'} "
             f"target=module_{i:03d} cache=hit elapsed={0.1 + (i % 7) / 10:.1f}s" for i in range(150)]
    files["logs/build.log"] = "\n".join(build) + "\n"
    tests = [f"tests/test_gauge_{i:03d}.py::test_reading_{i % 9} {'FAILED' if i % 37 == 5 else 'PASSED'}"
             for i in range(160)]
    files["logs/test.log"] = "\n".join(tests) + f"\n== {sum(i % 37 == 5 for i in range(160))} failed ==\n"
    items = [{"sku": f"TP-{i:04d}", "name": f"gauge part {i}", "stock": 0 if i % 11 == 3 else 5 + i % 40,
              "bin": f"A{i % 12}-{i % 5}"} for i in range(90)]
    files["data/inventory.json"] = json.dumps({"items": items}, indent=1) + "\n"
    users = ["id,name,role,joined"] + [f"{i},user{i:03d},{'admin' if i % 13 == 0 else 'member'},2026-{1 + i % 12:02d}-01"
                                       for i in range(200)]
    files["data/users.csv"] = "\n".join(users) + "\n"
    changes = []
    for v in range(30, 0, -1):
        changes += [f"## 1.{v}.0", "", f"- gauges: readings rounded to {v % 4 + 1} decimals",
                    f"- api: /v1/stations pages of {10 * v}", f"- fix: station {v * 7} reported twice", ""]
    files["docs/changelog.md"] = "# Changelog\n\n" + "\n".join(changes)
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def run_tool(root: Path, name: str, arguments: dict[str, Any]) -> str:
    """The client's own tools, confined to the workspace; a bad call gets an error text, as agents answer."""
    raw = str(arguments.get("path") or ".")
    path = (root / raw).resolve()
    if raw.startswith("/"):
        # A small model writes absolute paths ("/path/to/project/README.md"): the longest tail of it that
        # names something in the project is what it meant, as a lenient agent's tools read it.
        parts = Path(raw).parts[1:]
        tails = [Path(*parts[i:]) for i in range(len(parts))] + ([Path(".")] if name == "list_dir" else [])
        path = next((root / t for t in tails if (root / t).exists()), root / raw.lstrip("/")).resolve()
    if root.resolve() not in (path, *path.parents):
        return f"error: {raw} is outside the project"
    if name == "list_dir":
        if not path.is_dir():
            return f"error: {raw} is not a folder"
        return "\n".join(sorted(p.name + ("/" if p.is_dir() else "") for p in path.iterdir()))
    if name == "read_file":
        if not path.is_file():
            return f"error: {raw} is not a file"
        return "".join(f"{i}\t{line}" for i, line in enumerate(path.read_text().splitlines(keepends=True), 1))
    return f"error: no tool named {name}"


# ---------------------------------------------------------------------- vak serve as a child process


# ---------------------------------------------------------------------- the client's conversation


@dataclass
class Step:
    """One client request: what it got back, and (from the ledger) the upstream calls it made."""

    turn: int
    index: int  # within the turn, from 0
    stream: bool
    answer: str
    calls: list[tuple[str, str, dict[str, Any]]]
    usage: tuple[int, int]  # (prompt, cached) as the client saw it: summed over the step's upstream calls
    wall_s: float
    upstream: list[Upstream] = field(default_factory=list)


@dataclass(frozen=True)
class Upstream:
    """One upstream call, from its receipt: prompt tokens (cached included), cached tokens, whether the
    engine planned again just before it, and the plan's fidelity mix if it did."""

    prompt: int
    cached: int
    replanned: bool
    plan: str = ""


@dataclass
class Turn:
    number: int
    directive: str
    steps: list[Step] = field(default_factory=list)
    wall_s: float = 0.0


class Agent:
    """The official ``openai`` client holding one conversation, running its tools on the workspace."""

    def __init__(self, served: ServeChild, root: Path, max_tokens: int) -> None:
        self.root, self.max_tokens = root, max_tokens
        self.client = openai.OpenAI(base_url=served.base_url, api_key=served.key, max_retries=0, timeout=1800.0,
                                    default_headers={"x-vak-session": SESSION})
        self.messages: list[dict[str, Any]] = []
        self.seen: list[str] = []
        self.held = 0  # messages the server has answered for (what its ledger holds of the history)

    def send(self, turn: int, index: int, stream: bool) -> Step:
        messages: Any = [{"role": "system", "content": SYSTEM}, *self.messages]
        tools: Any = TOOLS
        start = time.perf_counter()
        if stream:
            text, parts, usage = "", dict[int, dict[str, str]](), (0, 0)
            for chunk in self.client.chat.completions.create(
                    model="local", messages=messages, tools=tools, max_tokens=self.max_tokens, stream=True,
                    stream_options={"include_usage": True}):
                if chunk.usage is not None:
                    details = chunk.usage.prompt_tokens_details
                    usage = (chunk.usage.prompt_tokens, (details.cached_tokens or 0) if details else 0)
                for choice in chunk.choices:
                    text += choice.delta.content or ""
                    for d in choice.delta.tool_calls or ():
                        part = parts.setdefault(d.index, {"id": "", "name": "", "arguments": ""})
                        part["id"] += d.id or ""
                        part["name"] += (d.function.name or "") if d.function else ""
                        part["arguments"] += (d.function.arguments or "") if d.function else ""
            calls = [(p["id"], p["name"], json.loads(p["arguments"] or "{}")) for _, p in sorted(parts.items())]
        else:
            reply = self.client.chat.completions.create(model="local", messages=messages, tools=tools,
                                                        max_tokens=self.max_tokens)
            u = reply.usage
            details = u.prompt_tokens_details if u else None
            usage = (u.prompt_tokens if u else 0, (details.cached_tokens or 0) if details else 0)
            message = reply.choices[0].message
            text = message.content or ""
            calls = [(c.id, c.function.name, json.loads(c.function.arguments or "{}"))
                     for c in message.tool_calls or () if c.type == "function"]
        wall = time.perf_counter() - start
        entry: dict[str, Any] = {"role": "assistant", "content": text or None}
        if calls:
            entry["tool_calls"] = [{"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
                                   for i, n, a in calls]
        self.messages.append(entry)
        self.held = len(self.messages)
        self.seen += [n for _, n, _ in calls]
        return Step(turn, index, stream, text, calls, usage, wall)

    def turn(self, turn: Turn, steps: int, stream: bool) -> None:
        """The user's message, then at most ``steps`` requests, running the calls each hands back."""
        start = time.perf_counter()
        self.messages.append({"role": "user", "content": turn.directive})
        try:
            for index in range(steps):
                step = self.send(turn.number, index, stream)
                turn.steps.append(step)
                if not step.calls:
                    break
                self.messages += [{"role": "tool", "tool_call_id": i, "content": run_tool(self.root, n, a)}
                                  for i, n, a in step.calls]
        finally:
            turn.wall_s = time.perf_counter() - start


# ---------------------------------------------------------------------- the ledger's side


def fidelity_of(plan: Any) -> str:
    """A plan's fidelity mix: its earlier turns by fidelity (full, card, ...), the current turn's level
    (digest, packet) when it has one."""
    body = plan.plan if isinstance(plan.plan, dict) else {}
    kinds: dict[str, int] = {}
    for row in body.get("turns") or ():
        if isinstance(row, dict) and row.get("fidelity") != "current":
            kinds[str(row.get("fidelity"))] = kinds.get(str(row.get("fidelity")), 0) + 1
    current = body.get("current_turn") if isinstance(body.get("current_turn"), dict) else {}
    level = str(current.get("level") or "") if isinstance(current, dict) else ""
    mix = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
    return "; ".join(x for x in (mix and f"turns {mix}", level and f"current turn {level}",
                                 "packet" if body.get("packet") else "") if x)


def attach_receipts(ledger: Path, turns: Sequence[Turn]) -> None:
    """Each client request's upstream calls from the session's receipts: the receipts before each
    ``serve.history`` activity belong to the request it closes; a ``plan`` entry before a receipt means
    the engine planned that call again (a turn's first call always is)."""
    steps = [s for t in turns for s in t.steps]
    mapper = Mapper()
    with LedgerStore(ledger, readonly=True) as store:
        entries = store.entries(SESSION)
    pending: list[Upstream] = []
    planned, plan_text, at = False, "", 0
    for entry in entries:
        if entry.kind == "plan":
            planned, plan_text = True, fidelity_of(mapper.payload_of(entry))
        elif entry.kind == "receipt":
            usage = mapper.payload_of(entry).usage
            pending.append(Upstream(usage.prompt_tokens, usage.cache_read_tokens, planned, plan_text))
            planned, plan_text = False, ""
        elif entry.kind == "activity" and mapper.payload_of(entry).activity == HISTORY:
            if at < len(steps):
                steps[at].upstream = pending
            at, pending = at + 1, []


@dataclass(frozen=True)
class Pair:
    turn: int
    label: str  # "step 1 -> step 2" (call numbers within a step after a dot)
    prompt_k: int
    cached_next: int
    replanned: bool

    @property
    def reused(self) -> int:
        return min(self.cached_next, self.prompt_k)


def pairs_of(turn: Turn) -> list[Pair]:
    """Every pair of consecutive upstream calls within one turn."""
    calls = [(f"{s.index + 1}" + (f".{j + 1}" if len(s.upstream) > 1 else ""), u)
             for s in turn.steps for j, u in enumerate(s.upstream)]
    return [Pair(turn.number, f"step {a} -> step {b}", ua.prompt, ub.cached, ub.replanned)
            for (a, ua), (b, ub) in pairwise(calls)]


def ratio(pairs: Sequence[Pair]) -> float | None:
    total = sum(p.prompt_k for p in pairs)
    return sum(p.reused for p in pairs) / total if total else None


def pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2%}"


def clip(text: str, n: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[:n - 3] + "..."


# ---------------------------------------------------------------------- the checks


def checks(ledger: Path, agent: Agent, stopped: bool = False) -> dict[str, Any]:
    """``stopped``: the run was cut off mid-request, which the server still answered (and holds) after the
    client left: the client's history is then a prefix of what is held."""
    verify = subprocess.run([sys.executable, "-m", "vak_context.cli", "verify", str(ledger)], capture_output=True,
                            text=True, check=False)
    items = read_openai({"messages": agent.messages}).items
    with LedgerStore(ledger, readonly=True) as store:
        held = read_held(store, SESSION)
        sessions = store.sessions()
        profiles = [e for e in store.entries(SESSION) if e.kind == "capacity_profile"]
        window = Mapper().payload_of(profiles[-1]).declared_window if profiles else None
    return {
        "declared_window": window,
        "verified": verify.returncode == 0,
        "verify_output": (verify.stdout + verify.stderr).strip(),
        "stored_once": held.digests[:len(items)] == [i.digest() for i in items]
                       and (stopped or len(held.digests) == len(items)),
        "held": len(held.digests), "client_items": len(items),
        "forks": [n for n in sessions if n.startswith(f"{SESSION}.f")],
        "engine_tools_seen": sorted(ENGINE_TOOLS & set(agent.seen)),
        "foreign_tools_seen": sorted(set(agent.seen) - TOOL_NAMES),
    }


# ---------------------------------------------------------------------- the run


def print_turn(turn: Turn) -> None:
    print(f"turn {turn.number}: {turn.directive}", flush=True)
    for s in turn.steps:
        ups = ", ".join(f"prompt {u.prompt} cached {u.cached}" + (f" (planned: {u.plan or 'all full'})" if u.replanned else "")
                        for u in s.upstream)
        print(f"  step {s.index + 1}{' (stream)' if s.stream else ''}: client usage prompt {s.usage[0]} cached "
              f"{s.usage[1]}; {len(s.upstream)} upstream call(s): {ups or 'none in the ledger'}; {s.wall_s:.1f} s")
        if s.calls:
            print("    calls to the client: " + "; ".join(f"{n}({json.dumps(a)})" for _, n, a in s.calls))
        else:
            print(f"    answer: {clip(s.answer)!r}")
    last = turn.steps[-1] if turn.steps else None
    ended = "answered" if last is not None and not last.calls else "left at the step cap"
    print(f"  turn {turn.number}: {len(turn.steps)} steps, {ended}, {turn.wall_s:.1f} s", flush=True)


def running(turns: Sequence[Turn]) -> None:
    """The pooled figure so far (a long run stopped early still says where it stood)."""
    pairs = [p for t in turns for p in pairs_of(t) if not p.replanned]
    print(f"  so far: {pct(ratio(pairs))} cached over {len(pairs)} pairs within turns; "
          f"{sum(t.wall_s for t in turns):.0f} s in {len(turns)} turns", flush=True)


def report(turns: Sequence[Turn], result: dict[str, Any], wall_s: float) -> dict[str, Any]:
    pairs = [p for t in turns for p in pairs_of(t)]
    kept = [p for p in pairs if not p.replanned]
    apart = [p for p in pairs if p.replanned]
    pooled = ratio(kept)
    print()
    print("cache within a turn: cached(k+1)/prompt(k) per pair of consecutive upstream calls of a turn, "
          "counted as min(cached(k+1), prompt(k)) / prompt(k) as bench/cache.py does (cached tokens past prompt(k) "
          "are step k's own generation)")
    for t in turns:
        tp = pairs_of(t)
        if not tp:
            continue
        print(f"  turn {t.number}: {pct(ratio([p for p in tp if not p.replanned]))} over "
              f"{sum(not p.replanned for p in tp)} pairs")
        for p in tp:
            print(f"    {p.label}: prompt(k) {p.prompt_k}, cached(k+1) {p.cached_next} "
                  f"({pct(p.reused / p.prompt_k if p.prompt_k else None)})"
                  f"{' (re-planned mid-turn: shown apart)' if p.replanned else ''}")
    met = pooled is not None and pooled >= GOAL
    print(f"pooled: {pct(pooled)} over {len(kept)} pairs in {len({p.turn for p in kept})} turns "
          f"(goal >= {GOAL:.1%}: {'met' if met else 'not met' if pooled is not None else 'no pair'}); "
          f"worst pair {pct(min((p.reused / p.prompt_k for p in kept if p.prompt_k), default=None))}")
    print(f"re-planned mid-turn (left out): {len(apart)} pairs, {pct(ratio(apart))} cached")
    print(f"ledger verified: {'yes' if result['verified'] else 'NO'} ({clip(result['verify_output'], 200)})")
    print(f"each client message stored once: {'yes' if result['stored_once'] else 'NO'} "
          f"({result['held']} held, {result['client_items']} in the client's history); forks: {result['forks'] or 'none'}")
    print(f"the session planned against: declared window {result['declared_window']} (its last capacity_profile)")
    print(f"engine tools handed to the client: {result['engine_tools_seen'] or 'none'}; "
          f"other unknown tools: {result['foreign_tools_seen'] or 'none'}")
    steps = sum(len(t.steps) for t in turns)
    calls = sum(len(s.upstream) for t in turns for s in t.steps)
    print(f"wall: {wall_s:.0f} s in all for {len(turns)} turns, {steps} client requests, {calls} upstream calls "
          f"(per turn: {', '.join(f'{t.wall_s:.0f}' for t in turns)} s)")
    return {"pooled": pooled, "pairs": len(kept), "apart": len(apart), "met": met, **result}


class Stopped(Exception):
    """SIGTERM: the run stops after what it has done, and reports that."""


def _stop(signum: int, frame: Any) -> None:
    raise Stopped


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=DEFAULT_MODEL, help=f"the local model (default {DEFAULT_MODEL}, the demo's)")
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--steps", type=int, default=4, help="client requests per turn at most")
    parser.add_argument("--max-tokens", type=int, default=96, help="max_tokens of each request")
    parser.add_argument("--n-ctx", type=int, default=None,
                        help="the local model's context (vak serve --window; default: vak serve's own)")
    parser.add_argument("--stream", action="store_true", help="every other turn streaming")
    parser.add_argument("--ledger", type=Path, default=None, help="the ledger folder (default: a fresh temp one)")
    args = parser.parse_args(argv)
    if args.turns < 1 or args.steps < 1:
        parser.error("--turns and --steps are at least 1")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="vak-serve-live-") as tmp:
        root = Path(tmp) / "project"
        write_workspace(root)
        ledger = args.ledger or Path(tmp) / "ledger"
        turns: list[Turn] = []
        stopped = False
        with serve_child(f"local:{args.model}", ledger=ledger, window=args.n_ctx) as served:
            print(f"vak serve --upstream local:{args.model}{f' --window {args.n_ctx}' if args.n_ctx else ''} "
                  f"at {served.base_url}; ledger {ledger}; session {SESSION}; {args.turns} turns, at most "
                  f"{args.steps} steps, max_tokens {args.max_tokens}", flush=True)
            agent = Agent(served, root, args.max_tokens)
            previous = signal.signal(signal.SIGTERM, _stop) if threading.current_thread() is threading.main_thread() else None
            try:
                for n in range(1, args.turns + 1):
                    turn = Turn(n, DIRECTIVES[(n - 1) % len(DIRECTIVES)])
                    turns.append(turn)
                    agent.turn(turn, args.steps, args.stream and n % 2 == 0)
                    attach_receipts(ledger, turns)  # the writer's tail is readable while it runs
                    print_turn(turn)
                    running(turns)
            except (Stopped, KeyboardInterrupt):
                # What the server answered stays; a request cut off mid-way is not part of the history.
                del agent.messages[agent.held:]
                turns = [t for t in turns if t.steps]
                stopped = True
                print(f"stopped (SIGTERM) during turn {n} of {args.turns}: reporting the {len(turns)} turns "
                      "with answered requests", flush=True)
                if turns and turns[-1].number == n:
                    attach_receipts(ledger, turns)
                    print_turn(turns[-1])
            finally:
                agent.client.close()
                if previous is not None:
                    signal.signal(signal.SIGTERM, previous)
        attach_receipts(ledger, turns)  # again once the server stopped: every receipt sealed
        result = checks(ledger, agent, stopped)
        return report(turns, result, time.perf_counter() - started)


if __name__ == "__main__":
    main()
