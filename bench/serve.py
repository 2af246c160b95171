"""`vak serve`'s own cost: the latency it adds per request, at 1, 10 and 100 turns, against its floor.

One conversation of the library issue's scenario (tests/fakes/embedder.py: odd turns a search returning
20 JSON results of about 10k characters, even turns a command returning 66 lines) is held by an
OpenAI-protocol client (httpx, keep-alive, the whole history in every request as such clients send it)
against ``vak serve`` (its Starlette app under uvicorn on 127.0.0.1, an engine in this process) in front
of the tests' scripted upstream (tests/fakes/wire_models.py on OpenAI chat completions, served on
127.0.0.1 by tests/fakes/httpserver.py). Each turn is two requests: the model calls the client's tool,
then answers after the result.

At each size N a fresh server and ledger hold turns 1 .. N-1 untimed, then turns N .. N+T-1 are timed
(``--turns`` T), alternately plain and streaming (SSE, timed to the last chunk). Each timed request is sent twice: through ``vak serve`` (which ingests it,
projects the session and calls the upstream), then the same body straight to the same upstream (a
streaming one streamed both ways: ``vak serve`` streams its upstream requests for a streaming client, and
the scripted upstream answers those as server-sent events, a word at a time). Added latency =
through ``vak serve`` minus direct, per request; p50 and p95 over the timed requests of a size and mode.
The direct request carries the client's whole history, the one through the server its projection, so
the upstream parses less behind the server: the figure is what a client sees, not the server's CPU time.

The floor is what any server in that place must do with a request: ``json.loads`` + ``json.dumps`` of the
client's body and one durable append (a ``LedgerStore`` append, acknowledged once fsync'd) of its last
message. Goal: at most 10 ms added at p50 at 100 turns (issue 37; the ratio to the goal is printed, and the
ratio to the floor beside it).

The same server in front of the real local model, driven by the ``openai`` client for 20 turns with the
prompt cache measured per step from the ledger's receipts: ``bench/serve_live.py``.

    .venv/bin/python bench/serve.py                       # 1, 10 and 100 turns, 20 timed turns each
    .venv/bin/python bench/serve.py --sizes 1,2 --turns 2 # a smoke run
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx

from tests.fakes.embedder import CLOCK_QUERY
from tests.fakes.httpserver import serve
from tests.fakes.serve_clients import SCHEMAS, SYSTEM, run_tool
from tests.fakes.vak_server import CLIENT_KEY, running
from tests.fakes.wire_models import FORMATS, WireModel
from vak_context.events.payloads import Directive
from vak_context.storage.ledger import LedgerStore

SIZES = (1, 10, 100)
GOAL_MS = 10.0  # added at p50 at the largest size
SESSION = "bench-serve"
WINDOW = 16_000  # tokens the server plans against (the scripted upstream publishes no profile)
TOOLS = [{"type": "function", "function": {"name": n, "description": d, "parameters": s}} for n, (d, s) in SCHEMAS.items()]


def directive(turn: int) -> str:
    if turn == 1:
        return f"search {CLOCK_QUERY}"
    return f"run make check-{turn}" if turn % 2 == 0 else f"search query-{turn:03d}"


@dataclass
class Sample:
    serve_ms: float  # through vak serve
    direct_ms: float  # the same body straight to the upstream
    floor_ms: float  # json.loads + json.dumps of the body, one durable append
    body_chars: int

    @property
    def added_ms(self) -> float:
        return self.serve_ms - self.direct_ms


@dataclass
class Row:
    turns: int  # the first timed turn's number
    mode: str  # plain or streaming
    samples: list[Sample] = field(default_factory=list)

    def p(self, attr: str, q: float) -> float:
        values = sorted(getattr(s, attr) for s in self.samples)
        return values[min(len(values) - 1, round(q * (len(values) - 1)))]

    @property
    def added_p50(self) -> float:
        return statistics.median(s.added_ms for s in self.samples)

    @property
    def floor_p50(self) -> float:
        return statistics.median(s.floor_ms for s in self.samples)

    @property
    def ratio(self) -> float:
        return self.added_p50 / self.floor_p50


def parse_sse(lines: list[str]) -> tuple[str, list[tuple[str, str, dict[str, Any]]]]:
    """(text, calls) from an OpenAI chat-completions event stream."""
    text, parts = "", dict[int, dict[str, str]]()
    for line in lines:
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        for choice in json.loads(line[6:]).get("choices") or ():
            delta = choice.get("delta") or {}
            text += delta.get("content") or ""
            for d in delta.get("tool_calls") or ():
                part = parts.setdefault(d["index"], {"id": "", "name": "", "arguments": ""})
                part["id"] += d.get("id") or ""
                part["name"] += (d.get("function") or {}).get("name") or ""
                part["arguments"] += (d.get("function") or {}).get("arguments") or ""
    return text, [(p["id"], p["name"], json.loads(p["arguments"] or "{}")) for _, p in sorted(parts.items())]


def parse_reply(reply: dict[str, Any]) -> tuple[str, list[tuple[str, str, dict[str, Any]]]]:
    message = reply["choices"][0]["message"]
    return message.get("content") or "", [(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
                                          for c in message.get("tool_calls") or ()]


class Bench:
    """The conversation: the client's history, its two HTTP clients, the floor's ledger and the samples."""

    def __init__(self, serve_url: str, upstream_url: str, floor_ledger: Path) -> None:
        self.serve_url, self.upstream_url = serve_url, upstream_url
        self.messages: list[dict[str, Any]] = []
        self.http = httpx.Client(trust_env=False, timeout=300.0)
        self.store = LedgerStore(floor_ledger)
        self.headers = {"Authorization": f"Bearer {CLIENT_KEY}", "x-vak-session": SESSION}

    def close(self) -> None:
        self.http.close()
        self.store.close()

    def body(self, stream: bool) -> dict[str, Any]:
        body: dict[str, Any] = {"model": "scripted", "messages": [{"role": "system", "content": SYSTEM}, *self.messages],
                                "tools": TOOLS}
        if stream:
            body.update(stream=True, stream_options={"include_usage": True})
        return body

    def through_serve(self, body: dict[str, Any]) -> tuple[float, str, list[tuple[str, str, dict[str, Any]]]]:
        url = f"{self.serve_url}/chat/completions"
        start = time.perf_counter()
        if body.get("stream"):
            with self.http.stream("POST", url, json=body, headers=self.headers) as response:
                lines = list(response.iter_lines())
            elapsed = time.perf_counter() - start
            if response.status_code != 200:
                raise RuntimeError(f"vak serve answered {response.status_code}: {lines[:3]}")
            text, calls = parse_sse(lines)
        else:
            response = self.http.post(url, json=body, headers=self.headers)
            reply = response.json()
            elapsed = time.perf_counter() - start
            if response.status_code != 200:
                raise RuntimeError(f"vak serve answered {response.status_code}: {reply}")
            text, calls = parse_reply(reply)
        return 1000 * elapsed, text, calls

    def direct(self, body: dict[str, Any]) -> float:
        url = f"{self.upstream_url}/chat/completions"
        start = time.perf_counter()
        if body.get("stream"):
            with self.http.stream("POST", url, json=body) as response:
                for _ in response.iter_lines():  # to the last chunk, as through the server
                    pass
        else:
            response = self.http.post(url, json=body)
            response.json()
        elapsed = time.perf_counter() - start
        if response.status_code != 200:
            raise RuntimeError(f"the upstream answered {response.status_code}")
        return 1000 * elapsed

    def floor(self, body: dict[str, Any]) -> tuple[float, int]:
        raw = json.dumps(body).encode()
        last = body["messages"][-1].get("content") or ""
        start = time.perf_counter()
        json.dumps(json.loads(raw))
        self.store.append("floor", [Directive(text=str(last))])
        return 1000 * (time.perf_counter() - start), len(raw)

    def request(self, stream: bool, timed: bool) -> tuple[str, list[tuple[str, str, dict[str, Any]]], Sample | None]:
        body = self.body(stream)
        serve_ms, text, calls = self.through_serve(body)
        sample = None
        if timed:
            floor_ms, chars = self.floor(body)
            sample = Sample(serve_ms, self.direct(body), floor_ms, chars)
        entry: dict[str, Any] = {"role": "assistant", "content": text or None}
        if calls:
            entry["tool_calls"] = [{"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
                                   for i, n, a in calls]
        self.messages.append(entry)
        return text, calls, sample

    def turn(self, number: int, stream: bool, timed: bool) -> list[Sample]:
        self.messages.append({"role": "user", "content": directive(number)})
        samples: list[Sample] = []
        for _ in range(4):  # a call, then the answer (a bound, so a broken server fails instead of looping)
            text, calls, sample = self.request(stream, timed)
            samples += [sample] if sample is not None else []
            if not calls:
                if not text.startswith("Done:"):
                    raise RuntimeError(f"turn {number}: the answer was {text!r}")
                return samples
            self.messages += [{"role": "tool", "tool_call_id": i, "content": run_tool(n, a)} for i, n, a in calls]
        raise RuntimeError(f"turn {number} did not end in 4 requests")


def measure(size: int, turns: int, root: Path) -> list[Row]:
    """A fresh server, ledger and upstream; turns 1 .. size-1 untimed, then ``turns`` timed ones."""
    model = WireModel(FORMATS["openai"])
    rows = {mode: Row(size, mode) for mode in ("plain", "streaming")}
    with serve(model.handle) as upstream, running(root / "ledger", "openai-compat:scripted", upstream.base_url,
                                                  window=WINDOW) as server:
        bench = Bench(server.base_url, upstream.base_url, root / "floor")
        try:
            for number in range(1, size):
                bench.turn(number, stream=False, timed=False)
                if number % 20 == 0:  # the scripted model keeps every body it saw: dropped, it holds no memory
                    model.requests.clear()
                    model.sent.clear()
            for i in range(turns):
                row = rows["streaming" if i % 2 else "plain"]
                row.samples += bench.turn(size + i, stream=row.mode == "streaming", timed=True)
        finally:
            bench.close()
    return list(rows.values())


def table(rows: list[Row]) -> str:
    lines = [f"{'turns':>6} {'mode':>9} {'reqs':>4} {'body kB':>7} {'serve p50':>9} {'direct p50':>10}"
             f" {'added p50':>9} {'added p95':>9} {'floor p50':>9} {'ratio':>6}"]
    for r in rows:
        lines.append(f"{r.turns:>6} {r.mode:>9} {len(r.samples):>4} {r.p('body_chars', 0.5) / 1000:>7.0f}"
                     f" {r.p('serve_ms', 0.5):>9.2f} {r.p('direct_ms', 0.5):>10.2f} {r.added_p50:>9.2f}"
                     f" {r.p('added_ms', 0.95):>9.2f} {r.floor_p50:>9.2f} {r.ratio:>5.1f}x")
    lines.append("ms per request; turns = timed from turn N (turns 1..N-1 held first); added = through vak serve - direct; "
                 "floor = json.loads + json.dumps of the body + one durable append; ratio = added p50 / floor p50")
    return "\n".join(lines)


def verdicts(rows: list[Row]) -> list[str]:
    top = max(r.turns for r in rows)
    out = []
    for r in (r for r in rows if r.turns == top):
        met = "met" if r.added_p50 <= GOAL_MS else "not met"
        out.append(f"{r.mode} at {top} turns: {r.added_p50:.2f} ms added at p50 (p95 {r.p('added_ms', 0.95):.2f}; "
                   f"goal <= {GOAL_MS:.0f} ms, {r.added_p50 / GOAL_MS:.2f}x the goal): {met}; "
                   f"{r.ratio:.1f}x the floor ({r.floor_p50:.2f} ms)")
    return out


def main(argv: list[str] | None = None) -> list[Row]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="turn numbers to time at, comma-separated")
    parser.add_argument("--turns", type=int, default=20, help="timed turns per size, alternately plain and streaming")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    if not sizes or min(sizes) < 1 or args.turns < 1:
        parser.error("--sizes are turn numbers from 1, and --turns at least 1")
    with tempfile.TemporaryDirectory(prefix="vak-bench-serve-") as tmp:
        rows = [row for size in sorted(set(sizes)) for row in measure(size, args.turns, Path(tmp) / str(size))]
    print(table(rows))
    lines = verdicts(rows)
    for line in lines:
        print(line)
    print("summary: " + "; ".join(lines))
    return rows


if __name__ == "__main__":
    main()
