"""Real agents direct and through the engine, side by side (issue 33, item 6).

Five agents from the package index, each on tasks of its own kind (tests/fakes/agent_tasks.py):
mini-swe-agent (bug fixes in a scratch repository, checked by running its tests), smolagents, pydantic-ai,
the OpenAI Agents SDK and LangChain (tool-using questions with known answers: a value "today", a 20+ KB
tool result, two tools in a row). Each task runs direct against the upstream and through the engine:
``vak serve`` (a child process, ``openai-compat:<model>`` in front of the same upstream) for every agent,
and the engine's adapter for pydantic-ai, the Agents SDK and LangChain (tests/fakes/agent_compare.py).

Printed per agent and mode: tasks solved, prompt tokens (from the request bodies the upstream received,
chars / 4 over messages and tools, the same count for every mode), upstream calls (the engine's summariser
calls counted, shown in brackets), wall time, and the ratios through the engine / direct. A question counts
as solved when each of its answers holds the values the task asks for (``QuestionTask.keys``); a bug fix
when the agent submitted and the repository's tests pass.

``--upstream scripted``: the scripted upstream of tests/fakes/agent_upstream.py (fast; it answers only from
what each request holds). ``--upstream local:MODEL``: the bundled model (llama.cpp's server, started once
for both modes; ``--n-ctx``), each agent given ``--max-tokens`` per reply (a direct client without a cap lets
the model run on: docs/INTEGRATIONS.md). On 2 cores a step of the 1.5B takes about a minute: pick agents and
tasks (``--agents``, ``--tasks``). The bundled Qwen writes its calls as fenced JSON in its reply, never as
Qwen's ``<tool_call>`` tag: under its own template (``--template model``) a framework that reads only native
calls (pydantic-ai, the Agents SDK, LangChain, mini-swe-agent) gets none from it, and ``vak serve --calls text``
parses them for the agent (mini-swe-agent then runs its documented text-based ``mini_textbased.yaml``). By
default the server runs the template ``vak serve-local`` gives an agent (``chatml_fence_tools.jinja``): it
renders calls as fences, so llama.cpp returns the model's fences as native tool calls, for every agent and mode.
``--dump FILE`` appends each run (agent, mode, task) as a JSON line: the request bodies the upstream
received, its replies and what the agent was handed, to see what a real model wrote and why an agent rejected it.

    .venv/bin/python bench/agents.py --upstream scripted                # every agent, 5 tasks (about 2 min)
    .venv/bin/python bench/agents.py --quick --upstream scripted        # the smoke test's size
    .venv/bin/python bench/agents.py --upstream local:qwen1.5b --agents smolagents --tasks 2
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from functools import partial
from pathlib import Path

# This file's name is the OpenAI Agents SDK's import name (`agents`): run as a script, its folder leaves
# sys.path, so `import agents` finds the SDK; the repository root goes in for tests.fakes.
HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
sys.path.insert(0, str(HERE.parent))

from tests.fakes.agent_compare import TaskRun, modes_of, run_agent  # noqa: E402
from tests.fakes.agent_runs import AGENTS  # noqa: E402
from tests.fakes.agent_tasks import BUGS, QUESTIONS, solves  # noqa: E402
from tests.fakes.agent_upstream import AgentUpstream, BugTask, QuestionTask  # noqa: E402
from tests.fakes.httpserver import serve  # noqa: E402


@dataclass
class Row:
    """One agent in one mode, over its tasks."""

    agent: str
    mode: str
    tasks: int
    solved: int
    prompt_tokens: int
    calls: int
    summaries: int
    wall_s: float
    sessions: int  # ledger sessions the tasks added (direct: none)


def tasks_for(agent: str, count: int) -> list[QuestionTask | BugTask]:
    tasks: Sequence[QuestionTask | BugTask] = BUGS if agent == "mini-swe-agent" else QUESTIONS
    return list(tasks[:count])


def rows_of(agent: str, runs: list[TaskRun]) -> list[Row]:
    rows = []
    for mode in dict.fromkeys(r.mode for r in runs):
        mine = [r for r in runs if r.mode == mode]
        rows.append(Row(agent, mode, len(mine), sum(solves(r.task, r.ran) for r in mine),
                        sum(r.prompt_tokens for r in mine), sum(r.upstream_calls for r in mine),
                        sum(len(r.summaries) for r in mine), sum(r.ran.wall_s for r in mine),
                        sum(len(r.sessions) for r in mine)))
    return rows


def table(rows: list[Row]) -> str:
    direct = {r.agent: r for r in rows if r.mode == "direct"}
    lines = ["| agent | mode | solved | prompt tokens | upstream calls (summaries) | wall s | sessions "
             "| tokens / direct | wall / direct |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        d = direct.get(r.agent)
        tokens = f"{r.prompt_tokens / d.prompt_tokens:.2f}" if d and d.prompt_tokens and r is not d else ""
        wall = f"{r.wall_s / d.wall_s:.2f}" if d and d.wall_s and r is not d else ""
        sessions = str(r.sessions) if r.mode != "direct" else ""
        lines.append(f"| {r.agent} | {r.mode} | {r.solved}/{r.tasks} | {r.prompt_tokens:,} | {r.calls} ({r.summaries}) "
                     f"| {r.wall_s:.1f} | {sessions} | {tokens} | {wall} |")
    return "\n".join(lines)


def progress(r: TaskRun, dump_to: Path | None = None) -> None:
    """One line as each task's run ends (a real model's run takes minutes a task); the run appended to
    ``dump_to`` where given (``--dump``)."""
    if dump_to is not None:
        dump(dump_to, r)
    verdict = "solved" if solves(r.task, r.ran) else f"not solved {r.ran.answers or r.ran.error}"[:200]
    print(f"  {r.agent} {r.mode} {r.task.name}: {verdict}; {r.prompt_tokens:,} prompt tokens, "
          f"{r.upstream_calls} upstream calls, {r.ran.wall_s:.1f} s", flush=True)


def dump(path: Path, r: TaskRun) -> None:
    """Append one run to ``path`` (JSON lines): each request body the upstream received and what it answered,
    in order, and what the agent was handed (through ``vak serve``: the engine's replies), to see what a real
    model wrote and why an agent rejected it."""
    record = {"agent": r.agent, "mode": r.mode, "task": r.task.name, "solved": solves(r.task, r.ran),
              "answers": r.ran.answers, "requests": r.requests, "summaries": r.summaries,
              "answered": [{"text": a.text, "calls": a.calls} for a in r.answered],
              "received": [{"text": a.text, "calls": a.calls} for a in r.received]}
    with path.open("a", encoding="utf-8") as out:
        out.write(json.dumps(record) + "\n")


def main(argv: list[str] | None = None) -> list[Row]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream", default="scripted", help="scripted, or local:MODEL (the bundled model)")
    parser.add_argument("--agents", default=",".join(AGENTS), help="comma-separated, of: " + ", ".join(AGENTS))
    parser.add_argument("--tasks", type=int, default=5, help="tasks per agent, from the first (at most 5)")
    parser.add_argument("--modes", default="", help="comma-separated, of direct, serve, adapter (default: all)")
    parser.add_argument("--quick", action="store_true", help="one task per agent (the smoke test's size)")
    parser.add_argument("--n-ctx", type=int, default=8192, help="the local model's context (and the engine's window)")
    parser.add_argument("--max-tokens", type=int, default=256, help="per reply, for a local model")
    parser.add_argument("--scratch", type=Path, default=None, help="where ledgers and repositories go (a temp folder)")
    parser.add_argument("--template", default=None,
                        help="for a local model, its chat template (a file in providers/local/templates, a path, or "
                        "`model`); default: the one `vak serve-local` uses in front of an agent (the Qwen coders: "
                        "chatml_fence_tools.jinja, their fenced calls returned as native tool calls)")
    parser.add_argument("--serve-calls", choices=("text", "native", "auto"), default=None,
                        help="vak serve's --calls, as its operator sets it: text (the model writes its calls in its "
                        "reply: parsed from it and handed to the agent as tool calls), native, or auto (unset: what a "
                        "probe measured, else native). Default: text for a local model under its own template (the bundled Qwen writes "
                        "fenced JSON calls, never native ones), auto otherwise")
    parser.add_argument("--dump", type=Path, default=None,
                        help="append each task's run to this file (JSON lines): the request bodies the upstream "
                        "received, its replies, and what the agent was handed")
    parser.add_argument("--temperature", type=float, default=None,
                        help="sampling temperature for every request that reaches the upstream without one, in every "
                        "mode alike (the engine's summaries included); default: each agent's own setting, else the "
                        "server's (llama.cpp: 0.8). 0 makes direct and through-the-engine differ by what the model "
                        "is sent, not by the draw")
    args = parser.parse_args(argv)
    agents = [a for a in args.agents.split(",") if a]
    unknown = [a for a in agents if a not in AGENTS]
    if unknown:
        parser.error(f"unknown agents {unknown}: use {', '.join(AGENTS)}")
    count = 1 if args.quick else max(1, min(args.tasks, 5))
    rows: list[Row] = []
    started = time.monotonic()
    with ExitStack() as stack:
        scratch = args.scratch or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="vak-agents-")))
        template, native = None, True
        if args.upstream == "scripted":
            upstream = AgentUpstream([*QUESTIONS, *BUGS])
            root = stack.enter_context(serve(upstream.handle)).url
            key, model, window, max_tokens = "sk-scripted", "scripted", 32_768, None
        elif args.upstream.startswith("local:"):
            from vak_context.providers.local.catalogue import agent_template, canonical_model
            from vak_context.providers.local.server import LocalModelServer

            model = canonical_model(args.upstream.split(":", 1)[1] or "qwen1.5b")
            template = args.template or agent_template(model)
            native = template != "model"  # under the model's own template the Qwen's calls stay in its text
            server = stack.enter_context(LocalModelServer(model, n_ctx=args.n_ctx, template=template))
            root, key, window, max_tokens = server.root_url, server.api_key, args.n_ctx, args.max_tokens
        else:
            parser.error(f"--upstream {args.upstream!r}: use scripted or local:MODEL")
        calls = args.serve_calls or ("auto" if native else "text")
        serve_args = () if calls == "auto" else ("--calls", calls)
        sampling = {} if args.temperature is None else {"temperature": args.temperature}
        print(f"upstream: {args.upstream} at {root}{f' (template {template})' if template else ''}; {count} task(s) "
              f"per agent; vak serve --calls {calls}"
              f"{f'; temperature {args.temperature:g} where a request sets none' if sampling else ''}", flush=True)
        for agent in agents:
            modes = [m for m in (args.modes.split(",") if args.modes else modes_of(agent)) if m in modes_of(agent)]
            if "direct" not in modes:
                modes.insert(0, "direct")
            runs = run_agent(agent, tasks_for(agent, count), upstream=root, upstream_key=key,
                             scratch=scratch / agent, model=model, window=window, max_tokens=max_tokens,
                             modes=modes, serve_args=serve_args,
                             text_actions=not native, on_run=partial(progress, dump_to=args.dump),
                             sampling=sampling)
            rows += rows_of(agent, runs)
    print()
    print(table(rows))
    print(f"\nprompt tokens: chars / 4 of each request body's messages and tools, as the upstream received them; "
          f"upstream calls count the engine's summariser calls (in brackets). wall: {time.monotonic() - started:.0f} s")
    return rows


if __name__ == "__main__":
    main()
