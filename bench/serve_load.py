"""`vak serve` under load, SIGKILLs and bad input, from outside (issue 35 item 6).

N conversations (``--sessions``, default 16) of M turns each (``--turns``, default 30) are held at once by
the official ``openai`` client against ``vak serve`` (a child process, ``openai-compat:scripted`` on
127.0.0.1, ``--window``) in front of a scripted upstream (tests/fakes/load_upstream.py, in a process of
its own, speaking the documented OpenAI body and its server-sent events). Two turns in three are a tool
round trip (the model calls ``web_search`` or ``run_command``, the client runs it and sends the result,
the model answers ``Done: TAG``), and every other one of those returns 20-50 KB (``--big``); the third
turn is a plain question. Every other turn is streamed. Each request that came back is sent again,
body for body, by the same client straight to the upstream: added latency = through ``vak serve`` minus
direct, in the same run.

Meanwhile ``--kills`` SIGKILLs (default 5) land at seeded random moments (after a seeded number of
requests, plus a seeded delay); each is followed by ``vak verify`` on the quiet ledger and a restart on
the same ledger and port. The clients retry with the ``openai`` client's own ``max_retries``
(``--max-retries``); the run's key changes with each start, and the client reads it per attempt (its
``api_key`` callable, as a client holding a key file would). A request that still fails is sent again by
the harness (``--resends``) before its conversation counts as stuck. After each restart, once
``/health`` answers 200, ``vak verify`` runs again beside the load.

Then every case of tests/fakes/bad_inputs.py is sent to the last server (expected status, server still
serving), the server is stopped, and the ledger is read back through the public API (``Engine.open``):

* forks: a conversation held by more than one ledger session, or a session whose entries are not one chain;
* duplicates: an exchange stored twice (one reply's step, or one call's result, twice in a session);
* lost: a reply the client got (its text, its call ids) that no assistant step of its sessions holds.

The latencies after a restart are timed from the restarted server's first ``/health`` 200 (or from the
last attempt's start, if later: the client's own back-off is not the server's), per conversation its first
request answered by the new server; the start-up (spawn to ``/health`` 200, Ray's included with
``--serve-arg=--ray``) is reported apart. ``--workers 1,2`` runs the whole load once per worker count,
passing ``--workers N`` to ``vak serve`` (skipped, said so, where the command has no such option).

    .venv/bin/python bench/serve_load.py                                      # 16 x 30, 5 kills (minutes)
    .venv/bin/python bench/serve_load.py --sessions 2 --turns 3 --kills 1     # the smoke test's size
    .venv/bin/python bench/serve_load.py --workers 1,2 --kills 0              # requests/s per worker count
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import openai

from tests.fakes.serve_faults import Acked, Restart, Server, audit, send_bad_inputs, verify
from vak_context.serve.bodies import MAX_BODY_BYTES

ROOT = Path(__file__).resolve().parent.parent
SYSTEM = "You are the support team's assistant. Use the tools when a directive asks for a search or a command."
TOOLS: Any = [
    {"type": "function", "function": {"name": "web_search", "description": "Search the notes.", "parameters": {
        "type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}},
    {"type": "function", "function": {"name": "run_command", "description": "Run a shell command.", "parameters": {
        "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}},
]
SMALL = (800, 2_000)  # characters of a small tool result


# ------------------------------------------------------------------ the load's plan


@dataclass(frozen=True)
class TurnPlan:
    tag: str  # c03-t07: in the directive, the call's id and arguments, and the answer
    verb: str  # search, run (a tool round trip) or ask (answered at once)
    stream: bool
    result_chars: int  # the tool result's size (0 for ask)

    @property
    def directive(self) -> str:
        what = {"search": f"search the notes for {self.tag}", "run": f"run the checks for {self.tag}",
                "ask": f"say which turn this is ({self.tag})"}[self.verb]
        return f"[{self.tag}] {self.verb} - please {what}."

    @property
    def expected(self) -> str:
        return f"Answer: {self.tag}" if self.verb == "ask" else f"Done: {self.tag}"

    @property
    def requests(self) -> int:
        return 1 if self.verb == "ask" else 2


def plan(sessions: int, turns: int, seed: int, big: tuple[int, int]) -> list[list[TurnPlan]]:
    rng = random.Random(seed)
    out = []
    for c in range(sessions):
        mine, tools = [], 0
        for t in range(1, turns + 1):
            verb = ("search", "run", "ask")[(t - 1) % 3]
            size = 0
            if verb != "ask":
                size = rng.randint(*big) if tools % 2 == 0 else rng.randint(*SMALL)
                tools += 1
            mine.append(TurnPlan(f"c{c:02d}-t{t:02d}", verb, t % 2 == 0, size))
        out.append(mine)
    return out


def tool_result(name: str, arguments: dict[str, Any], chars: int) -> str:
    """What the client's tool returns: the tag first, then deterministic filler up to ``chars``."""
    tag = str(arguments.get("query") or arguments.get("command") or "").removeprefix("make check ")
    if name == "web_search":
        rows: list[dict[str, Any]] = []
        i = 0
        while len(json.dumps(rows)) < chars:
            i += 1
            rows.append({"rank": i, "title": f"{tag} result {i}", "url": f"https://example.org/{tag}/{i}",
                         "snippet": " ".join(f"{tag}w{i}x{j}" for j in range(24))})
        return json.dumps(rows)
    lines = [f"{tag}: make check line {n:04d} " + "." * 40 for n in range(1, chars // 64 + 2)]
    return "\n".join([*lines, "exit code: 0"])


# ------------------------------------------------------------------ the clients


@dataclass
class Sent:
    """One request through ``vak serve`` (after the openai client's own retries)."""

    conv: int
    tag: str
    stream: bool
    start: float
    end: float
    last_attempt: float  # when the client's last attempt went out (after its back-off)
    ok: bool
    error: str = ""
    direct_ms: float | None = None
    epoch_start: int = 0  # the server's start count when sent / when answered
    epoch_end: int = 0

    @property
    def serve_ms(self) -> float:
        return 1000 * (self.end - self.start)


class Load:
    """The shared state of one run: requests sent, replies acknowledged, conversations finished."""

    def __init__(self, server: Server, upstream: str, plans: list[list[TurnPlan]], max_retries: int,
                 resends: int, session_header: bool) -> None:
        self.server, self.upstream, self.plans = server, upstream, plans
        self.max_retries, self.resends, self.session_header = max_retries, resends, session_header
        self.lock = threading.Lock()
        self.sent: list[Sent] = []
        self.acked: list[Acked] = []
        self.completed: dict[int, bool] = {}
        self.stuck: dict[int, str] = {}
        self.reasked: list[str] = []  # turns whose model was asked again (it called its tool anew)
        self.epoch = 0  # starts of the server so far, minus one
        self.ok_count = 0
        self.total = sum(t.requests for p in plans for t in p)

    def client(self, conv: int, attempts: list[float]) -> openai.OpenAI:
        headers = {"x-vak-session": f"load-c{conv:02d}"} if self.session_header else None
        hooks = {"request": [lambda request: attempts.append(time.perf_counter())]}
        return openai.OpenAI(base_url=f"{self.server.root}/v1", api_key=lambda: self.server.key,
                             max_retries=self.max_retries, default_headers=headers, timeout=600.0,
                             http_client=openai.DefaultHttpxClient(event_hooks=hooks))

    def conversation(self, conv: int) -> None:
        attempts: list[float] = []
        client = self.client(conv, attempts)
        direct = openai.OpenAI(base_url=self.upstream, api_key="direct", max_retries=0, timeout=600.0)
        messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
        try:
            for turn in self.plans[conv]:
                messages.append({"role": "user", "content": turn.directive})
                for step in range(4):  # a call, then the answer (bounded: a broken server stops, not loops)
                    got = self.request(conv, turn, client, direct, messages, attempts)
                    if got is None:
                        return
                    if step == turn.requests:  # one more request than the turn needs: the model was asked again
                        with self.lock:
                            self.reasked.append(turn.tag)
                    text, calls = got
                    entry: dict[str, Any] = {"role": "assistant", "content": text or None}
                    if calls:
                        entry["tool_calls"] = [{"id": i, "type": "function",
                                                "function": {"name": n, "arguments": json.dumps(a)}} for i, n, a in calls]
                    messages.append(entry)
                    if not calls:
                        if text != turn.expected:
                            self.stuck[conv] = f"{turn.tag}: answered {text[:80]!r}, not {turn.expected!r}"
                            return
                        break
                    messages += [{"role": "tool", "tool_call_id": i, "content": tool_result(n, a, turn.result_chars)}
                                 for i, n, a in calls]
                else:
                    self.stuck[conv] = f"{turn.tag}: no answer in 4 requests"
                    return
            self.completed[conv] = True
        finally:
            client.close()
            direct.close()

    def request(self, conv: int, turn: TurnPlan, client: openai.OpenAI, direct: openai.OpenAI,
                messages: list[dict[str, Any]], attempts: list[float]) -> tuple[str, list[tuple[str, str, dict[str, Any]]]] | None:
        error = ""
        for _ in range(1 + self.resends):
            attempts.clear()
            epoch, start = self.epoch, time.perf_counter()
            try:
                text, calls = send(client, messages, turn.stream)
            except Exception as exc:  # the openai client's errors, after its own retries
                end = time.perf_counter()
                error = describe(exc)
                with self.lock:
                    self.sent.append(Sent(conv, turn.tag, turn.stream, start, end, attempts[-1] if attempts else start,
                                          False, error, None, epoch, self.epoch))
                continue
            end = time.perf_counter()
            sent = Sent(conv, turn.tag, turn.stream, start, end, attempts[-1] if attempts else start, True, "",
                        None, epoch, self.epoch)
            with self.lock:
                self.acked.append(Acked(conv, turn.tag, text, tuple(i for i, _, _ in calls)))
                self.sent.append(sent)
                self.ok_count += 1
            d0 = time.perf_counter()
            try:
                send(direct, messages, turn.stream)
                sent.direct_ms = 1000 * (time.perf_counter() - d0)
            except Exception:  # the upstream itself failed: no added latency for this request
                pass
            return text, calls
        self.stuck[conv] = f"{turn.tag}: failed {1 + self.resends} times, last: {error}"
        return None


def describe(exc: Exception) -> str:
    status = getattr(exc, "status_code", None)
    message = str(getattr(exc, "message", "") or exc).replace("\n", " ")
    return f"{type(exc).__name__}{f' {status}' if status else ''}: {message[:160]}"


def send(client: openai.OpenAI, history: list[dict[str, Any]], stream: bool) -> tuple[str, list[tuple[str, str, dict[str, Any]]]]:
    messages: Any = history  # the client's history as dicts, the shapes the client's TypedDicts describe
    if stream:
        text, parts = "", dict[int, dict[str, str]]()
        for chunk in client.chat.completions.create(model="scripted", messages=messages, tools=TOOLS, stream=True,
                                                    stream_options={"include_usage": True}):
            for choice in chunk.choices:
                text += choice.delta.content or ""
                for d in choice.delta.tool_calls or ():
                    part = parts.setdefault(d.index, {"id": "", "name": "", "arguments": ""})
                    part["id"] += d.id or ""
                    if d.function is not None:
                        part["name"] += d.function.name or ""
                        part["arguments"] += d.function.arguments or ""
        return text, [(p["id"], p["name"], json.loads(p["arguments"] or "{}")) for _, p in sorted(parts.items())]
    reply = client.chat.completions.create(model="scripted", messages=messages, tools=TOOLS)
    message = reply.choices[0].message
    return message.content or "", [(c.id, c.function.name, json.loads(c.function.arguments))
                                   for c in message.tool_calls or () if c.type == "function"]


# ------------------------------------------------------------------ one run, and its report


@dataclass
class Report:
    workers: str
    sessions: int
    turns: int
    requests_ok: int
    requests_failed: int
    requests_planned: int
    reasked: list[str]  # turns that took more requests than planned (the model called its tool again)
    sessions_completed: int
    stuck: dict[str, str]
    forks: int
    duplicates: int
    lost: int
    added_p50_ms: float | None
    added_p95_ms: float | None
    added_p99_ms: float | None
    after_restart_p50_ms: float | None
    after_restart_p99_ms: float | None
    after_restart_n: int
    resumed_all_s: list[float]  # per restart: its /health 200 to the last conversation's first answer
    startup_s: list[float]  # per start: spawn to /health 200
    kills: int
    kills_planned: int
    verify: list[str]
    bad_ok: int
    bad_total: int
    bad_wrong: list[str]
    wall_s: float
    requests_per_s: float
    server_cpu_ms_per_request: float | None
    audit: dict[str, Any]
    errors: dict[str, int]
    failures: list[str]  # the first 50 failed requests: when (s from the start), which turn, mode, the error


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def run(args: argparse.Namespace, workers: int | None, scratch: Path) -> Report:
    rng = random.Random(args.seed)
    plans = plan(args.sessions, args.turns, args.seed, (args.big[0], args.big[1]))
    ledger = scratch / f"ledger-w{workers or 1}"
    extra = [*args.serve_arg, *(["--workers", str(workers)] if workers is not None else [])]
    with ExitStack() as stack:
        # Its end: the block closes its pipes (stdin's end stops it) and waits for it.
        up = stack.enter_context(subprocess.Popen([sys.executable, "-m", "tests.fakes.load_upstream"], cwd=ROOT,
                                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                                  env={**os.environ, "PYTHONPATH": _pythonpath()}))
        line = up.stdout.readline() if up.stdout else ""
        if "base_url=" not in line:
            raise RuntimeError(f"the scripted upstream did not start: {line!r}")
        upstream = line.split("base_url=", 1)[1].strip()
        server = Server(ledger, upstream, args.window, extra)
        stack.callback(server.stop)
        spawned, health = server.start()
        startups = [health - spawned]
        load = Load(server, upstream, plans, args.max_retries, args.resends, not args.no_session_header)
        print(f"[workers {workers or '1 (default)'}] {args.sessions} sessions x {args.turns} turns, "
              f"{load.total} requests planned, {args.kills} kills; vak serve up in {health - spawned:.2f} s "
              f"at {server.root}", flush=True)
        restarts: list[Restart] = []
        t0 = time.perf_counter()
        threads = [threading.Thread(target=load.conversation, args=(c,), name=f"conv-{c}", daemon=True)
                   for c in range(args.sessions)]
        for t in threads:
            t.start()
        span = max(1, load.total)
        # The kill moments: after a seeded number of answered requests, in the first 60 % of the plan (a run
        # whose conversations get stuck answers fewer than planned: a moment it never reaches is said so).
        moments = range(max(1, span // 20), max(2, span * 6 // 10))
        points = sorted(rng.sample(moments, min(args.kills, len(moments))))
        delays = [rng.uniform(0.0, 0.3) for _ in points]
        done = threading.Event()
        last_progress = time.perf_counter()

        def finished() -> bool:
            return not any(t.is_alive() for t in threads)

        for point, delay in zip(points, delays, strict=True):
            while load.ok_count < point and not finished():
                time.sleep(0.05)
                server.sample_cpu()
                last_progress = progress(load, restarts, t0, last_progress, args.progress)
            if finished():
                break
            time.sleep(delay)  # the seeded moment after the seeded request count
            killed = time.perf_counter()
            server.kill()
            checked = verify(ledger)
            load.epoch += 1
            spawned, health = server.start()
            startups.append(health - spawned)
            restart = Restart(killed, spawned, health, checked)
            restarts.append(restart)
            print(f"  kill {len(restarts)} at request {load.ok_count}/{load.total} (t={killed - t0:.1f} s): "
                  f"verify after the kill: {checked}; restarted, /health 200 in {health - spawned:.2f} s", flush=True)
            restart.verify_after_restart = verify(ledger)
            print(f"    verify after the restart (beside the load): {restart.verify_after_restart}", flush=True)
        while not finished():
            time.sleep(0.05)
            server.sample_cpu()
            last_progress = progress(load, restarts, t0, last_progress, args.progress)
        wall = time.perf_counter() - t0
        done.set()
        bad_ok = bad_total = 0
        bad_wrong: list[str] = []
        if not args.no_bad_inputs:
            bad_ok, bad_total, bad_wrong = send_bad_inputs(server, MAX_BODY_BYTES)
            print(f"  bad input: {bad_ok}/{bad_total} answered as expected", flush=True)
        server.stop()
        # What every start of the server printed (its warnings and tracebacks), beside its ledger.
        (scratch / f"serve-w{workers or 1}.log").write_text("".join(server.output))
        final_verify = verify(ledger)
    found = audit(ledger, load.acked)
    ok = [s for s in load.sent if s.ok]
    failed = [s for s in load.sent if not s.ok]
    steady = [s.serve_ms - s.direct_ms for s in ok if s.direct_ms is not None and s.epoch_start == s.epoch_end]
    after, resumed = after_restarts(ok, restarts)
    cpu_s = sum(server.cpu.values())
    return Report(
        workers=str(workers or "1 (default)"), sessions=args.sessions, turns=args.turns, requests_ok=len(ok),
        requests_failed=len(failed), requests_planned=load.total, reasked=sorted(load.reasked),
        sessions_completed=sum(load.completed.values()),
        stuck={f"c{c:02d}": why for c, why in sorted(load.stuck.items())},
        forks=found.forks, duplicates=found.duplicates, lost=found.lost,
        added_p50_ms=pct(steady, 0.5), added_p95_ms=pct(steady, 0.95), added_p99_ms=pct(steady, 0.99),
        after_restart_p50_ms=pct(after, 0.5), after_restart_p99_ms=pct(after, 0.99), after_restart_n=len(after),
        resumed_all_s=resumed, startup_s=startups, kills=len(restarts), kills_planned=args.kills,
        verify=[v for r in restarts for v in (f"after kill: {r.verify_after_kill}",
                                              f"after restart: {r.verify_after_restart}")] + [f"at the end: {final_verify}"],
        bad_ok=bad_ok, bad_total=bad_total, bad_wrong=bad_wrong, wall_s=wall, requests_per_s=len(ok) / wall,
        server_cpu_ms_per_request=1000 * cpu_s / len(ok) if ok else None,
        audit=asdict(found), errors=dict(Counter(s.error.split(":")[0] for s in failed)),
        failures=[f"{s.end - t0:.1f} s {s.tag} {'streamed' if s.stream else 'plain'}: {s.error}" for s in failed[:50]])


def after_restarts(ok: list[Sent], restarts: list[Restart]) -> tuple[list[float], list[float]]:
    """Per restart and conversation, its first request answered by the new server, in ms from that
    server's first /health 200 (or the request's last attempt, if later); and per restart, the seconds
    until every conversation that went on had its first answer."""
    times: list[float] = []
    resumed: list[float] = []
    for i, r in enumerate(restarts):
        until = restarts[i + 1].killed_at if i + 1 < len(restarts) else float("inf")
        firsts: dict[int, Sent] = {}
        for s in sorted(ok, key=lambda s: s.end):
            if r.health_at <= s.end < until and s.conv not in firsts:
                firsts[s.conv] = s
        times += [1000 * (s.end - max(r.health_at, s.last_attempt)) for s in firsts.values()]
        if firsts:
            resumed.append(max(s.end for s in firsts.values()) - r.health_at)
    return times, resumed


def progress(load: Load, restarts: list[Restart], t0: float, last: float, every: float) -> float:
    now = time.perf_counter()
    if now - last < every:
        return last
    with load.lock:
        failed = sum(not s.ok for s in load.sent)
    print(f"  [{now - t0:6.1f} s] {load.ok_count}/{load.total} requests ok, {failed} failed; "
          f"{sum(load.completed.values())} sessions done, {len(load.stuck)} stuck; {len(restarts)} kills; "
          f"{load.ok_count / (now - t0):.1f} requests/s", flush=True)
    return now


def _pythonpath() -> str:
    return os.pathsep.join(p for p in [str(ROOT), os.environ.get("PYTHONPATH", "")] if p)


def has_workers_option() -> bool:
    done = subprocess.run([sys.executable, "-m", "vak_context.cli", "serve", "--help"], capture_output=True, text=True,
                          timeout=120)
    return "--workers" in done.stdout


def fmt(v: float | None, unit: str = "ms") -> str:
    return "n/a" if v is None else f"{v:,.0f} {unit}"


def render(r: Report) -> str:
    lines = [
        f"== vak serve load, workers {r.workers}: {r.sessions} sessions x {r.turns} turns, {r.kills} kills =="
        + (f" ({r.kills_planned} planned: the load ended before the rest of the seeded moments)"
           if r.kills < r.kills_planned else ""),
        f"requests: {r.requests_ok} ok, {r.requests_failed} failed (planned {r.requests_planned}); "
        f"errors: {r.errors or 'none'}",
        f"turns whose model was asked again (a tool called anew, more requests than planned): {len(r.reasked)}"
        + (f" ({', '.join(r.reasked[:12])}{', ...' if len(r.reasked) > 12 else ''})" if r.reasked else ""),
        f"sessions completed: {r.sessions_completed}/{r.sessions}",
        *[f"  stuck {c}: {why}" for c, why in r.stuck.items()],
        f"forks: {r.forks} (ledger sessions {r.audit['sessions']}; conversations in more than one: "
        f"{r.audit['extra_sessions'] or 'none'}; not one chain: {r.audit['not_one_chain'] or 'none'})",
        f"duplicates: {r.duplicates} (replies {r.audit['duplicate_steps']}, tool results {r.audit['duplicate_results']}; "
        f"{r.audit['duplicates_marked']} of them marked by the server as withdrawn or recorded again, "
        f"{r.duplicates - r.audit['duplicates_marked']} unmarked)"
        + (f": {r.audit['duplicate_examples']}" if r.audit["duplicate_examples"] else ""),
        f"lost acknowledged exchanges: {r.lost} of {r.requests_ok} replies the clients got"
        + (f": {r.audit['lost_examples']}" if r.lost else ""),
        f"added latency (through vak serve - direct, same client, same run, {r.sessions} sessions at once): "
        f"p50 {fmt(r.added_p50_ms)}, p95 {fmt(r.added_p95_ms)}, p99 {fmt(r.added_p99_ms)}",
        f"after a restart (each conversation's first answer from the new server, from its first /health 200; "
        f"n={r.after_restart_n}): p50 {fmt(r.after_restart_p50_ms)}, p99 {fmt(r.after_restart_p99_ms)}; "
        f"all conversations resumed in {', '.join(f'{s:.2f}' for s in r.resumed_all_s) or 'n/a'} s",
        f"start-up (spawn to /health 200, apart from the above): {', '.join(f'{s:.2f}' for s in r.startup_s)} s",
        *[f"vak verify {v}" for v in r.verify],
        f"bad input: {r.bad_ok}/{r.bad_total} as the table expects" if r.bad_total else "bad input: not sent",
        *[f"  {w}" for w in r.bad_wrong],
        f"throughput: {r.requests_per_s:.1f} requests/s over {r.wall_s:.1f} s (kills and restarts included); "
        f"server CPU {fmt(r.server_cpu_ms_per_request)} a request",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[Report]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=16, help="conversations at once (default 16)")
    parser.add_argument("--turns", type=int, default=30, help="turns per conversation (default 30)")
    parser.add_argument("--kills", type=int, default=5, help="SIGKILLs of the server at seeded moments (default 5)")
    parser.add_argument("--seed", type=int, default=35)
    parser.add_argument("--window", type=int, default=8192, help="vak serve --window (default 8192)")
    parser.add_argument("--big", type=int, nargs=2, default=(20_000, 50_000), metavar=("MIN", "MAX"),
                        help="characters of the large tool results (every other tool turn; default 20000 50000)")
    parser.add_argument("--max-retries", type=int, default=10, help="the openai client's own max_retries (default 10)")
    parser.add_argument("--resends", type=int, default=2,
                        help="times the harness sends a failed request again before the conversation counts as stuck")
    parser.add_argument("--workers", default=None,
                        help="comma-separated worker counts, each a whole run with vak serve --workers N")
    parser.add_argument("--serve-arg", action="append", default=[], metavar="ARG",
                        help="more arguments for vak serve (repeat; e.g. --serve-arg=--ray)")
    parser.add_argument("--no-session-header", action="store_true",
                        help="send no x-vak-session header (the server names each conversation from its content)")
    parser.add_argument("--no-bad-inputs", action="store_true", help="skip the bad-input table")
    parser.add_argument("--progress", type=float, default=10.0, help="seconds between progress lines")
    parser.add_argument("--json", type=Path, default=None, help="write the reports here as JSON")
    parser.add_argument("--scratch", type=Path, default=None, help="where the ledgers go (default: a temp folder)")
    args = parser.parse_args(argv)
    if args.sessions < 1 or args.turns < 1 or args.kills < 0 or args.big[0] > args.big[1]:
        parser.error("--sessions and --turns at least 1, --kills at least 0, --big MIN <= MAX")
    counts: list[int | None] = [None]
    if args.workers:
        counts = [int(w) for w in args.workers.split(",") if w]
        if not has_workers_option():
            print(f"skipped --workers {args.workers}: this vak serve has no --workers option (issue 35 item 4 adds it); "
                  "run without --workers for one process", flush=True)
            return []
    reports = []
    with ExitStack() as stack:
        scratch = args.scratch or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="vak-serve-load-")))
        for workers in counts:
            report = run(args, workers, scratch)
            print(render(report), flush=True)
            reports.append(report)
    if len(reports) > 1:
        print("requests/s per worker count: " + ", ".join(f"{r.workers}: {r.requests_per_s:.1f}" for r in reports))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in reports], indent=2))
    return reports


if __name__ == "__main__":
    main()
