"""`vak serve --ray --workers N`: requests/s and the server's CPU per request, 1 worker against N, in one run.

For each worker count, ``vak serve --ray --workers W`` is started as a user starts it (its own local Ray on
127.0.0.1, a fresh ledger) in front of the tests' scripted upstream (tests/fakes/wire_models.py, served on
127.0.0.1 by tests/fakes/httpserver.py in this process). ``--sessions`` official ``openai`` clients (keep-alive,
as a client left alone is; one connection each, so the kernel's ``SO_REUSEPORT`` spreads the sessions over the
workers) each hold ``--turns`` turns at once: a search returning 20 JSON results of about 10k characters or a
command's 66 lines (tests/fakes/embedder.py), the model calling the client's tool, then answering: two
requests a turn. Each session's first turn is untimed (binding the session); then the rest are timed.

Server CPU = user + system time, from /proc, of every process of the server's tree: the serve workers, Ray's
GCS and raylet, and the actors' workers (LedgerActor, Planner, Assembler, Evidence, Probe, SessionLeases),
read before and after the timed turns; per request = that / the timed requests. The load client and the
upstream run in this process, sharing the machine's cores with the server (on 2 cores, as here, more
workers cannot add cores: the figure that matters is that CPU per request does not grow). Goal: with N
workers, CPU per request at most 1.15x one worker's. The server's own line on its session leases (granted,
moved between workers, forwarded to the worker holding an open turn) is printed after each run.

    .venv/bin/python bench/serve_workers.py                          # 1 and 2 workers, 8 sessions x 6 turns
    .venv/bin/python bench/serve_workers.py --workers 1,2,4 --sessions 16 --turns 10
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx

from tests.fakes.embedder import CLOCK_QUERY
from tests.fakes.httpserver import serve
from tests.fakes.serve_clients import Client
from tests.fakes.wire_models import FORMATS, WireModel
from vak_context.context.history.packets import SUMMARISER_SYSTEM
from vak_context.farm.jobs import process_tree
from vak_context.serve.child import serve_child

GOAL = 1.15  # N workers' CPU per request, at most this times one worker's
TICK = os.sysconf("SC_CLK_TCK")


def directive(session: int, turn: int) -> str:
    if turn == 0:
        return f"search {CLOCK_QUERY}"
    return f"run make check-{session}-{turn}" if turn % 2 else f"search query-{session * 100 + turn:03d}"


class Upstream:
    """The scripted model; the ProbeActor's requests get a quick 400 (no measured profile replaces the
    window mid-run, and both runs are probed alike)."""

    def __init__(self) -> None:
        self.model = WireModel(FORMATS["openai"])

    def handle(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith(self.model.wire.path):
            text = request.content.decode()
            tools = [t["function"]["name"] for t in json.loads(text).get("tools") or []]
            if "web_search" not in tools and SUMMARISER_SYSTEM[:40] not in text:
                return httpx.Response(400, json={"error": {"message": "no probes here", "type": "invalid_request_error"}})
        return self.model.handle(request)


def cpu_s(pids: set[int]) -> dict[int, tuple[str, float]]:
    """Each process's (name, user + system seconds) from /proc."""
    out = {}
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            name = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        label = " ".join(a.decode(errors="replace") for a in name[:4]).strip() or stat.split("(", 1)[1].split(")")[0]
        out[pid] = (label, (int(fields[11]) + int(fields[12])) / TICK)
    return out


def role(label: str) -> str:
    if "serve" in label and ("vak_context.cli" in label or "vak_context.serve.workers" in label):
        return "serve workers"
    if any(n in label for n in ("gcs_server", "raylet", "dashboard", "log_monitor", "runtime_env", "agent")):
        return "Ray system"
    return "Ray actors/workers"


@dataclass
class Result:
    workers: int
    requests: int
    wall_s: float
    cpu_s: float
    by_role: dict[str, float]
    leases: str

    @property
    def per_s(self) -> float:
        return self.requests / self.wall_s

    @property
    def cpu_ms(self) -> float:
        return 1000 * self.cpu_s / self.requests


def run(workers: int, sessions: int, turns: int, upstream_url: str, root: Path) -> Result:
    with serve_child("openai-compat:scripted", ledger=root / f"ledger-{workers}", base_url=upstream_url, window=16_000,
                     extra=("--ray", "--workers", str(workers))) as server:
        counted = [0]
        lock = threading.Lock()

        def note(_response: httpx.Response) -> None:
            with lock:
                counted[0] += 1

        clients = [Client("openai", server.base_url, server.key, session=f"b{i}", keep_alive=True, on_response=note)
                   for i in range(sessions)]
        try:
            with ThreadPoolExecutor(sessions) as pool:
                list(pool.map(lambda ic: ic[1].turn(directive(ic[0], 0)), enumerate(clients)))  # untimed
                tree = process_tree(server.process.pid)
                before, counted[0] = cpu_s(tree), 0
                start = time.perf_counter()

                def hold(i: int) -> None:
                    for t in range(1, turns):
                        answer = clients[i].turn(directive(i, t))
                        assert answer.startswith("Done:"), answer

                list(pool.map(hold, range(sessions)))
                wall = time.perf_counter() - start
                after = cpu_s(process_tree(server.process.pid))
        finally:
            for c in clients:
                c.close()
    by_role: dict[str, float] = {}
    for pid, (label, seconds) in after.items():
        by_role[role(label)] = by_role.get(role(label), 0.0) + seconds - before.get(pid, (label, 0.0))[1]
    leases = next((line.strip() for line in server.output if "session leases:" in line), "")
    assert server.process.returncode == 0, "".join(server.output)
    return Result(workers, counted[0], wall, sum(by_role.values()), by_role, re.sub(r"^vak serve: ", "", leases))


def show(r: Result, what: str) -> None:
    roles = ", ".join(f"{k} {1000 * v / r.requests:.1f}" for k, v in sorted(r.by_role.items()))
    print(f"  {r.workers} worker(s), {what}: {r.requests} requests in {r.wall_s:.1f} s = {r.per_s:.1f} requests/s; "
          f"server CPU {r.cpu_ms:.1f} ms a request ({roles}){'; ' + r.leases if r.leases else ''}", flush=True)


def main(argv: list[str] | None = None) -> list[Result]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", default="1,2", help="worker counts, comma-separated; the first is the baseline")
    ap.add_argument("--sessions", type=int, default=8)
    ap.add_argument("--turns", type=int, default=6, help="turns a session, the first untimed")
    ap.add_argument("--rounds", type=int, default=1,
                    help="run the worker counts this many times, alternately (1, 2, 1, 2, ...), and sum each count's "
                    "runs: a busy machine's noise falls on both alike")
    args = ap.parse_args(argv)
    counts = [int(n) for n in args.workers.split(",")]
    print(f"vak serve --ray --workers N: {args.sessions} sessions x {args.turns - 1} timed turns (2 requests a turn), "
          f"{os.cpu_count()} cores shared with the load client and the upstream", flush=True)
    results = []
    upstream = Upstream()
    runs: dict[int, list[Result]] = {n: [] for n in counts}
    with tempfile.TemporaryDirectory(prefix="vak-bench-workers-") as tmp, serve(upstream.handle) as model:
        for round_ in range(args.rounds):
            for n in counts:
                r = run(n, args.sessions, args.turns, model.base_url, Path(tmp) / f"round-{round_}")
                runs[n].append(r)
                show(r, f"round {round_ + 1}")
    for n in counts:
        rs = runs[n]
        roles: dict[str, float] = {}
        for r in rs:
            for k, v in r.by_role.items():
                roles[k] = roles.get(k, 0.0) + v
        total = Result(n, sum(r.requests for r in rs), sum(r.wall_s for r in rs), sum(r.cpu_s for r in rs), roles,
                       "; ".join(r.leases for r in rs if r.leases))
        results.append(total)
        if args.rounds > 1:
            show(total, f"all {args.rounds} rounds")
    base = results[0]
    for r in results[1:]:
        ratio = r.cpu_ms / base.cpu_ms
        print(f"{r.workers} workers vs {base.workers}: requests/s x{r.per_s / base.per_s:.2f}; CPU per request "
              f"x{ratio:.2f} (goal at most x{GOAL}: {'met' if ratio <= GOAL else 'NOT met'})", flush=True)
    return results


if __name__ == "__main__":
    main()
    sys.exit(0)
