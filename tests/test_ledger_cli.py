"""`vak verify` and `vak inspect` on bad ledger paths: one typed line on stderr, never a traceback.

Also: `vak ... | head` exits quietly, `vak inspect` reports damage, session names are matched whole,
and a session folder that is a symlink is refused.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from vak_context.cli.main import main
from vak_context.errors import InvalidName, LedgerPathError
from vak_context.events.payloads import Nudge
from vak_context.names import check_name
from vak_context.storage.ledger import LedgerStore

REPO = Path(__file__).resolve().parent.parent
NOBODY = 65534


def _ledger(root: Path, sessions: tuple[str, ...] = ("s",)) -> Path:
    with LedgerStore(root) as store:
        for name in sessions:
            store.append("s" if name == "s" else name, [Nudge(tag="t", text="hello")] * 2)
    return root


def _one_line_error(err: str) -> str:
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vak: "), err
    return lines[0]


@pytest.mark.parametrize("command", ["verify", "inspect"])
def test_a_ledger_path_that_is_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    """A file given as the ledger: one line saying it is a file, exit 1; a writable store raises LedgerPathError."""
    path = tmp_path / "not-a-ledger"
    path.write_text("x")
    assert main([command, str(path)]) == 1
    line = _one_line_error(capsys.readouterr().err)
    assert str(path) in line and "is a file" in line
    with pytest.raises(LedgerPathError, match="is a file"):
        LedgerStore(path)
    assert path.read_text() == "x"


@pytest.mark.parametrize("command", ["verify", "inspect"])
def test_a_ledger_whose_sessions_is_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    """sessions/ that is a file: one line naming it, exit 1, for the CLI and for a writable store."""
    (tmp_path / "l").mkdir()
    (tmp_path / "l" / "sessions").write_text("x")
    assert main([command, str(tmp_path / "l")]) == 1
    line = _one_line_error(capsys.readouterr().err)
    assert "sessions" in line and "is a file" in line
    with pytest.raises(LedgerPathError, match="is a file"):
        LedgerStore(tmp_path / "l")


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
    root = _ledger(shared_tmp / "l")
    for p in [root, *root.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    blocked = {"ledger": root, "sessions": root / "sessions", "session": root / "sessions" / "s"}[where]
    blocked.chmod(0)
    out = subprocess.run([sys.executable, "-c", _AS_NOBODY.format(uid=NOBODY), command, str(root)],
                         capture_output=True, text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                         timeout=120)
    assert out.returncode == 1, out.stderr
    line = _one_line_error(out.stderr)
    assert line.startswith(f"vak: {blocked} is not readable"), line  # the folder at fault, by name
    assert stat.S_IMODE(blocked.stat().st_mode) == 0  # nothing changed it


@pytest.mark.parametrize("command", ["inspect", "verify"])
def test_a_closed_pipe_exits_quietly(tmp_path: Path, command: str) -> None:
    """`vak inspect | head` where head has gone: exit status 141 (as SIGPIPE), nothing on stderr."""
    root = _ledger(tmp_path / "l")
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


def test_inspect_reports_a_damaged_ledger(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`vak inspect` on a ledger with a segment cut short: exit 1, the report says not ok, one line on stderr."""
    root = _ledger(tmp_path / "l")
    with LedgerStore(root) as store:  # a second segment, so the first is not the last
        store.append_one("s", Nudge(tag="t", text="later"))
    first = root / "sessions" / "s" / "seg-000001.arrow"
    first.write_bytes(first.read_bytes()[: first.stat().st_size // 2])
    assert main(["inspect", str(root)]) == 1
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["verify"]["ok"] is False and report["verify"]["first_bad"]["segment"] == "seg-000001.arrow"
    assert "damaged" in _one_line_error(captured.err)


def test_inspect_of_a_sound_ledger_says_ok(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`vak inspect` on a sound ledger: exit 0, its stats and a verify report that is ok."""
    root = _ledger(tmp_path / "l")
    assert main(["inspect", str(root)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["entries"] == 2 and report["verify"]["ok"] is True


@pytest.mark.parametrize("name", ["s\n", "s\r", "s\n\n", "\ns"])
def test_a_session_name_with_a_newline_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  name: str) -> None:
    """A name with a newline (trailing ones too, which a `$` pattern let through) is InvalidName; no folder is made."""
    with pytest.raises(InvalidName):
        check_name(name)
    with LedgerStore(tmp_path / "l") as store, pytest.raises(InvalidName):
        store.append_one(name, Nudge(tag="t", text="x"))
    assert list((tmp_path / "l" / "sessions").iterdir()) == []
    _ledger(tmp_path / "l")
    assert main(["verify", str(tmp_path / "l"), "--session", name]) == 1
    assert "invalid session name" in _one_line_error(capsys.readouterr().err)


def test_a_symlinked_session_folder_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """sessions/s as a symlink to another ledger's session: verify, reads and appends refuse it; nothing is written."""
    other = _ledger(tmp_path / "other")
    target = other / "sessions" / "s"
    before = {p.name: p.stat().st_size for p in target.iterdir()}
    with LedgerStore(tmp_path / "l"):
        pass
    link = tmp_path / "l" / "sessions" / "s"
    link.symlink_to(target, target_is_directory=True)
    assert main(["verify", str(tmp_path / "l")]) == 1
    line = _one_line_error(capsys.readouterr().err)
    assert str(link) in line and "symlink" in line
    with LedgerStore(tmp_path / "l", readonly=True) as ro, pytest.raises(LedgerPathError, match="symlink"):
        ro.entries("s")
    with LedgerStore(tmp_path / "l") as rw, pytest.raises(LedgerPathError, match="symlink"):
        rw.append_one("s", Nudge(tag="t", text="must not land in the other ledger"))
    assert {p.name: p.stat().st_size for p in target.iterdir()} == before
