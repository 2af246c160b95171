"""`vak verify` and `vak inspect` on bad ledger paths: one typed line on stderr, never a traceback.

Also: `vak inspect` reports damage, session names are matched whole,
and a session folder that is a symlink is refused.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fakes.cli import nudge_ledger, one_line_error
from vak_context.cli.main import main
from vak_context.errors import InvalidName, LedgerPathError
from vak_context.events.payloads import Nudge
from vak_context.names import check_name
from vak_context.storage.ledger import LedgerStore

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("command", ["verify", "inspect"])
def test_a_ledger_path_that_is_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    """A file given as the ledger: one line saying it is a file, exit 1; a writable store raises LedgerPathError."""
    path = tmp_path / "not-a-ledger"
    path.write_text("x")
    assert main([command, str(path)]) == 1
    line = one_line_error(capsys.readouterr().err)
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
    line = one_line_error(capsys.readouterr().err)
    assert "sessions" in line and "is a file" in line
    with pytest.raises(LedgerPathError, match="is a file"):
        LedgerStore(tmp_path / "l")




def test_inspect_reports_a_damaged_ledger(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`vak inspect` on a ledger with a segment cut short: exit 1, the report says not ok, one line on stderr."""
    root = nudge_ledger(tmp_path / "l")
    with LedgerStore(root) as store:  # a second segment, so the first is not the last
        store.append_one("s", Nudge(tag="t", text="later"))
    first = root / "sessions" / "s" / "seg-000001.arrow"
    first.write_bytes(first.read_bytes()[: first.stat().st_size // 2])
    assert main(["inspect", str(root)]) == 1
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["verify"]["ok"] is False and report["verify"]["first_bad"]["segment"] == "seg-000001.arrow"
    assert "damaged" in one_line_error(captured.err)


def test_inspect_of_a_sound_ledger_says_ok(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`vak inspect` on a sound ledger: exit 0, its stats and a verify report that is ok."""
    root = nudge_ledger(tmp_path / "l")
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
    nudge_ledger(tmp_path / "l")
    assert main(["verify", str(tmp_path / "l"), "--session", name]) == 1
    assert "invalid session name" in one_line_error(capsys.readouterr().err)


def test_a_symlinked_session_folder_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """sessions/s as a symlink to another ledger's session: verify, reads and appends refuse it; nothing is written."""
    other = nudge_ledger(tmp_path / "other")
    target = other / "sessions" / "s"
    before = {p.name: p.stat().st_size for p in target.iterdir()}
    with LedgerStore(tmp_path / "l"):
        pass
    link = tmp_path / "l" / "sessions" / "s"
    link.symlink_to(target, target_is_directory=True)
    assert main(["verify", str(tmp_path / "l")]) == 1
    line = one_line_error(capsys.readouterr().err)
    assert str(link) in line and "symlink" in line
    with LedgerStore(tmp_path / "l", readonly=True) as ro, pytest.raises(LedgerPathError, match="symlink"):
        ro.entries("s")
    with LedgerStore(tmp_path / "l") as rw, pytest.raises(LedgerPathError, match="symlink"):
        rw.append_one("s", Nudge(tag="t", text="must not land in the other ledger"))
    assert {p.name: p.stat().st_size for p in target.iterdir()} == before
