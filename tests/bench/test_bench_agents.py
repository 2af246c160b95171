"""bench/agents.py at its smallest (``--quick --upstream scripted``: one task per agent against the scripted
upstream), run as a user runs it, in a child process (its name is the OpenAI Agents SDK's import name, so it
must run as a script to show that the SDK still imports). Only the output's shape is asserted, and that
every agent solves its task direct (the harness itself); what the engine must do for the agents is
tests/service/test_real_agents.py's."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes.agent_runs import AGENTS

BENCH = Path(__file__).resolve().parents[2] / "bench" / "agents.py"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_quick_scripted_run_prints_each_agent_side_by_side(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(BENCH), "--quick", "--upstream", "scripted", "--scratch", str(tmp_path)],
                          capture_output=True, text=True, timeout=540, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = re.findall(r"^\| (\S+) \| (direct|serve|adapter) \| (\d+)/(\d+) \| ([\d,]+) \| (\d+) \((\d+)\) \| ([\d.]+) \|",
                      done.stdout, re.MULTILINE)
    modes = {agent: [m for a, m, *_ in rows if a == agent] for agent in AGENTS}
    assert modes == {agent: ["direct", "serve", "adapter"] if agent in ("pydantic-ai", "openai-agents", "langchain")
                     else ["direct", "serve"] for agent in AGENTS}
    for _agent, mode, solved, tasks, tokens, calls, _summaries, _wall in rows:
        assert tasks == "1" and int(tokens.replace(",", "")) > 0 and int(calls) >= 2
        if mode == "direct":
            assert solved == "1"
    assert "tokens / direct" in done.stdout and "chars / 4" in done.stdout
