"""``vak serve --ray --workers 2`` as a user starts it: two serve workers (processes) on one port of 127.0.0.1
and one ledger, in front of a scripted upstream on loopback.

Official ``openai`` clients hold six conversations at once, each request on a new connection, so the kernel
hands a session's requests to either worker. Then, sent to each worker's own port so that the two workers
share each step for sure: a conversation whose requests alternate between the workers (a turn's results
reach the worker that does not hold the turn: forwarded to the one that does; the next turn starts on the
other worker, which reads the session from the ledger), and the same first request of a new session sent
at once to both workers, four times.

Every request is answered, by the worker holding its session's open turn; each twice-sent request reached
the upstream once (the session's lease serialised the pair, and the second was answered from the ledger);
each session's entries form one chain holding each client message once, with no fork; the ledger verifies;
every socket the server's processes listen on (both workers, GCS, raylet, the actors' workers) is on
loopback; SIGTERM stops every worker cleanly."""

from __future__ import annotations

import itertools
import json
import re
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.embedder import CLOCK_QUERY
from tests.fakes.httpserver import serve
from tests.fakes.serve_clients import SCHEMAS, SYSTEM, Client
from tests.fakes.sockets import bound_sockets, is_loopback
from tests.fakes.wire_models import FORMATS, WireModel
from vak_context.context.history.packets import SUMMARISER_SYSTEM
from vak_context.farm.jobs import process_tree
from vak_context.serve.child import serve_child
from vak_context.serve.conversation import read_held
from vak_context.serve.protocol import read_openai
from vak_context.serve.workers import WORKER_HEADER
from vak_context.storage.ledger import LedgerStore

pytestmark = pytest.mark.ray

SESSIONS = 6
DIRECTIVES = (f"search {CLOCK_QUERY}", "run make check", "search query-003")
PAIRS = 4
WORKER_LINE = re.compile(r"vak serve: worker (\d+) serving on \S+ \(its own: 127\.0\.0\.1:(\d+)\)")
HOST = socket.gethostname()


class Upstream:
    """The scripted model; the ProbeActor's requests (neither the client's tools nor a packet summary) get a
    400, so no measured profile replaces the server's window mid-run. Counts the turn requests."""

    def __init__(self) -> None:
        self.model = WireModel(FORMATS["openai"])
        self.turns = 0
        self._lock = threading.Lock()

    def handle(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith(self.model.wire.path):
            text = request.content.decode()
            tools = [t["function"]["name"] for t in json.loads(text).get("tools") or []]
            if "web_search" not in tools and SUMMARISER_SYSTEM[:40] not in text:
                return httpx.Response(400, json={"error": {"message": "this scripted server answers no probes",
                                                           "type": "invalid_request_error"}})
            if "web_search" in tools:
                with self._lock:
                    self.turns += 1
        return self.model.handle(request)


def test_two_workers_serve_one_ledger(tmp_path: Path) -> None:
    upstream = Upstream()
    folder = tmp_path / "ledger"
    answered_by: dict[str, list[str]] = {f"w{i}": [] for i in range(SESSIONS)}  # session -> who answered each request

    def note(session: str) -> Any:
        return lambda response: answered_by[session].append(response.headers.get(WORKER_HEADER, "?"))

    with serve(upstream.handle) as model, serve_child("openai-compat:scripted", ledger=folder, base_url=model.base_url,
                                                      window=9500, extra=("--ray", "--workers", "2")) as run:
        # Every worker said it serves (and on which port of its own) before the address was printed.
        workers = {int(m.group(1)): int(m.group(2)) for m in map(WORKER_LINE.search, run.output) if m}
        clients = [Client("openai", run.base_url, run.key, session=f"w{i}", on_response=note(f"w{i}")) for i in range(SESSIONS)]

        def converse(client: Client) -> list[str]:
            return [client.turn(d) for d in DIRECTIVES]

        with ThreadPoolExecutor(SESSIONS) as pool:
            answers = list(pool.map(converse, clients))

        # Then to each worker's own port, so the two workers share each step for sure.
        (pid_a, port_a), (pid_b, port_b) = sorted(workers.items())
        own = {pid_a: f"http://127.0.0.1:{port_a}/v1", pid_b: f"http://127.0.0.1:{port_b}/v1"}

        # A conversation whose requests alternate between the workers: a turn's results go to the worker
        # that does not hold the turn (forwarded to the one that does); the next turn starts on the other.
        hops: list[str] = []
        at_a = Client("openai", own[pid_a], run.key, session="hop", on_response=lambda r: hops.append(r.headers[WORKER_HEADER]))
        at_b = Client("openai", own[pid_b], run.key, session="hop", messages=at_a.messages,
                      on_response=lambda r: hops.append(r.headers[WORKER_HEADER]))
        for first, then, directive in ((at_a, at_b, f"search {CLOCK_QUERY}"), (at_b, at_a, "search query-005")):
            first.messages.append({"role": "user", "content": directive})
            _, calls = first.send()
            then.give_results(calls)
            answer, more = then.send()
            assert answer.startswith("Done:") and not more, answer

        # The same first request of a new session, at once to both workers.
        body = {"model": "scripted", "messages": [{"role": "system", "content": SYSTEM},
                                                  {"role": "user", "content": "search query-077"}],
                "tools": [{"type": "function", "function": {"name": n, "description": d, "parameters": s}}
                          for n, (d, s) in SCHEMAS.items()]}
        before, pairs = upstream.turns, []

        def send(to: tuple[str, str]) -> tuple[str, dict[str, Any]]:
            base_url, session = to
            with httpx.Client(timeout=120) as http:
                r = http.post(f"{base_url}/chat/completions", json=body,
                              headers={"authorization": f"Bearer {run.key}", "x-vak-session": session})
            assert r.status_code == 200, r.text
            return r.headers[WORKER_HEADER], r.json()["choices"][0]["message"]

        with ThreadPoolExecutor(2) as pool:
            for i in range(PAIRS):
                pairs.append(list(pool.map(send, [(own[pid_a], f"twice{i}"), (own[pid_b], f"twice{i}")])))
        twice_turns = upstream.turns - before

        tree = process_tree(run.process.pid)
        sockets = bound_sockets(tree, run.process.pid)

    out = "".join(run.output)
    assert run.process.returncode == 0, out
    assert "Traceback" not in out, out
    assert all(a[-1].startswith("Done:") for a in answers), answers
    assert all(c.seen == ["web_search", "run_command", "web_search"] for c in clients), [c.seen for c in clients]
    # Each pair: one upstream call, both answered alike (the second from the ledger).
    assert twice_turns == PAIRS, (twice_turns, pairs)
    assert all(a[1]["tool_calls"] == b[1]["tool_calls"] for a, b in pairs), pairs
    both = {f"{HOST}:{pid_a}", f"{HOST}:{pid_b}"}
    assert all(set(by) <= both for by in answered_by.values()), answered_by
    # A turn's requests are answered by the worker that holds it (the results forwarded there), so each
    # conversation answers in runs of two: (the calls, the answer) per directive.
    turns_by = {s: by[::2] for s, by in answered_by.items()}
    assert all(by[1::2] == turns_by[s] for s, by in answered_by.items()), answered_by
    # Sent to A, B, B, A: the results each time answered by the worker holding the open turn.
    assert hops == [f"{HOST}:{pid_a}"] * 2 + [f"{HOST}:{pid_b}"] * 2, hops
    # Whichever worker took a pair's lease first answered both: the other's request was forwarded to it.
    assert all(a[0] == b[0] for a, b in pairs), pairs
    leases = re.search(r"session leases: (\d+) granted, (\d+) moved between workers, (\d+) waited for another "
                       r"worker, (\d+) forwarded", out)
    assert leases is not None, out
    moved, forwarded = int(leases.group(2)), int(leases.group(4))
    # A session moves when its next turn starts on the other worker: the kernel's picks for the six
    # conversations, and the hop conversation's second turn (a new session's first lease never moves). At
    # SIGTERM each worker takes the lease of each session it holds to close it, so the count may be higher.
    kernel_moves = sum(a != b for by in turns_by.values() for a, b in itertools.pairwise(by))
    assert moved >= kernel_moves + 1, (leases.group(0), turns_by)
    # Forwarded: the hop's two, each pair's second, and each results request handed to the other worker.
    assert forwarded >= 2 + PAIRS, leases.group(0)

    with LedgerStore(folder, readonly=True) as store:
        report = store.verify()
        names = store.sessions()
        for name, client in [*((f"w{i}", c) for i, c in enumerate(clients)), ("hop", at_a)]:
            entries = store.entries(name)
            assert [e.parent for e in entries[1:]] == [e.id for e in entries[:-1]]  # one chain
            held = read_held(store, name)
            items = read_openai({"messages": client.messages}).items
            assert held.digests == [it.digest() for it in items] and len(set(held.digests)) == len(items)
        for i in range(PAIRS):
            assert len(read_held(store, f"twice{i}").markers) == 1  # noted once
    assert report.ok, report.as_dict()
    assert not [n for n in names if ".f" in n], names

    names_seen = {s.process.rsplit("/", 1)[-1] for s in sockets}
    assert {"gcs_server", "raylet"} <= names_seen, names_seen  # the scan saw the cluster, so it can fail
    port = int(run.root.rsplit(":", 1)[1])
    listening = {s.pid for s in sockets if s.port == port}
    assert listening == {pid_a, pid_b} and run.process.pid in listening, (listening, workers)
    exposed = [s for s in sockets if not is_loopback(s.address)]
    assert exposed == [], "\n".join(f"{s.proto} {s.address}:{s.port} {s.process} (pid {s.pid})" for s in exposed)
