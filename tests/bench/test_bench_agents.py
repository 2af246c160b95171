"""bench/agents.py at its smallest (``--quick --upstream scripted``: one task per agent against the scripted
upstream), run as a user runs it, in a child process (its name is the OpenAI Agents SDK's import name, so it
must run as a script to show that the SDK still imports). Only the output's shape is asserted, and that
every agent it ran solves its task direct (the harness itself); what the engine must do for the agents, and
that every one of the five solves each task direct, is tests/service/test_real_agents.py's.

Two agents stand for the five: the bench runs each agent through the same ``run_agent`` and prints it the
same way, so what is the bench's own is one agent with rows direct and serve (smolagents) and one with an
adapter row too (the OpenAI Agents SDK, the import its file name shadows). The other three would each add
their imports (litellm's alone is seconds) and a ``vak serve`` child to ``make test`` for no path of the
bench's not already run."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes.agent_runs import ADAPTED

BENCH = Path(__file__).resolve().parents[2] / "bench" / "agents.py"
AGENTS = ("smolagents", "openai-agents")  # serve-only rows; rows with an adapter (and the SDK's import name)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_quick_scripted_run_prints_each_agent_side_by_side(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(BENCH), "--quick", "--upstream", "scripted", "--agents", ",".join(AGENTS),
                           "--scratch", str(tmp_path), "--dump", str(tmp_path / "runs.jsonl"), "--temperature", "0"],
                          capture_output=True, text=True, timeout=540, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = re.findall(r"^\| (\S+) \| (direct|serve|adapter) \| (\d+)/(\d+) \| ([\d,]+) \| (\d+) \((\d+)\) \| ([\d.]+) \|",
                      done.stdout, re.MULTILINE)
    modes = {agent: [m for a, m, *_ in rows if a == agent] for agent in AGENTS}
    assert modes == {agent: ["direct", "serve", "adapter"] if agent in ADAPTED else ["direct", "serve"]
                     for agent in AGENTS}
    assert {a for a, *_ in rows} == set(AGENTS)
    for _agent, mode, solved, tasks, tokens, calls, _summaries, _wall in rows:
        assert tasks == "1" and int(tokens.replace(",", "")) > 0 and int(calls) >= 2
        if mode == "direct":
            assert solved == "1"
    assert "temperature 0 where a request sets none" in done.stdout
    assert "tokens / direct" in done.stdout and "chars / 4" in done.stdout
    # --dump: one record per task and mode, each request body the upstream received and its reply, in order
    records = [json.loads(line) for line in (tmp_path / "runs.jsonl").read_text().splitlines()]
    assert [(r["agent"], r["mode"]) for r in records] == [(a, m) for a in AGENTS for m in modes[a]]
    for record in records:
        assert record["requests"] and len(record["answered"]) >= len(record["requests"])
        assert all("messages" in body for body in record["requests"])
        # --temperature: every body that reached the upstream carries one (the tap's where the sender set none)
        assert all("temperature" in body for body in record["requests"] + record["summaries"])
        assert record["solved"] or record["mode"] != "direct"
