"""docs/EMBEDDING.md's examples run as written: each code block, executed as a module (not ``__main__``), runs
its two turns through the public API against the scripted OpenAI-compatible model, both tools real (the
engine's loop, then the caller's loop with its own client)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.embedder import ScriptedModel

DOC = Path(__file__).resolve().parents[2] / "docs" / "EMBEDDING.md"


def example(index: int = 0) -> dict[str, Any]:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
    assert len(blocks) == 2
    namespace: dict[str, Any] = {"__name__": "embedding_example"}
    exec(compile(blocks[index], str(DOC), "exec"), namespace)
    return namespace


async def test_the_embedding_example_runs_its_two_turns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = ScriptedModel()
    main = example()["main"]
    async with httpx.AsyncClient(transport=httpx.MockTransport(model.handle)) as client:
        await main(folder=str(tmp_path / "ledger"), model="openai-compat:scripted", base_url="http://127.0.0.1:9/v1",
                   http_client=client, window=8_000)
    out = capsys.readouterr().out
    assert out.count("[completed] Done:") == 2
    results = [m["content"] for body in model.requests for m in body["messages"][-1:] if m["role"] == "tool"]
    assert '"0.1.0 shipped on 2026-12-01"' in results[0] and results[1] == "hello\nexit code: 0"
    assert "<stance>Say which note or command output the answer comes from.</stance>" in str(model.requests[0])
    assert 'Turn 2 (completed; recall({"turn": 2})). Asked: run echo hello' in out


async def test_the_callers_loop_example_runs_its_two_turns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = ScriptedModel()
    main = example(1)["main"]
    async with httpx.AsyncClient(transport=httpx.MockTransport(model.handle)) as client:
        await main(folder=str(tmp_path / "ledger"), model="openai:gpt-4o-mini", base_url="http://127.0.0.1:9/v1",
                   http_client=client, api_key="sk-test-doc-0123456789", window=8_000)
    out = capsys.readouterr().out
    assert out.count("[completed] Done:") == 2 and 'Turn 2 (completed; recall({"turn": 2})). Asked: run echo hello' in out
