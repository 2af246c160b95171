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
