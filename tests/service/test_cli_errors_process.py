"""`vak`'s argument errors from a real process, and a probe over the loopback HTTP server (the same checks in
this process, with hooks that refuse real work: tests/unit/test_cli_errors.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes.cli import REPO
from tests.fakes.threshold import ThresholdModel, loopback
from vak_context.cli.main import main


@pytest.fixture()
def a_file(tmp_path: Path) -> Path:
    path = tmp_path / "a-file"
    path.write_text("not a folder\n")
    return path


@pytest.mark.parametrize("argv", [
    ["probe", "openai-compat:x", "--base-url", "http://[::1/v1"],
    ["serve-local", "--threads", "0"],
    ["run", "--ledger", "{file}"],
])
def test_the_vak_process_exits_with_one_line_and_no_traceback(argv: list[str], a_file: Path) -> None:
    """The same errors from a real `python -m vak_context.cli.main` process: non-zero exit, one stderr line, no traceback."""
    argv = [a.format(file=a_file) for a in argv]
    proc = subprocess.run([sys.executable, "-m", "vak_context.cli.main", *argv], capture_output=True, text=True, cwd=REPO,
                          timeout=120)
    assert proc.returncode in (1, 2), proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stdout == ""


def test_a_lowered_first_rung_is_said_and_why(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """`vak probe --first-rung 11058` on a 16k window starts at 3,686 and prints a note naming the cap (a
    quarter of the top rung, 90% of the window); on 32k the same first rung is honoured without a note."""
    args = ["--samples", "1", "--controls", "0", "--max-sizes", "1", "--first-rung", "11058"]
    with loopback(ThresholdModel(3000, n_ctx=16384)) as url:
        rc = main(["probe", "openai-compat:scripted", "--base-url", url, "--out", str(tmp_path / "a"), *args])
    text = capsys.readouterr().out
    assert rc == 0
    assert "note: --first-rung 11,058 lowered to 3,686" in text and "14,745 tokens" in text, text
    assert "16,384-token window" in text
    with loopback(ThresholdModel(3000, n_ctx=65536)) as url:
        rc = main(["probe", "openai-compat:scripted", "--base-url", url, "--out", str(tmp_path / "b"), *args])
    text = capsys.readouterr().out
    assert rc == 0 and "rungs: [11058," in text and "note:" not in text, text
