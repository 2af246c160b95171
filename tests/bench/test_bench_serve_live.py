"""bench/serve_live.py at its smallest: two turns of the ``openai`` client through a ``vak serve --upstream
local:smollm2`` child process (a small context, short replies). Only the output's shape and the engine's
promises are asserted (the cache line with its goal, the ledger verified, each client message stored once,
no engine tool handed to the client), never a figure: the 135M model decides its own calls."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "serve_live.py"

pytestmark = [pytest.mark.live, pytest.mark.slow, pytest.mark.timeout(900)]


def _load() -> Any:
    spec = importlib.util.spec_from_file_location("bench_serve_live", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


def test_two_turns_through_vak_serve_print_the_cache_line_and_a_verified_ledger(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = _load().main(["--model", "smollm2", "--turns", "2", "--steps", "2", "--n-ctx", "4096",
                        "--max-tokens", "24", "--stream", "--ledger", str(tmp_path / "ledger")])
    printed = capsys.readouterr().out
    assert "\nturn 1: List" in printed and "\nturn 2: " in printed and "(stream)" in printed
    assert "min(cached(k+1), prompt(k)) / prompt(k)" in printed and "pooled: " in printed
    assert "(goal >= 99.5%" in printed and "re-planned mid-turn (left out):" in printed
    assert "ledger verified: yes" in printed and "each client message stored once: yes" in printed
    assert "engine tools handed to the client: none" in printed and "wall: " in printed
    # vak serve started the model with --window 4096 as its n_ctx, and its sessions plan against that.
    assert "declared window 4096" in printed and out["declared_window"] == 4096
    assert out["verified"] and out["stored_once"] and not out["forks"] and not out["engine_tools_seen"]
    # Every client request made at least one upstream call, each with its receipt in the ledger.
    assert "none in the ledger" not in printed
