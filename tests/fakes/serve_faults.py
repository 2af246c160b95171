"""What bench/serve_load.py does around its load, apart from the load: ``vak serve`` as a child process on
one port and ledger, SIGKILLed and restarted in place (its per-run key read at each start, the CPU of its
whole process tree sampled), ``vak verify``'s verdict in a line, every case of tests/fakes/bad_inputs.py
sent to it, and the ledger read back through the public API (``Engine.open``) for forks, duplicates and
acknowledged replies it lost."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil

from tests.fakes.bad_inputs import BadInput, bad_inputs, chunks
from vak_context.serve.child import ServeChild, serve_child

CONVERSATION = re.compile(r"\[c(\d+)-t\d+\]")  # a directive's tag names its conversation (bench/serve_load.py)


@dataclass
class Restart:
    killed_at: float  # perf_counter
    spawned_at: float
    health_at: float  # the restarted server's first /health 200
    verify_after_kill: str
    verify_after_restart: str = ""

    @property
    def startup_s(self) -> float:
        return self.health_at - self.spawned_at


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def verify(ledger: Path) -> str:
    """``vak verify --json``'s verdict in one line."""
    done = subprocess.run([sys.executable, "-m", "vak_context.cli", "verify", str(ledger), "--json"],
                          capture_output=True, text=True, timeout=600)
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        return f"FAILED (exit {done.returncode}): {(done.stdout + done.stderr).strip()[-300:]}"
    # One line per kind of note, with how many sessions it names (the notes name each session).
    kinds = Counter(re.sub(r"\d+", "N", re.sub(r"^session '[^']*': ", "", n))
                    for n in [*report.get("notes", ()), *report.get("search_index", ())])
    verdict = f"ok ({report.get('entries')} entries)" if report.get("ok") else f"FAILED: {report.get('first_bad')}"
    return verdict + "".join(f"; {n} session(s): {kind}" for kind, n in kinds.items())


class Server:
    """``vak serve`` on one port and ledger, restarted in place; ``key`` is the current run's."""

    def __init__(self, ledger: Path, upstream: str, window: int, extra: list[str]) -> None:
        self.ledger, self.upstream, self.window = ledger, upstream, window
        self.port = free_port()
        self.extra = ["--port", str(self.port), *extra]
        self.key = ""
        self.root = f"http://127.0.0.1:{self.port}"
        self.child: ServeChild | None = None
        self._stack: ExitStack | None = None
        self.cpu: dict[int, float] = {}  # pid -> CPU seconds last seen, over every process the server ran
        self.output: list[str] = []
        self._sampled = 0.0

    def start(self) -> tuple[float, float]:
        """(spawned at, first /health 200 at), perf_counter."""
        spawned = time.perf_counter()
        self._stack = ExitStack()
        self.child = self._stack.enter_context(serve_child("openai-compat:scripted", ledger=self.ledger,
                                                           base_url=self.upstream, window=self.window,
                                                           extra=self.extra))
        self.key = self.child.key  # read before the server listens: the first attempt that connects has it
        with httpx.Client(trust_env=False, timeout=5.0) as http:
            while True:
                if self.child.process.poll() is not None:
                    raise RuntimeError("vak serve exited while starting:\n" + "".join(self.child.output)[-2000:])
                try:
                    if http.get(f"{self.root}/health").status_code == 200:
                        return spawned, time.perf_counter()
                except httpx.TransportError:
                    pass
                time.sleep(0.01)  # polled: the first 200 is the event measured, nothing signals it

    def sample_cpu(self, force: bool = False) -> None:
        """The CPU seconds of every process of the server's tree so far (at most twice a second, unless
        ``force``: before a kill or stop, whose last half second would otherwise go uncounted)."""
        now = time.perf_counter()
        if self.child is None or (not force and now - self._sampled < 0.5):
            return
        self._sampled = now
        try:
            root = psutil.Process(self.child.process.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            return
        for p in procs:
            try:
                t = p.cpu_times()
                self.cpu[p.pid] = max(self.cpu.get(p.pid, 0.0), t.user + t.system)
            except psutil.Error:
                pass

    def kill(self) -> None:
        """SIGKILL to the server and every process it started (workers, a Ray it started): a crash of the
        whole server, not one of its parts; the harness waits for the server process itself."""
        assert self.child is not None and self._stack is not None
        self.sample_cpu(force=True)
        try:
            tree = [psutil.Process(self.child.process.pid)]
            tree += tree[0].children(recursive=True)
        except psutil.Error:
            tree = []
        for p in tree:
            try:
                p.send_signal(signal.SIGKILL)
            except psutil.Error:
                pass
        self.child.process.wait(60)
        psutil.wait_procs(tree[1:], timeout=60)
        self.output += self.child.output
        self._stack.close()
        self.child = None

    def stop(self) -> None:
        if self.child is not None and self._stack is not None:
            self.sample_cpu(force=True)
            self._stack.close()  # SIGTERM: a clean stop
            self.output += self.child.output
            self.child = None


@dataclass
class Acked:
    conv: int
    tag: str
    text: str
    call_ids: tuple[str, ...]


# ------------------------------------------------------------------ the ledger, read back


@dataclass
class Audit:
    sessions: int = 0
    forks: int = 0  # sessions beyond one per conversation, plus sessions not one chain
    not_one_chain: list[str] = field(default_factory=list)
    extra_sessions: dict[str, list[str]] = field(default_factory=dict)  # conversation -> its sessions, where > 1
    duplicate_steps: int = 0  # one reply (text or call id) in more than one assistant step of a session
    duplicate_results: int = 0  # one call's result stored more than once in a session
    # Of those, the copies the server itself marks: a step it withdrew (``history.withdrawn``), a result it
    # recorded again in the turn that continues it (``turn.earlier_step``'s ``stored_before``).
    duplicates_marked: int = 0
    duplicate_examples: list[str] = field(default_factory=list)
    lost: int = 0
    lost_examples: list[str] = field(default_factory=list)

    @property
    def duplicates(self) -> int:
        return self.duplicate_steps + self.duplicate_results


def audit(ledger: Path, acked: list[Acked]) -> Audit:
    """Forks, duplicates and lost acknowledged replies, read through the public API."""
    import vak_context

    out = Audit()
    engine = vak_context.Engine.open(ledger)
    try:
        store = engine.ledger()
        texts: dict[int, Counter[str]] = {}  # conversation -> step texts, over its sessions
        ids: dict[int, set[str]] = {}
        owners: dict[int, list[str]] = {}
        for name in store.sessions():
            out.sessions += 1
            entries = store.entries(name)
            if any(e.parent != (entries[i - 1].id if i else None) for i, e in enumerate(entries)):
                out.not_one_chain.append(name)
            convs: set[int] = set()
            steps: dict[str, list[str]] = {}  # a reply's text or call id -> the ids of the steps holding it
            results: dict[str, list[str]] = {}  # a call id -> the ids of the results stored for it
            withdrawn: set[str] = set()
            restated: set[str] = set()
            for e in entries:
                if e.kind not in ("directive", "assistant_step", "tool_result", "activity"):
                    continue
                payload = json.loads(e.payload)
                if e.kind == "directive":
                    convs |= {int(m.group(1)) for m in CONVERSATION.finditer(payload.get("text", ""))}
                elif e.kind == "assistant_step":
                    blocks = payload.get("blocks", ())
                    text = "".join(b.get("text", "") for b in blocks if b.get("type") == "text")
                    for key in [text] * bool(text) + [b["id"] for b in blocks if b.get("type") == "tool_use"]:
                        steps.setdefault(key, []).append(e.id)
                elif e.kind == "tool_result":
                    results.setdefault(payload.get("tool_use_id", ""), []).append(e.id)
                elif payload.get("activity") == "history.withdrawn":
                    withdrawn |= set(payload.get("detail", {}).get("steps") or ())
                elif payload.get("activity") == "turn.earlier_step":
                    restated |= set(payload.get("detail", {}).get("stored_before") or ())
            for conv in convs:
                owners.setdefault(conv, []).append(name)
                texts.setdefault(conv, Counter()).update({k: len(v) for k, v in steps.items()})
                ids.setdefault(conv, set()).update(steps)
            for what, held, attr in (("reply", steps, "duplicate_steps"), ("result", results, "duplicate_results")):
                for key, where in held.items():
                    n = len(where)
                    if n > 1 and (what == "result" or key.startswith(("Done:", "Answer:", "call_"))):
                        setattr(out, attr, getattr(out, attr) + n - 1)
                        marked = (n - 1 if key in restated else 0) if what == "result" else sum(i in withdrawn for i in where)
                        out.duplicates_marked += min(n - 1, marked)
                        if len(out.duplicate_examples) < 8:
                            out.duplicate_examples.append(f"{name}: {what} {key[:40]!r} x{n}")
        out.extra_sessions = {f"c{c:02d}": sorted(s) for c, s in owners.items() if len(s) > 1}
        out.forks = sum(len(s) - 1 for s in out.extra_sessions.values()) + len(out.not_one_chain)
        for a in acked:
            missing = [i for i in a.call_ids if i not in ids.get(a.conv, ())]
            if (a.text and texts.get(a.conv, Counter())[a.text] == 0) or missing:
                out.lost += 1
                if len(out.lost_examples) < 8:
                    out.lost_examples.append(f"{a.tag}: {a.text[:40]!r} {missing}")
    finally:
        engine.close()
    return out



# ------------------------------------------------------------------ bad input


def send_bad_inputs(server: Server, max_body: int) -> tuple[int, int, list[str]]:
    """(cases answered as the table expects, cases, what differed), the server checked alive after each."""
    cases = bad_inputs(max_body)
    wrong: list[str] = []
    with httpx.Client(timeout=120.0, trust_env=False) as http:
        for case in cases:
            got = _bad(http, server, case)
            alive = http.get(f"{server.root}/health").status_code == 200
            if got != case.status or not alive:
                wrong.append(f"{case.name}: {got} (expected {case.status}){'' if alive else '; the server stopped serving'}")
    return len(cases) - len(wrong), len(cases), wrong


def _bad(http: httpx.Client, server: Server, case: BadInput) -> int | str:
    headers = {k.encode(): v.encode() for k, v in case.header_list(server.key).items()}
    try:
        if case.method == "GET":
            return http.get(server.root + case.path, headers=headers).status_code
        content = chunks(case.body) if case.chunked else case.body
        return http.post(server.root + case.path, content=content, headers=headers).status_code
    except httpx.HTTPError as exc:
        return f"{type(exc).__name__}"


