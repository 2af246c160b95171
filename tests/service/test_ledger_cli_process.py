"""`vak verify` and `vak inspect` in a real process: as a user who may not read the ledger, into a closed pipe,
and end to end on a sound and a wrecked ledger (the same commands in this process: tests/unit/test_ledger_cli.py)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.cli import REPO, nudge_ledger, one_line_error, run_vak
from vak_context.storage.ledger import LedgerStore
from vak_context.storage.segment.files import list_segments, scan_segment

NOBODY = 65534


@pytest.fixture()
def shared_tmp() -> Iterator[Path]:
    """A folder another user can reach (pytest's tmp_path is private to root)."""
    d = Path(tempfile.mkdtemp(prefix="vak-perm-", dir="/tmp"))
    d.chmod(0o755)
    yield d
    for p in [d, *d.rglob("*")]:
        if p.is_dir() and not p.is_symlink():
            p.chmod(0o755)
    shutil.rmtree(d)


# Runs the CLI as an unprivileged user. Root reads any folder whatever its mode, so a root test
# process imports everything first (the interpreter lives under /root, which nobody may read),
# then drops to nobody and calls main(): the permission error then comes from the ledger code.
_AS_NOBODY = """
import os, sys
import vak_context.cli.main, vak_context.cli.ledger, vak_context.storage.ledger, vak_context.storage.verify, json, traceback
vak_context.cli.main.build_parser()  # imports every command module
if os.geteuid() == 0:
    os.setgroups([]); os.setgid({uid}); os.setuid({uid})
sys.exit(vak_context.cli.main.main(sys.argv[1:]))
"""


@pytest.mark.parametrize("where", ["ledger", "sessions", "session"])
@pytest.mark.parametrize("command", ["verify", "inspect"])
def test_a_ledger_folder_without_read_permission(shared_tmp: Path, where: str, command: str) -> None:
    """A ledger, sessions/ or session folder the user may not read: one line naming it, exit 1, no traceback."""
    root = nudge_ledger(shared_tmp / "l")
    for p in [root, *root.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    blocked = {"ledger": root, "sessions": root / "sessions", "session": root / "sessions" / "s"}[where]
    blocked.chmod(0)
    out = subprocess.run([sys.executable, "-c", _AS_NOBODY.format(uid=NOBODY), command, str(root)],
                         capture_output=True, text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                         timeout=120)
    assert out.returncode == 1, out.stderr
    line = one_line_error(out.stderr)
    assert line.startswith(f"vak: {blocked} is not readable"), line  # the folder at fault, by name
    assert stat.S_IMODE(blocked.stat().st_mode) == 0  # nothing changed it


@pytest.mark.parametrize("command", ["inspect", "verify"])
def test_a_closed_pipe_exits_quietly(tmp_path: Path, command: str) -> None:
    """`vak inspect | head` where head has gone: exit status 141 (as SIGPIPE), nothing on stderr."""
    root = nudge_ledger(tmp_path / "l")
    r, w = os.pipe()
    os.close(r)  # the reader is gone before vak writes a byte
    try:
        out = subprocess.run([sys.executable, "-m", "vak_context.cli.main", command, str(root)], stdout=w,
                             stderr=subprocess.PIPE, text=True, cwd=REPO,
                             env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    finally:
        os.close(w)
    assert out.stderr == ""
    assert out.returncode == 141


def test_cli_verify_and_inspect(tmp_path: Path) -> None:
    from vak_context.sessions.generator import generate_session

    root = tmp_path / "ledger"
    with LedgerStore(root) as store:
        gen = generate_session(seed=2, turns=4, append=lambda p, b: store.append_one("cli", p, blob=b))
    ok = run_vak("verify", str(root))
    assert ok.returncode == 0 and f"ok: {len(gen.ids)} entries" in ok.stdout
    inspect = run_vak("inspect", str(root))
    assert inspect.returncode == 0 and '"directive": 4' in inspect.stdout
    # wreck one batch: verify fails, names the entry, and says what to do next
    ((number, seg, _),) = list_segments(root / "sessions" / "cli")
    batch = scan_segment(seg, number, True).batches[5]
    data = bytearray(seg.read_bytes())
    for pos in range(batch.offset + 100, batch.end - 16):
        data[pos] ^= 0xFF
    seg.write_bytes(bytes(data))
    bad = run_vak("verify", str(root))
    assert bad.returncode == 1
    assert "FAILED: first bad entry: seq 5" in bad.stdout and "Keep a copy" in bad.stdout
    missing = run_vak("verify", str(tmp_path / "nope"))
    assert missing.returncode == 1 and "is not a ledger" in missing.stderr and "Traceback" not in missing.stderr
