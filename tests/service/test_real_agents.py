"""Real agents from the package index as the engine's acceptance test (issue 33, item 6): mini-swe-agent and
smolagents through ``vak serve`` with their own documented configuration; pydantic-ai, the OpenAI Agents SDK
and LangChain through ``vak serve`` and through their adapters. Each runs its five tasks direct against a
scripted upstream (tests/fakes/agent_upstream.py: it plays each task's ideal trajectory and answers only
from what the request it receives holds) and through the engine, and for every task through the engine:

- the outcome equals direct's (the same final answers; mini-swe-agent: submitted, and the repository's tests
  pass), and an adapter's turns end ``completed``;
- no text the engine wrote reaches the agent: every reply the agent received is one the upstream wrote;
- one ledger session per task (mini-swe-agent's dropped reply and smolagents' text-form history included);
- prompt tokens (the upstream's request bodies, chars / 4, both modes) at most direct's plus the engine's
  fixed cost per request (its tools, system prompt layer and tail: ``engine_fixed_chars``), and below
  direct's on the task whose tool returns 20+ KB.

``vak serve`` runs as a child process (serve/child.py), one per agent; each agent's runs are made once
(the module's ``runs`` fixture) and every assertion is its own test.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.fakes.agent_compare import TaskRun, fixed_cost_chars, fixed_cost_tokens, modes_of, run_agent
from tests.fakes.agent_runs import AGENTS, _reply_of
from tests.fakes.agent_tasks import BUGS, QUESTIONS
from tests.fakes.agent_upstream import AgentUpstream, BugTask, QuestionTask
from tests.fakes.httpserver import serve

pytestmark = pytest.mark.slow


def tasks_of(agent: str) -> Sequence[QuestionTask | BugTask]:
    return BUGS if agent == "mini-swe-agent" else QUESTIONS


ENGINE_CASES = [pytest.param(agent, mode, task.name, id=f"{agent}-{mode}-{task.name}")
                for agent in AGENTS for mode in modes_of(agent)[1:] for task in tasks_of(agent)]
# Every agent's 20 KB task, smolagents' included: its calls and results come as text ("Calling tools:",
# "Observation:"), which vak serve reads as the reply and the result they are (serve/textform.py), so the
# export is evidence, digested once its turn has closed, as the other agents' native results are.
BIG_CASES = [pytest.param(agent, mode, id=f"{agent}-{mode}")
             for agent in AGENTS if agent != "mini-swe-agent" for mode in modes_of(agent)[1:]]


class Runs:
    """Each agent's runs, made the first time a test asks for them."""

    def __init__(self, root: Path) -> None:
        self.root, self.made = root, {}  # type: Path, dict[str, list[TaskRun]]

    def of(self, agent: str) -> list[TaskRun]:
        if agent not in self.made:
            tasks = tasks_of(agent)
            upstream = AgentUpstream(tasks)
            with serve(upstream.handle) as server:
                self.made[agent] = run_agent(agent, tasks, upstream=server.url, upstream_key="sk-upstream-test",
                                             scratch=self.root / agent)
        return self.made[agent]

    def pair(self, agent: str, mode: str, task: str) -> tuple[TaskRun, TaskRun]:
        found = {(r.mode, r.task.name): r for r in self.of(agent)}
        return found[("direct", task)], found[(mode, task)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    return Runs(tmp_path_factory.mktemp("agents"))


@pytest.mark.parametrize("agent", AGENTS)
def test_direct_solves_every_task(runs: Runs, agent: str) -> None:
    """The harness itself: against the scripted upstream, every agent solves each of its tasks direct."""
    direct = [r for r in runs.of(agent) if r.mode == "direct"]
    assert len(direct) >= 5
    assert [(r.task.name, r.ran.error) for r in direct if not r.ran.solved] == []


@pytest.mark.parametrize(("agent", "mode", "task"), ENGINE_CASES)
def test_the_outcome_through_the_engine_equals_direct(runs: Runs, agent: str, mode: str, task: str) -> None:
    direct, engine = runs.pair(agent, mode, task)
    assert direct.ran.solved
    assert (engine.ran.answers, engine.ran.error) == (direct.ran.answers, "")
    assert engine.ran.solved
    if mode == "adapter":  # a run the framework finished is never cancelled or degraded by a rule
        assert engine.ran.outcomes == ["completed"] * len(direct.ran.answers)


@pytest.mark.parametrize(("agent", "mode", "task"), ENGINE_CASES)
def test_no_text_the_engine_wrote_reaches_the_agent(runs: Runs, agent: str, mode: str, task: str) -> None:
    _, engine = runs.pair(agent, mode, task)
    written = {r.text for r in engine.answered} | {""}
    calls = [c for r in engine.answered for c in r.calls]
    assert engine.received, "the agent received no reply"
    for reply in engine.received:
        assert reply.text in written, f"the agent was sent text the upstream never wrote: {reply.text[:300]!r}"
        assert all(call in calls for call in reply.calls), f"a call the upstream never made: {reply.calls}"
    # Its final answers too (smolagents' come through its final_answer tool; mini-swe-agent's is its exit).
    said = written | {str(a.get("answer")) for _, a in calls if isinstance(a, dict)}
    if agent != "mini-swe-agent":
        assert all(answer in said for answer in engine.ran.answers), engine.ran.answers


@pytest.mark.parametrize(("agent", "mode", "task"), ENGINE_CASES)
def test_one_session_per_task(runs: Runs, agent: str, mode: str, task: str) -> None:
    _, engine = runs.pair(agent, mode, task)
    assert len(engine.sessions) == 1, f"{len(engine.sessions)} ledger sessions for one task: {engine.sessions}"


@pytest.mark.parametrize(("agent", "mode", "task"), ENGINE_CASES)
def test_prompt_tokens_at_most_direct_plus_the_engine_fixed_cost(runs: Runs, agent: str, mode: str, task: str) -> None:
    direct, engine = runs.pair(agent, mode, task)
    bound = direct.prompt_chars + fixed_cost_chars(engine, direct)
    assert engine.prompt_chars <= bound, (
        f"{engine.prompt_tokens} prompt tokens through the engine in {engine.upstream_calls} upstream calls "
        f"({len(engine.summaries)} summaries) against {direct.prompt_tokens} direct in {direct.upstream_calls} "
        f"+ {fixed_cost_tokens(engine, direct)} fixed")


@pytest.mark.parametrize(("agent", "mode"), BIG_CASES)
def test_the_20kb_task_costs_fewer_prompt_tokens_than_direct(runs: Runs, agent: str, mode: str) -> None:
    big = next(t for t in QUESTIONS if t.big)
    assert big.turns[0].hops[0].tool == "export_orders"
    direct, engine = runs.pair(agent, mode, big.name)
    result = next(m["content"] for b in direct.requests for m in b["messages"] if "O-1234 | carrier=" in str(m.get("content")))
    assert len(str(result)) >= 20_000  # the tool's result, as the direct agent sent it upstream
    assert engine.prompt_tokens < direct.prompt_tokens


def test_the_tap_keeps_a_call_whose_arguments_do_not_parse() -> None:
    # A small model cut off by its token cap sends arguments that are not JSON (SmolLM2 did, in bench/agents.py
    # against the local model): the agent gets them as they are and the tap records them, plain and streamed.
    cut = '{"city": "Os'
    plain = {"choices": [{"message": {"content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": cut}}]}}]}
    assert _reply_of(json.dumps(plain), "application/json").calls == [("get_weather", {"(unparsed)": cut})]
    chunk = {"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"name": "get_weather", "arguments": cut}}]}}]}
    streamed = f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n"
    assert _reply_of(streamed, "text/event-stream").calls == [("get_weather", {"(unparsed)": cut})]
