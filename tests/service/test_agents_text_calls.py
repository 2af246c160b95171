"""Real agents through ``vak serve --calls text`` in front of a model that writes its calls as text (issue 33,
items 4 and 6): the bundled Qwen answers a tool question with the call in its reply's text (a ```json fence,
an object in doubled braces, a ``<tools>`` tag), never a native tool call. ``--calls text`` parses them, so
pydantic-ai, the OpenAI Agents SDK and LangChain (which read only native calls) get tool calls, run their
own tools and get their answers: each solves a question task per form, one ledger session per task, and
every reply they got is one the upstream wrote (its text call handed over as the call it is).

The scripted upstream (tests/fakes/agent_upstream.py, ``text_calls``) plays each task's ideal trajectory and
answers only from what the request it receives holds."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes.agent_compare import run_agent
from tests.fakes.agent_tasks import QUESTIONS
from tests.fakes.agent_upstream import TEXT_CALL_FORMS, AgentUpstream, QuestionTask
from tests.fakes.httpserver import serve

pytestmark = pytest.mark.slow

# One task per form: the weather today, two calls in a row, a population.
FORMS = dict(zip(("weather-today", "order-carrier-phone", "population"), TEXT_CALL_FORMS, strict=True))
TASKS = [t for t in QUESTIONS if t.name in FORMS]


@pytest.mark.parametrize("agent", ["pydantic-ai", "openai-agents", "langchain"])
def test_an_agent_solves_questions_through_serve_against_a_model_that_writes_calls_as_text(
        tmp_path: Path, agent: str) -> None:
    upstream = AgentUpstream(TASKS, text_calls=FORMS)
    with serve(upstream.handle) as server:
        runs = run_agent(agent, TASKS, upstream=server.url, upstream_key="sk-upstream-test", scratch=tmp_path,
                         modes=("serve",), serve_args=("--calls", "text"))
    assert [r.task.name for r in runs] == [t.name for t in TASKS]
    for run in runs:
        task = run.task
        assert isinstance(task, QuestionTask)
        assert (run.ran.error, run.ran.answers) == ("", list(task.expected)), task.name
        assert len(run.sessions) == 1, f"{task.name}: {run.sessions}"
        # The upstream never made a native call; the agent got each of its text calls as a tool call.
        assert all(not reply.calls for reply in run.answered)
        hops = [h.tool for turn in task.turns for h in turn.hops]
        assert [name for reply in run.received for name, _ in reply.calls] == hops
        assert all(reply.text in {"", *task.expected} for reply in run.received), run.received
