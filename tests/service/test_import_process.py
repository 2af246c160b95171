"""`vak import` as a user runs it, in a child process: each bad recording is one line on stderr and exit 1 or 2,
no traceback, no ledger folder (the same refusals in this process: tests/unit/test_import_malformed.py)."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

from tests.fakes.cli import REPO
from tests.fakes.recordings import CHAT, SAMPLES, put, write


def test_vak_import_errors_are_one_line_in_a_real_process(tmp_path: Path) -> None:
    """`vak import` as a user runs it (a subprocess): each bad input gives exit 1 or 2, one line on
    stderr, no traceback, and no ledger folder."""
    claude = SAMPLES[2]
    no_uuid = copy.deepcopy(claude.doc)
    del no_uuid[0]["uuid"]
    cases = [
        (write(tmp_path / "no-uuid", claude, no_uuid), []),
        (write(tmp_path / "string-message", claude, put(claude.doc, (2, "message"), "text")), []),
        (write(tmp_path / "surrogate", SAMPLES[0], put(CHAT, (3, "content"), "\ud800")), []),
        (write(tmp_path / "valid", SAMPLES[0], CHAT), ["--tokens-per-char", "1e308"]),
    ]
    ledger = tmp_path / "ledger"
    for src, extra in cases:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "vak_context.cli.main",
                "import",
                str(src),
                "--ledger",
                str(ledger),
                "--quiet",
                *extra,
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert proc.returncode in (1, 2), proc.stderr
        assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert proc.stderr.startswith("vak"), proc.stderr
        assert not ledger.exists()
