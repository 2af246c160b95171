"""examples/live_model.py against the real bundled SmolLM2-135M: the example binds ``local:smollm2`` itself
(the public API starts llama.cpp on 127.0.0.1 for the session and stops it at close), one turn, at most two
model calls. Nothing here asserts that the 135M model follows an instruction; the engine's promises are
checked: the turn ends with a card, every step is billed by the real server, and the server is gone after."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = [pytest.mark.live, pytest.mark.slow, pytest.mark.timeout(900)]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def test_the_live_example_runs_one_turn_on_the_bundled_model(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    example = load("live_model")
    (result,) = await example.main(folder=str(tmp_path / "ledger"))
    out = capsys.readouterr().out
    assert result.outcome in ("completed", "degraded"), out
    assert result.card.turn == 1 and result.card.asked.startswith("Which version of the ledger")
    assert 1 <= len(result.steps) <= 2
    assert all(s.prompt_tokens > 0 for s in result.steps)  # the real server's usage, per step
    assert all(c in ("release_of", "recall", "find_tools") for s in result.steps for c in s.calls)
    assert f"[{result.outcome}]" in out and "step 0: " in out
