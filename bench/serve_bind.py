"""What binding a session costs in `vak serve` on a big ledger: a new session's first request, and sessions
resumed after a restart, on a 20 MB ledger beside the same on an empty one, in one run (issue 35, item 2).

Binding reads the newest profile recorded for the model from the ledger's index (storage/ledger_index.py),
a small file per session; before the index it read every entry of every session, on the event loop, for each
new session and each session after a restart (3.2 s for a new session's first request on a 20 MB ledger,
0.46 s on an empty one).

The ledger: ``--sessions`` conversations held through ``vak serve`` (an OpenAI-protocol client with httpx, the
tests' scripted upstream on 127.0.0.1: tests/fakes/wire_models.py), ``--turns`` turns each, every turn a tool
call whose result is a 10k-character search or a command's output; then other sessions, written straight to
the folder, of turns that each hold a 32 KB tool result and a ``capacity_profile`` entry, until the folder's
segments hold ``--mb`` MB on disk. The empty ledger: a fresh folder. Both are served side by side, each by
its own ``vak serve`` (its Starlette app under uvicorn, an engine in this process).

- **New session**: ``--new`` times, one request of a new session (a new ``x-vak-session``, one user message,
  the upstream answers at once) to each server in turn, timed from send to reply; after one untimed request
  to each. Goal: the median on the big ledger within 50 ms of the median on the empty one.
- **Resumed after a restart**: the big ledger's server is stopped (closed cleanly: ``--crash`` instead
  serves a copy of its folder taken while it ran, what a SIGKILL leaves) and a new one started on it; then
  every held conversation sends its next turn's first request at once, from a thread each; timed from the
  first send to the last reply. The same requests' time again right after (the sessions bound, the upstream
  as busy) is printed beside it: the difference is what binding them again cost. Goal: all resumed in 1 s.

    .venv/bin/python bench/serve_bind.py                        # 16 sessions, 20 MB, 8 new sessions
    .venv/bin/python bench/serve_bind.py --crash                # resumed from a crash image instead
    .venv/bin/python bench/serve_bind.py --sessions 2 --turns 1 --mb 1 --new 2   # a smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx

from tests.fakes.httpserver import serve
from tests.fakes.serve_clients import SCHEMAS, SYSTEM, run_tool
from tests.fakes.vak_server import CLIENT_KEY, running
from tests.fakes.wire_models import FORMATS, WireModel
from vak_context.events.payloads import CapacityProfileRecord, Directive, EvidenceBody
from vak_context.storage.ledger import LedgerStore

NEW_GOAL_MS = 50.0  # a new session's first request: added over the empty ledger's
RESUME_GOAL_S = 1.0  # every held session's first request after a restart, all of them
WINDOW = 16_000
TOOLS = [{"type": "function", "function": {"name": n, "description": d, "parameters": s}} for n, (d, s) in SCHEMAS.items()]
RESULT_BYTES = 32 * 1024  # a filler turn's tool result


def directive(turn: int) -> str:
    return f"run make check-{turn}" if turn % 2 == 0 else f"search query-{turn:03d}"


class Conversation:
    """One client conversation: its session name and the whole history it sends with every request."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.messages: list[dict[str, Any]] = []

    def post(self, http: httpx.Client, url: str) -> tuple[float, str, list[tuple[str, str, dict[str, Any]]]]:
        body = {"model": "scripted", "messages": [{"role": "system", "content": SYSTEM}, *self.messages], "tools": TOOLS}
        start = time.perf_counter()
        response = http.post(f"{url}/chat/completions", json=body,
                             headers={"Authorization": f"Bearer {CLIENT_KEY}", "x-vak-session": self.name})
        elapsed = time.perf_counter() - start
        if response.status_code != 200:
            raise RuntimeError(f"session {self.name}: vak serve answered {response.status_code}: {response.text[:300]}")
        message = response.json()["choices"][0]["message"]
        calls = [(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
                 for c in message.get("tool_calls") or ()]
        return elapsed, message.get("content") or "", calls

    def answer(self, text: str, calls: list[tuple[str, str, dict[str, Any]]]) -> None:
        entry: dict[str, Any] = {"role": "assistant", "content": text or None}
        if calls:
            entry["tool_calls"] = [{"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
                                   for i, n, a in calls]
        self.messages.append(entry)
        self.messages += [{"role": "tool", "tool_call_id": i, "content": run_tool(n, a)} for i, n, a in calls]

    def turn(self, http: httpx.Client, url: str, number: int) -> None:
        self.messages.append({"role": "user", "content": directive(number)})
        for _ in range(4):
            _, text, calls = self.post(http, url)
            self.answer(text, calls)
            if not calls:
                return
        raise RuntimeError(f"session {self.name}: turn {number} did not end in 4 requests")


def disk_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in (root / "sessions").rglob("*seg-*.arrow"))


def fill(root: Path, mb: float) -> int:
    """Sessions of turns (a directive, a 32 KB tool result, a capacity_profile) written straight to the
    folder until its segments hold ``mb`` MB; the entries written."""
    rng = __import__("random").Random(35)
    words = [f"w{n:04d}" for n in range(4000)]
    entries = 0
    with LedgerStore(root) as store:
        turn = 0
        while disk_bytes(root) < mb * 1e6:
            for _ in range(40):
                session = f"filler-{turn % 16:02d}"
                body = " ".join(rng.choices(words, k=RESULT_BYTES // 6)).encode()
                store.append(session, [Directive(text=f"turn {turn}: look it up"),
                                       EvidenceBody(tool_use_id=f"t{turn}", tool_name="search", encoding="utf-8",
                                                    chars=len(body), bytes=len(body)),
                                       profile(turn)], blobs=[None, body, None])
                entries += 3
                turn += 1
            store.checkpoint()
    return entries


def profile(turn: int) -> CapacityProfileRecord:
    return CapacityProfileRecord(provider="openai", model=f"gpt-filler-{turn % 4}", declared_window=128_000,
                                 instruction_horizon={"tokens": 32_000, "confidence": 0.5, "last_confirmed": 0.0},
                                 tokens_per_char={"value": 0.27, "samples": turn + 1}, output_reserve=4096)


def new_sessions(servers: dict[str, str], http: httpx.Client, count: int) -> dict[str, list[float]]:
    """``count`` new sessions' first requests to each server in turn (after one untimed each); ms each."""
    times: dict[str, list[float]] = {name: [] for name in servers}
    for i in range(count + 1):
        for name, url in servers.items():
            conversation = Conversation(f"new-{i:03d}")
            conversation.messages.append({"role": "user", "content": "say hello"})
            elapsed, _, _ = conversation.post(http, url)
            if i:
                times[name].append(1000 * elapsed)
    return times


def resume(conversations: list[Conversation], url: str, turn: int) -> float:
    """Each conversation's next turn's first request, from a thread each, at once: seconds to the last reply."""
    errors: list[BaseException] = []
    results: list[tuple[Conversation, str, list[tuple[str, str, dict[str, Any]]]]] = []
    start = threading.Barrier(len(conversations) + 1)

    def one(conversation: Conversation) -> None:
        with httpx.Client(trust_env=False, timeout=300.0) as http:
            start.wait()
            try:
                _, text, calls = conversation.post(http, url)
                results.append((conversation, text, calls))
            except BaseException as exc:
                errors.append(exc)

    for c in conversations:
        c.messages.append({"role": "user", "content": directive(turn)})
    threads = [threading.Thread(target=one, args=(c,)) for c in conversations]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise errors[0]
    for conversation, text, calls in results:
        conversation.answer(text, calls)
    return elapsed


def finish(conversations: list[Conversation], http: httpx.Client, url: str) -> None:
    """Each conversation's open turn driven to its answer (so the next resume starts a new turn)."""
    for c in conversations:
        for _ in range(4):
            if c.messages[-1]["role"] == "assistant" and not c.messages[-1].get("tool_calls"):
                break
            _, text, calls = c.post(http, url)
            c.answer(text, calls)


def measure(root: Path, sessions: int, turns: int, mb: float, new: int, crash: bool) -> dict[str, Any]:
    big, empty = root / "big", root / "empty"
    model = WireModel(FORMATS["openai"])
    conversations = [Conversation(f"held-{i:02d}") for i in range(sessions)]
    out: dict[str, Any] = {}
    with serve(model.handle) as upstream, httpx.Client(trust_env=False, timeout=300.0) as http:
        spec = ("openai-compat:scripted", upstream.base_url)
        with running(big, *spec, window=WINDOW) as server:
            for number in range(1, turns + 1):
                for c in conversations:
                    c.turn(http, server.base_url, number)
                model.requests.clear()
                model.sent.clear()
            if crash:  # the folder as a SIGKILL leaves it: tails open, nothing closed
                idle(server)
                # Not the search indexes: a cache of the entries (rebuilt from them), whose temporary files a
                # live catch-up makes and removes while the copy runs.
                copy_live(big, root / "crashed")
        if crash:
            big = root / "crashed"
        out["filler_entries"] = fill(big, mb)
        out["mb"] = disk_bytes(big) / 1e6
        with ExitStack() as stack:
            restarted = stack.enter_context(running(big, *spec, window=WINDOW))
            fresh = stack.enter_context(running(empty, *spec, window=WINDOW))
            out["resume_s"] = resume(conversations, restarted.base_url, turns + 1)
            finish(conversations, http, restarted.base_url)
            out["again_s"] = resume(conversations, restarted.base_url, turns + 2)
            finish(conversations, http, restarted.base_url)
            for server in (restarted, fresh):  # the search indexes the turns' closes queued: caught up first
                idle(server)
            out["new_ms"] = new_sessions({"big": restarted.base_url, "empty": fresh.base_url}, http, new)
        out["lookup_ms"] = {name: lookup_ms(folder) for name, folder in (("big", big), ("empty", empty))}
    return out


def copy_live(source: Path, target: Path) -> None:
    """``source`` copied while its server runs, as a SIGKILL would leave it: copied again when a file went
    away under the copy (the card index's timed commit replaces its files: a cache, like the search indexes,
    which are left out)."""
    for attempt in range(5):
        try:
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("_search"))
            return
        except shutil.Error:
            shutil.rmtree(target, ignore_errors=True)
            if attempt == 4:
                raise


def idle(server: Any) -> None:
    """Wait until the server's ledger has no search-index catch-up queued or running (storage/catchup.py),
    so that one ledger's background work does not land in the other's timings."""
    server.server.config.app.state.server.engine.index_idle()


def lookup_ms(root: Path) -> tuple[float, float, int]:
    """Binding's profile lookup alone (``LedgerStore.profile_entry`` for the served model, what
    ``engine/binding.py`` runs in a worker thread) in a store that has read nothing yet, then the median of 5
    more (its index reads cached); and the sessions it looked across."""
    with LedgerStore(root, readonly=True) as store:
        start = time.perf_counter()
        store.profile_entry("openai-compat", "scripted")
        cold = 1000 * (time.perf_counter() - start)
        warm = []
        for _ in range(5):
            start = time.perf_counter()
            store.profile_entry("openai-compat", "scripted")
            warm.append(1000 * (time.perf_counter() - start))
        return cold, statistics.median(warm), len(store.sessions())


def scan_seconds(root: Path) -> float:
    """What binding read before the index: every entry of every session, the profiles decoded."""
    from vak_context.events.envelope import Mapper

    mapper = Mapper()
    start = time.perf_counter()
    with LedgerStore(root, readonly=True) as store:
        for session in store.sessions():
            for entry in store.entries(session):
                if entry.kind == "capacity_profile":
                    mapper.payload_of(entry)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=16, help="conversations held through vak serve")
    parser.add_argument("--turns", type=int, default=3, help="turns each holds before the restart")
    parser.add_argument("--mb", type=float, default=20.0, help="the big ledger's segments on disk, MB")
    parser.add_argument("--new", type=int, default=8, help="new sessions timed on each ledger")
    parser.add_argument("--crash", action="store_true", help="resume from a copy taken while the server ran")
    parser.add_argument("--no-scan", action="store_true", help="skip timing the scan binding did before the index")
    args = parser.parse_args(argv)
    if min(args.sessions, args.turns, args.new) < 1 or args.mb <= 0:
        parser.error("--sessions, --turns and --new are at least 1, --mb above 0")
    with tempfile.TemporaryDirectory(prefix="vak-bench-bind-") as tmp:
        out = measure(Path(tmp), args.sessions, args.turns, args.mb, args.new, args.crash)
        if not args.no_scan:
            out["scan_s"] = scan_seconds(Path(tmp) / ("crashed" if args.crash else "big"))
    big, empty = statistics.median(out["new_ms"]["big"]), statistics.median(out["new_ms"]["empty"])
    added = big - empty
    print(f"ledger: {out['mb']:.1f} MB on disk, {args.sessions} sessions held through vak serve ({args.turns} turns "
          f"each) and {out['filler_entries']} entries written beside them; load {os.getloadavg()[0]:.1f}")
    print(f"new session's first request, median of {args.new}: {big:.1f} ms on the big ledger, {empty:.1f} ms on "
          f"the empty one (each: {', '.join(f'{v:.0f}' for v in out['new_ms']['big'])} / "
          f"{', '.join(f'{v:.0f}' for v in out['new_ms']['empty'])})")
    how = "a crash image" if args.crash else "a clean stop"
    print(f"{args.sessions} sessions resumed after a restart from {how}, all at once: {out['resume_s']:.3f} s "
          f"(the same requests again, bound: {out['again_s']:.3f} s)")
    for name in ("big", "empty"):
        cold, warm, count = out["lookup_ms"][name]
        print(f"binding's profile lookup on the {name} ledger ({count} sessions): {cold:.1f} ms in a new store, "
              f"{warm:.2f} ms after")
    if "scan_s" in out:
        print(f"the scan binding did before the index (every entry of every session): {out['scan_s']:.2f} s")
    lines = [f"new session +{added:.1f} ms over the empty ledger (goal <= {NEW_GOAL_MS:.0f} ms: "
             f"{'met' if added <= NEW_GOAL_MS else 'not met'}; {added / NEW_GOAL_MS:.2f}x the goal)",
             f"{args.sessions} resumed in {out['resume_s']:.2f} s (goal <= {RESUME_GOAL_S:.0f} s: "
             f"{'met' if out['resume_s'] <= RESUME_GOAL_S else 'not met'}; {out['resume_s'] / RESUME_GOAL_S:.2f}x the goal)"]
    print("summary: " + "; ".join(lines))
    out["added_ms"] = added
    return out


if __name__ == "__main__":
    main()
