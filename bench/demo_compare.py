"""The demo's own questions with the engine and without it (issue 36 item 3).

`vak run` asks the bundled model three questions about the workspace (``cli/mainjob.py``'s ``LIVE_DIRECTIVES``)
and scores the answers mechanically (``cli/demoscore.py``). This bench asks the same three questions of the same
model, in one session each run, two ways, and scores both with that scorer:

* ``engine``: an ``Engine.session`` with exactly the live turns' settings (``live_session_options``: the
  6,144-token window, the workspace tools, card tools, 4 steps a turn, 128 tokens a step, the repeated-call
  rule ``close``), in this process rather than on Ray (the turn is the one implementation both drivers run);
  the session's profile is the quick probe ladder's, measured first as `vak run` measures it (``--horizon N``
  skips the probe and plans under N).
* ``plain``: a plain loop, no engine: a one-line system prompt, the three workspace tools
  (``read_file``, ``list_dir``, ``grep``: the engine's own schemas and implementation, ``agent/workspace.py``)
  as OpenAI ``tools``, the whole conversation resent each step, temperature 0, the same 4 steps a turn and 128
  tokens a step. A call is a native ``tool_call`` or one written in the text (the engine's one parser,
  ``parse_tool_calls``: the bundled Qwen writes its calls in a fence, so a loop that read only ``tool_calls``
  would score nothing and say nothing about the projection); its result goes back as a ``tool`` message. A turn
  that has not answered in text after 4 steps, or whose request the server refuses, is ``failed`` (wrong).

Printed: per question, right answers out of the runs in each mode; the totals and engine / plain; per run the
outcome, steps, prompt tokens a step and the answer. ``--dump DIR`` writes every request each mode sent (one
JSON body a line, per mode and run) to read what the model was shown.

    .venv/bin/python bench/demo_compare.py --upstream scripted --runs 2     # seconds: the harness itself
    nice -n 10 .venv/bin/python bench/demo_compare.py --upstream local:qwen1.5b --runs 3 --dump /tmp/demo-dump
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.fakes, for --upstream scripted

from vak_context.agent.workspace import Workspace
from vak_context.cli.demoscore import DEMO_CHECKS, score_answers, workspace_facts
from vak_context.cli.mainjob import LIVE_DIRECTIVES, demo_setup, live_session_options
from vak_context.context.request.toolcalls import parse_tool_calls
from vak_context.errors import ToolFailure

MODES = ("engine", "plain")
PLAIN_SYSTEM = ("You are a coding agent. The user's workspace is a folder you can read with the tools read_file, "
                "list_dir and grep. Use them when you need to, then answer.")
SCRIPTED_MODEL = "demo-reader"


@dataclass
class Answer:
    directive: str
    check: str
    outcome: str
    answer: str
    steps: int
    prompt_tokens: list[int]
    seconds: float
    right: bool = False
    reason: str = ""


@dataclass
class Run:
    mode: str
    run: int
    answers: list[Answer]
    seconds: float
    requests: list[dict[str, Any]] = field(default_factory=list)

    @property
    def right(self) -> int:
        return sum(a.right for a in self.answers)


@dataclass(frozen=True)
class Upstream:
    """Where both modes send their requests: the engine's model spec for it, its base URL and key."""

    spec: str  # local:<model> or openai-compat:<model>
    model: str  # the name in a request body
    base_url: str
    api_key: str


def openai_tools() -> list[dict[str, Any]]:
    """The workspace tools as OpenAI ``tools``: the engine's own schemas (agent/workspace.py)."""
    return [{"type": "function", "function": {"name": t.spec.name, "description": t.spec.description,
                                              "parameters": t.spec.input_schema}} for t in Workspace(".").tools]


class PlainLoop:
    """One conversation with the model, no engine: every step resends the whole history."""

    def __init__(self, client: httpx.Client, upstream: Upstream, workspace: Path, *, max_steps: int,
                 max_tokens: int) -> None:
        self.client, self.upstream, self.workspace = client, upstream, Workspace(workspace)
        self.max_steps, self.max_tokens = max_steps, max_tokens
        self.tools = openai_tools()
        self.names = [t["function"]["name"] for t in self.tools]
        self.messages: list[dict[str, Any]] = [{"role": "system", "content": PLAIN_SYSTEM}]
        self.requests: list[dict[str, Any]] = []
        self._ids = 0

    def run(self, directive: str) -> Answer:
        started, before = time.perf_counter(), len(self.messages)
        self.messages.append({"role": "user", "content": directive})
        tokens: list[int] = []
        outcome, answer = "failed", ""
        for _ in range(self.max_steps):
            body = {"model": self.upstream.model, "messages": self.messages, "tools": self.tools,
                    "temperature": 0, "max_tokens": self.max_tokens}
            self.requests.append(json.loads(json.dumps(body)))
            reply = self.client.post(f"{self.upstream.base_url}/chat/completions", json=body,
                                     headers={"Authorization": f"Bearer {self.upstream.api_key}"})
            if reply.status_code != 200:  # e.g. llama.cpp's exceed_context_size_error: the turn cannot go on
                answer = f"(HTTP {reply.status_code}: {reply.text[:200]})"
                del self.messages[before:]  # the next turn starts from a history the server accepted
                break
            data = reply.json()
            tokens.append(int((data.get("usage") or {}).get("prompt_tokens") or 0))
            message = data["choices"][0]["message"]
            text = message.get("content") or ""
            calls = [(c["id"], c["function"]["name"], c["function"].get("arguments") or "{}")
                     for c in message.get("tool_calls") or []]
            if not calls:
                calls = [(self._id(), c.name, json.dumps(c.arguments)) for c in parse_tool_calls(text, self.names)
                         if c.complete and c.name in self.names and c.arguments is not None]
            if not calls:
                self.messages.append({"role": "assistant", "content": text})
                outcome, answer = "completed", text
                break
            self.messages.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": i, "type": "function", "function": {"name": n, "arguments": a}} for i, n, a in calls]})
            for call_id, name, arguments in calls:
                self.messages.append({"role": "tool", "tool_call_id": call_id, "content": self._call(name, arguments)})
        return Answer(directive, DEMO_CHECKS[directive], outcome, answer, len(tokens), tokens,
                      round(time.perf_counter() - started, 1))

    def _id(self) -> str:
        self._ids += 1
        return f"call_plain_{self._ids}"

    def _call(self, name: str, arguments: str) -> str:
        try:
            args = json.loads(arguments)
            return self.workspace.call(name, args)
        except (ToolFailure, json.JSONDecodeError) as exc:
            return f"error: {exc}"


def run_plain(upstream: Upstream, workspace: Path, directives: Sequence[str], model: str, run: int,
              out: Callable[[str], None] = print) -> Run:
    setup = demo_setup(model)
    started = time.perf_counter()
    with httpx.Client(trust_env=False, timeout=1800.0) as client:
        loop = PlainLoop(client, upstream, workspace, max_steps=live_session_options(model, None, None, workspace)
                         ["max_steps"], max_tokens=setup.max_tokens)
        answers = []
        for directive in directives:
            answers.append(loop.run(directive))
            out(f"  plain: {answers[-1].check} {answers[-1].outcome} after {answers[-1].steps} step(s), prompt tokens "
                f"{answers[-1].prompt_tokens}")
    return Run("plain", run, answers, round(time.perf_counter() - started, 1), loop.requests)


def run_engine(engine: Any, upstream: Upstream, workspace: Path, directives: Sequence[str], model: str, run: int,
               horizon: int | None, variant: dict[str, str] | None = None,
               out: Callable[[str], None] = print) -> Run:
    """One engine run; ``variant``: ``stance`` and/or ``identity`` for the session (the public keywords), to find
    what in the projection costs an answer."""
    from vak_context.cli.chat import step_line

    requests: list[dict[str, Any]] = []

    async def keep(request: httpx.Request) -> None:
        if request.url.path.endswith("/chat/completions"):
            requests.append(json.loads(request.content))

    async def go() -> list[Answer]:
        options = {**live_session_options(model, upstream.base_url, upstream.api_key, workspace),
                   "model": upstream.spec, "horizon": horizon, **(variant or {})}
        if not upstream.spec.startswith("local:"):  # calls read from the text too, as for the bundled Qwen
            options["calls"] = "text"
        answers = []
        async with httpx.AsyncClient(trust_env=False, timeout=1800.0, event_hooks={"request": [keep]}) as client:
            async with engine.session(f"demo-engine-{run}", **options, http_client=client,
                                      on_step=lambda s: out(step_line(s))) as session:
                for directive in directives:
                    started = time.perf_counter()
                    result = await session.run(directive)
                    answers.append(Answer(directive, DEMO_CHECKS[directive], result.outcome, result.answer,
                                          len(result.steps), [s.prompt_tokens for s in result.steps],
                                          round(time.perf_counter() - started, 1)))
        return answers

    started = time.perf_counter()
    answers = asyncio.run(go())
    return Run("engine", run, answers, round(time.perf_counter() - started, 1), requests)


def score(run: Run, workspace: Path) -> Run:
    entries, readme = workspace_facts(workspace)
    scored = score_answers([(a.directive, a.answer, a.outcome) for a in run.answers], entries, readme)
    assert scored is not None
    for answer, verdict in zip(run.answers, scored.verdicts, strict=True):
        answer.right, answer.reason = verdict.right, verdict.reason
    return run


def table(runs: Sequence[Run], directives: Sequence[str]) -> str:
    """The per-question table: right answers out of the runs in each mode, the totals and engine / plain."""
    per = {m: [r for r in runs if r.mode == m] for m in MODES}
    lines = ["| question | engine | plain |", "| --- | --- | --- |"]
    for i, directive in enumerate(directives):
        cells = [f"{sum(r.answers[i].right for r in per[m])}/{len(per[m])}" for m in MODES]
        lines.append(f"| {DEMO_CHECKS[directive]} | {' | '.join(cells)} |")
    totals = {m: sum(r.right for r in per[m]) for m in MODES}
    of = {m: len(per[m]) * len(directives) for m in MODES}
    lines.append(f"| total | {totals['engine']}/{of['engine']} | {totals['plain']}/{of['plain']} |")
    ratio = f"{totals['engine'] / totals['plain']:.2f}" if totals["plain"] else ("n/a (plain scored 0)")
    lines.append(f"\nengine / plain: {ratio} ({totals['engine']} against {totals['plain']} right answers, "
                 f"{len(per['engine'])} engine run(s), {len(per['plain'])} plain run(s))")
    return "\n".join(lines)


def details(runs: Sequence[Run]) -> str:
    lines = ["| mode | run | question | verdict | outcome | steps | prompt tokens | s | answer |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in runs:
        for a in r.answers:
            said = " ".join(a.answer.split())[:100].replace("|", "\\|")
            lines.append(f"| {r.mode} | {r.run} | {a.check} | {'right' if a.right else 'wrong'} | {a.outcome} | "
                         f"{a.steps} | {','.join(map(str, a.prompt_tokens))} | {a.seconds} | {said} |")
    return "\n".join(lines)


@contextmanager
def upstream_for(spec: str, stack: ExitStack) -> Iterator[tuple[Upstream, str]]:
    """The upstream and the demo model name whose settings apply (``qwen1.5b`` for the scripted one)."""
    if spec in ("scripted", "scripted-fenced"):
        from tests.fakes.demo_reader import DemoReader
        from tests.fakes.httpserver import serve

        server = stack.enter_context(serve(DemoReader(fenced=spec == "scripted-fenced").handle))
        yield Upstream(f"openai-compat:{SCRIPTED_MODEL}", SCRIPTED_MODEL, server.base_url, "scripted-key"), "qwen1.5b"
        return
    if not spec.startswith("local:"):
        raise SystemExit(f"--upstream must be scripted, scripted-fenced or local:MODEL (got {spec!r})")
    from vak_context.providers.local.catalogue import canonical_model
    from vak_context.providers.local.server import LocalModelServer

    model = spec.split(":", 1)[1]
    local = stack.enter_context(LocalModelServer(canonical_model(model), n_ctx=demo_setup(model).n_ctx))
    yield Upstream(spec, canonical_model(model), local.base_url, local.api_key), model


def main(argv: list[str] | None = None, out: Callable[[str], None] = print) -> list[Run]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--upstream", default="local:qwen1.5b",
                    help="local:MODEL (the bundled model), or scripted / scripted-fenced (tests/fakes/demo_reader.py, "
                         "its calls native / in a fence in the text as the bundled Qwen writes them)")
    ap.add_argument("--runs", type=int, default=3, help="runs of the three questions in each mode")
    ap.add_argument("--modes", default=",".join(MODES), help="engine,plain (the order they alternate in)")
    ap.add_argument("--workspace", type=Path, default=Path(__file__).resolve().parent.parent,
                    help="the folder the questions are about (default: this repository, as `vak run` in its root)")
    ap.add_argument("--horizon", type=int, default=None,
                    help="plan the engine's sessions under this horizon instead of probing the local model first")
    ap.add_argument("--stance", default=None, help="the engine sessions' stance (default: the engine's)")
    ap.add_argument("--identity", default=None, help="the engine sessions' identity layer (default: the engine's)")
    ap.add_argument("--ledger", type=Path, default=None, help="the engine's ledger folder (default: a temporary one)")
    ap.add_argument("--dump", type=Path, default=None, help="write each mode's and run's requests here (JSONL)")
    ap.add_argument("--json", type=Path, default=None, help="write every run's answers and verdicts here")
    args = ap.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    if not modes or set(modes) - set(MODES) or args.runs < 1:
        raise SystemExit(f"--modes takes {', '.join(MODES)}; --runs at least 1")
    from vak_context import Engine

    workspace = args.workspace.resolve()
    runs: list[Run] = []
    with ExitStack() as stack:
        ledger = args.ledger or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="demo-compare-")))
        upstream, model = stack.enter_context(upstream_for(args.upstream, stack))
        engine = stack.enter_context(Engine.open(ledger))
        if "engine" in modes and args.horizon is None and args.upstream.startswith("local:"):
            from vak_context.cli.mainjob import measure_profile

            client = engine.ledger()
            measure_profile(model, upstream.base_url, upstream.api_key,
                            lambda payload, blob: client.append("demo-compare-probe", [payload], blobs=[blob])[0], out)
        out(f"upstream {args.upstream}; workspace {workspace}; {args.runs} run(s) of {len(LIVE_DIRECTIVES)} "
            f"questions in {', '.join(modes)}")
        for i in range(1, args.runs + 1):
            for mode in modes:
                if mode == "engine":
                    variant = {k: v for k, v in (("stance", args.stance), ("identity", args.identity)) if v is not None}
                    run = run_engine(engine, upstream, workspace, LIVE_DIRECTIVES, model, i, args.horizon, variant, out)
                else:
                    run = run_plain(upstream, workspace, LIVE_DIRECTIVES, model, i, out)
                runs.append(score(run, workspace))
                out(f"{mode} run {i}: {run.right}/{len(run.answers)} in {run.seconds} s "
                    f"({', '.join(a.check + ' ' + ('right' if a.right else 'wrong') for a in run.answers)})")
                if args.dump:
                    args.dump.mkdir(parents=True, exist_ok=True)
                    with open(args.dump / f"{mode}-{i}.jsonl", "w", encoding="utf-8") as f:
                        f.writelines(json.dumps(b) + "\n" for b in run.requests)
                if args.json:
                    args.json.write_text(json.dumps([{k: v for k, v in asdict(r).items() if k != "requests"}
                                                     for r in runs], indent=1), encoding="utf-8")
    out("\n" + table(runs, LIVE_DIRECTIVES))
    out("\n" + details(runs))
    return runs


if __name__ == "__main__":
    main()
