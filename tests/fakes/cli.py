"""The `vak` command line as a test drives it: a small ledger to point it at, its one-line errors, its process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from vak_context.events.payloads import Nudge
from vak_context.storage.ledger import LedgerStore

REPO = Path(__file__).resolve().parents[2]


def nudge_ledger(root: Path, sessions: tuple[str, ...] = ("s",)) -> Path:
    """A ledger at ``root`` with two nudges in each session; returns ``root``."""
    with LedgerStore(root) as store:
        for name in sessions:
            store.append(name, [Nudge(tag="t", text="hello")] * 2)
    return root


def one_line_error(err: str) -> str:
    """The one line `vak` writes to stderr for an error (never a traceback); fails the test otherwise."""
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vak: "), err
    return lines[0]


def run_vak(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python -m vak_context.cli.main ARGS`` in a child process, from the repository root."""
    return subprocess.run([sys.executable, "-m", "vak_context.cli.main", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=timeout)
