"""One agent's tasks run direct and through the engine, side by side (issue 33, item 6): what
tests/service/test_real_agents.py asserts on and bench/agents.py prints.

The upstream (the scripted one of tests/fakes/agent_upstream.py, or the bundled model's server) sits behind
a ``Tap`` that keeps every request body it gets, whoever sends it: the agent (direct, or through an adapter)
or ``vak serve``. So prompt tokens are counted the same way for every mode, from the bodies the upstream
received (:func:`tests.fakes.agent_upstream.prompt_tokens`), and the engine's summariser calls (its
summariser's system prompt) are counted with the task they follow. In front of ``vak serve`` a second Tap keeps what the
agent was answered.

Modes: ``direct`` (the agent against the upstream), ``serve`` (against ``vak serve`` as a child process,
``openai-compat:<model>`` in front of the upstream, one ledger per agent), ``adapter`` (the engine's adapter
for the framework, in this process, one ledger per agent, a session named after the task).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.fakes.agent_runs import ADAPTED, Adapter, Endpoint, Ran, run, tapped, warm
from tests.fakes.agent_upstream import (
    CHARS_PER_TOKEN,
    BugTask,
    QuestionTask,
    Reply,
    chars_of,
    engine_fixed_chars,
    extra_tail_chars,
    is_summary,
    prompt_tokens,
)


@dataclass
class TaskRun:
    """One task in one mode: the agent's run, the upstream requests it caused (``requests`` the model
    calls, ``summaries`` the engine's summariser calls), what the agent was answered, and the
    ledger sessions the task added (none direct)."""

    agent: str
    task: QuestionTask | BugTask
    mode: str
    ran: Ran
    requests: list[dict[str, Any]]
    summaries: list[dict[str, Any]]
    received: list[Reply]  # what the agent was answered
    answered: list[Reply]  # what the upstream answered (the engine's requests included)
    sessions: list[str] = field(default_factory=list)

    @property
    def prompt_tokens(self) -> int:
        return sum(prompt_tokens(b) for b in [*self.requests, *self.summaries])

    @property
    def prompt_chars(self) -> int:
        return sum(chars_of(b) for b in [*self.requests, *self.summaries])

    @property
    def upstream_calls(self) -> int:
        return len(self.requests) + len(self.summaries)


def modes_of(agent: str) -> tuple[str, ...]:
    return ("direct", "serve", "adapter") if agent in ADAPTED else ("direct", "serve")


def questions_of(task: QuestionTask | BugTask) -> list[str]:
    return [t.question for t in task.turns] if isinstance(task, QuestionTask) else [task.issue]


def fixed_cost_chars(engine: TaskRun, direct: TaskRun) -> int:
    """The engine's fixed cost for ``engine``'s task, in characters: each of its model requests may carry
    :func:`engine_fixed_chars` more than a direct request does (the client's system prompt read from the
    direct run's first request; under an adapter the engine's identity replaces the agent's)."""
    first = direct.requests[0]["messages"] if direct.requests else []
    system = next((m["content"] for m in first[:1] if m.get("role") == "system" and isinstance(m["content"], str)), "")
    from vak_context.context.request.assemble import DEFAULT_IDENTITY

    identity = DEFAULT_IDENTITY if engine.mode == "adapter" else None
    # Under an adapter the client's framework declares the engine's tools as it declares its own: the keys
    # it adds to each (read from the direct run's first tool) are added to the engine's.
    declared = ((direct.requests[0].get("tools") or [{}])[0].get("function") or {}) if direct.requests else {}
    framework_keys = {k: v for k, v in declared.items() if k not in ("name", "description", "parameters")}
    per_request = engine_fixed_chars(system, questions_of(engine.task), identity=identity,
                                     tool_keys=framework_keys if engine.mode == "adapter" else None)
    # Each directive keeps the tail its turn was sent with (a closed turn is the bytes its last request
    # carried, for the prefix cache), so a request carrying a second user message of the client's (mini-swe-
    # agent's format error, a second question) carries a second tail: counted per user message it carries.
    tails = sum(max(sum(1 for m in body["messages"] if m.get("role") == "user") - 1, 0) for body in engine.requests)
    return per_request * len(engine.requests) + tails * extra_tail_chars()


def fixed_cost_tokens(engine: TaskRun, direct: TaskRun) -> int:
    return math.ceil(fixed_cost_chars(engine, direct) / CHARS_PER_TOKEN)


def _ledger_sessions(folder: Path) -> set[str]:
    from vak_context.storage.ledger import LedgerStore

    if not folder.exists():
        return set()
    with LedgerStore(folder, readonly=True) as store:
        return set(store.sessions())


@contextmanager
def _served(up_root: str, model: str, upstream_key: str, ledger: Path, window: int,
            extra: Sequence[str] = ()) -> Iterator[tuple[Any, Any, str]]:
    from vak_context.serve.child import serve_child

    with serve_child(f"openai-compat:{model}", ledger=ledger, base_url=f"{up_root}/v1", window=window, extra=extra,
                     env={"OPENAI_COMPAT_API_KEY": upstream_key}) as child, tapped(child.root) as (tap, root):
        yield child, tap, root


def run_agent(agent: str, tasks: Sequence[QuestionTask | BugTask], *, upstream: str, upstream_key: str,
              scratch: Path, model: str = "scripted", window: int = 32_768, max_tokens: int | None = None,
              modes: Sequence[str] | None = None, serve_args: Sequence[str] = (), text_actions: bool = False,
              on_run: Callable[[TaskRun], None] | None = None,
              sampling: dict[str, Any] | None = None) -> list[TaskRun]:
    """Every task of ``tasks`` in every mode of ``agent`` (``modes``, by default all it has), against the
    upstream at ``upstream`` (a root URL); the runs in task order, direct first. ``on_run``: called with
    each run as it ends (a bench's progress: a real model's task takes minutes). ``serve_args``: more of
    ``vak serve``'s options (the operator's, e.g. ``--calls text`` for a model that writes its calls as text); ``text_actions``: an
    agent with a documented text-based configuration runs that (:class:`tests.fakes.agent_runs.Endpoint`);
    ``sampling``: fields every request that reaches the upstream gets where it sets none, whichever mode
    sent it (the engine's summaries included), e.g. ``{"temperature": 0}``."""
    import vak_context

    modes = tuple(modes or modes_of(agent))
    warm(agent)
    runs: list[TaskRun] = []
    with ExitStack() as stack:
        up_tap, up_root = stack.enter_context(tapped(upstream, sampling))
        serve_tap = serve_root = serve_key = None
        serve_ledger = scratch / "serve-ledger"
        if "serve" in modes:
            child, serve_tap, serve_root = stack.enter_context(
                _served(up_root, model, upstream_key, serve_ledger, window, serve_args))
            serve_key = child.key
        engine = None
        if "adapter" in modes:
            engine = stack.enter_context(vak_context.Engine.open(scratch / "adapter-ledger"))
        for task in tasks:
            for mode in modes:
                up_tap.take()
                if serve_tap is not None:
                    serve_tap.take()
                before = (_ledger_sessions(serve_ledger) if mode == "serve"
                          else set(engine.ledger().sessions()) if mode == "adapter" and engine else set())
                adapter = None
                if mode == "serve":
                    assert serve_root is not None and serve_key is not None
                    endpoint = Endpoint(f"{serve_root}/v1", serve_key, model, max_tokens, text_actions)
                else:
                    endpoint = Endpoint(f"{up_root}/v1", upstream_key, model, max_tokens, text_actions)
                    if mode == "adapter":
                        adapter = Adapter(engine, f"{agent}-{task.name}", f"{up_root}/v1", upstream_key, window)
                ran = run(agent, task, endpoint, scratch=scratch / mode, adapter=adapter)
                bodies, replies = up_tap.take()
                received = serve_tap.take()[1] if mode == "serve" and serve_tap is not None else replies
                after = (_ledger_sessions(serve_ledger) if mode == "serve"
                         else set(engine.ledger().sessions()) if mode == "adapter" and engine else set())
                runs.append(TaskRun(agent, task, mode, ran, [b for b in bodies if not is_summary(b)],
                                    [b for b in bodies if is_summary(b)], received, replies,
                                    sorted(after - before)))
                if on_run is not None:
                    on_run(runs[-1])
    return runs
