"""`vak turn` and `vak chat` as a user runs them, on the real SmolLM2 server (fast; what it answers is not
judged, only what the CLI shows and what the ledger keeps): the answer streams before the step's line, each
step has its line, and the turn lands in the named session."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from vak_context.storage.ledger import LedgerStore

pytestmark = pytest.mark.live
ROOT = Path(__file__).resolve().parents[2]


def _vak(args: list[str], tmp_path: Path, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable, "-m", "vak_context.cli.main", *args], cwd=ROOT, env=env, input=stdin, text=True,
                          capture_output=True, timeout=900)


def _workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("alpha\nbeta\n")
    return ws


def test_vak_turn_streams_the_text_then_the_step_line_and_writes_the_session(tmp_path: Path) -> None:
    """The model's text appears after a ``model>`` marker and before that step's ``step N:`` line (a step
    that only called a tool shows no text); the outcome line closes the output; the session holds the
    directive, a receipt and the turn card."""
    ledger = tmp_path / "ledger"
    run = _vak(["turn", "Say hello in three words.", "--model", "smollm2", "--n-ctx", "4096", "--max-steps", "2",
                "--workspace", str(_workspace(tmp_path)), "--ledger", str(ledger), "--session", "cli1"], tmp_path)
    out = run.stdout
    assert run.returncode in (0, 1), run.stderr[-2000:]
    assert "model> " in out and "step 1:" in out, out
    for at in [i for i in range(len(out)) if out.startswith("model> ", i)]:
        assert "  step " in out[at:], out  # every streamed text is followed by its step's line
    assert out.rindex("model> ") < out.rindex("  step ")
    assert "; card " in out.rstrip().splitlines()[-1]
    with LedgerStore(ledger, readonly=True) as store:
        kinds = [e.kind for e in store.entries("cli1")]
    assert kinds[0] == "directive" and "receipt" in kinds and kinds[-1] == "turn_card"


def test_vak_chat_runs_a_turn_per_line_until_quit(tmp_path: Path) -> None:
    """Two lines then ``/quit``: two turns in the session, exit 0; ``--no-stream`` prints the answers whole."""
    ledger = tmp_path / "ledger"
    run = _vak(["chat", "--model", "smollm2", "--n-ctx", "4096", "--max-steps", "1", "--no-stream",
                "--workspace", str(_workspace(tmp_path)), "--ledger", str(ledger), "--session", "cli2"],
               tmp_path, stdin="hello\nname one colour\n/quit\n")
    assert run.returncode == 0, run.stderr[-2000:]
    assert "model> " not in run.stdout and run.stdout.count("; card ") == 2
    with LedgerStore(ledger, readonly=True) as store:
        kinds = [e.kind for e in store.entries("cli2")]
    assert kinds.count("directive") == 2 and kinds.count("turn_card") == 2
