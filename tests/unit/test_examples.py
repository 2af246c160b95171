"""examples/ run in the suite: own_tools.py's two turns through the public API against the scripted
OpenAI-compatible model (both tools real), then read_session.py reads what they wrote with plain pyarrow
and DuckDB."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import httpx
import pytest

from tests.fakes.embedder import ScriptedModel

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def test_own_tools_then_read_session(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = ScriptedModel()
    folder = str(tmp_path / "ledger")
    async with httpx.AsyncClient(transport=httpx.MockTransport(model.handle)) as client:
        await load("own_tools").main(folder=folder, model="openai-compat:scripted",
                                     base_url="http://127.0.0.1:9/v1", http_client=client, window=8_000)
    assert capsys.readouterr().out.count("[completed] Done:") == 2
    summary = load("read_session").read(folder, "demo")
    assert summary["directives"] == ["search the notes for the release", "run echo hello"]
    assert summary["outcomes"] == ["completed", "completed"]
    kinds = summary["kinds"]
    assert isinstance(kinds, dict) and kinds["tool_result"] == 2 and kinds["receipt"] >= 4


async def test_callers_loop_runs_two_turns_with_its_own_client_and_tools(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """examples/callers_loop.py: the example's own httpx client sends each request (OpenAI chat
    completions) to the scripted model, its own two tools run, and both turns complete with their cards."""
    model = ScriptedModel()
    async with httpx.AsyncClient(transport=httpx.MockTransport(model.handle)) as client:
        await load("callers_loop").main(folder=str(tmp_path / "ledger"), model="openai:gpt-4o-mini",
                                        http_client=client, api_key="sk-test-example-0123456789", window=8_000,
                                        base_url="http://127.0.0.1:9/v1")
    out = capsys.readouterr().out
    assert out.count("[completed] Done:") == 2 and 'Turn 2 (completed; recall({"turn": 2})). Asked: run echo hello' in out
    results = [m["content"] for body in model.requests for m in body["messages"][-1:] if m["role"] == "tool"]
    assert '"0.1.0 shipped on 2026-12-01"' in results[0] and results[1] == "hello\nexit code: 0"
