"""The session manifest (issue 22): removing a session's newest sealed segments is reported by verify().

The hash chain alone cannot tell: what is left after removing the newest segments is a shorter, valid
chain. Each seal writes ``_manifest.json`` (the sealed head and the segment list); verify() requires
that head, and names the segments that held what is missing. A damaged manifest is its own finding; a
ledger from before manifests verifies with a note.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from vak_context.cli.main import main
from vak_context.errors import LedgerCorrupt
from vak_context.events.payloads import Nudge
from vak_context.storage.ledger import LedgerStore
from vak_context.storage.manifest import MANIFEST_NAME, read_manifest


def _ledger(root: Path, segments: int = 4, per_segment: int = 3) -> list[list[str]]:
    """A session of ``segments`` sealed segments (one writer each); the ids in each."""
    ids = []
    for k in range(segments):
        with LedgerStore(root) as store:
            ids.append([store.append_one("s", Nudge(tag="t", text=f"segment {k} entry {i}"))
                        for i in range(per_segment)])
    return ids


def _session(root: Path) -> Path:
    return root / "sessions" / "s"


def _verify(root: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["verify", str(root)])
    return code, capsys.readouterr().out


def test_each_seal_records_the_head_and_the_segments(tmp_path: Path) -> None:
    ids = _ledger(tmp_path / "l", segments=2)
    m = read_manifest(_session(tmp_path / "l"), "s")
    assert m is not None and (m.head, m.seq) == (ids[-1][-1], 5)
    assert [(r.name, r.first_seq, r.entries, r.last_id) for r in m.segments] == [
        ("seg-000001.arrow", 0, 3, ids[0][-1]), ("seg-000002.arrow", 3, 3, ids[1][-1])]
    report = LedgerStore(tmp_path / "l", readonly=True).verify()
    assert report.ok and report.notes == []


@pytest.mark.parametrize("removed", [1, 2], ids=["newest", "newest_two"])
def test_removing_the_newest_sealed_segments_is_reported(tmp_path: Path, removed: int,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Remove the newest sealed segment, or the newest two: verify reports the missing entries from the first
    seq they held, naming each removed segment and the recorded head; `vak verify` exits 1; no writer opens it."""
    root = tmp_path / "l"
    ids = _ledger(root)
    gone = [f"seg-00000{n}.arrow" for n in range(5 - removed, 5)]
    for name in gone:
        os.unlink(_session(root) / name)
    assert LedgerStore(root, readonly=True).entries("s")[-1].id == ids[-1 - removed][-1]  # a valid, shorter chain
    report = LedgerStore(root, readonly=True).verify()
    bad = report.first_bad
    assert bad is not None and bad.finding == "missing", report
    assert (bad.segment, bad.seq) == (gone[0], 3 * (4 - removed))
    assert report.entries == 3 * (4 - removed)  # every entry still there verified
    for name in gone:
        assert name in bad.reason
    assert ids[-1][-1] in bad.reason and "seq 11" in bad.reason  # the recorded head
    code, out = _verify(root, capsys)
    assert code == 1 and "FAILED: missing entries from seq" in out and gone[-1] in out
    with pytest.raises(LedgerCorrupt, match="manifest records head seq 11"):
        LedgerStore(root).count("s")  # a writer would chain onto the older head and reuse the lost seqs


def test_removing_the_newest_sealed_segment_under_a_live_tail_is_reported(tmp_path: Path) -> None:
    """A writer with entries in its open tail after the removed segment: verify names the removed segment."""
    root = tmp_path / "l"
    _ledger(root, segments=3)
    with LedgerStore(root) as store:
        store.append_one("s", Nudge(tag="t", text="in the live tail"))
        os.unlink(_session(root) / "seg-000003.arrow")
        bad = store.verify().first_bad
        assert bad is not None and bad.finding == "missing" and (bad.segment, bad.seq) == ("seg-000003.arrow", 6)
        assert "seq 9 where 6 was expected" in bad.reason and "seq 6..8" in bad.reason


def test_accepting_the_loss_by_removing_the_manifest(tmp_path: Path) -> None:
    """The documented way on from a truncated session: remove the manifest. verify() then notes it has none,
    and the next writer opens it, goes on from what is left and writes a manifest of that."""
    root = tmp_path / "l"
    ids = _ledger(root, segments=3)
    os.unlink(_session(root) / "seg-000003.arrow")
    os.unlink(_session(root) / MANIFEST_NAME)
    report = LedgerStore(root, readonly=True).verify()
    assert report.ok and any("no _manifest.json" in n for n in report.notes)
    with LedgerStore(root) as store:
        assert store.head("s") == ids[1][-1]
    m = read_manifest(_session(root), "s")
    assert m is not None and (m.head, m.seq) == (ids[1][-1], 5)
    assert LedgerStore(root, readonly=True).verify().notes == []


def test_a_ledger_from_before_manifests_verifies_with_a_note(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """No manifest (as every ledger written before them): verify is ok and says truncation cannot be told;
    `vak verify` prints the note and exits 0; the first writer to open it writes its manifest."""
    root = tmp_path / "l"
    ids = _ledger(root, segments=2)
    os.unlink(_session(root) / MANIFEST_NAME)
    report = LedgerStore(root, readonly=True).verify()
    assert report.ok and report.entries == 6
    (note,) = report.notes
    assert "'s' has no _manifest.json" in note and "cannot be told" in note
    code, out = _verify(root, capsys)
    assert code == 0 and "note: session 's' has no _manifest.json" in out
    with LedgerStore(root) as store:  # opening for writing, nothing appended: the manifest is caught up
        assert store.count("s") == 6
    m = read_manifest(_session(root), "s")
    assert m is not None and m.head == ids[-1][-1]


def test_a_manifest_behind_the_folder_is_a_lower_bound(tmp_path: Path) -> None:
    """A crash after a seal's rename and before its manifest leaves the manifest one seal behind: verify
    passes (the recorded head is there) and the next writer catches the manifest up."""
    root = tmp_path / "l"
    _ledger(root, segments=2)
    behind = (_session(root) / MANIFEST_NAME).read_bytes()
    ids = _ledger(root, segments=1)
    (_session(root) / MANIFEST_NAME).write_bytes(behind)
    assert LedgerStore(root, readonly=True).verify().ok
    with LedgerStore(root) as store:
        store.count("s")
    m = read_manifest(_session(root), "s")
    assert m is not None and m.head == ids[0][-1] and len(m.segments) == 3


def test_a_damaged_manifest_is_a_typed_finding_never_a_crash(tmp_path: Path) -> None:
    """Every byte of the manifest flipped in turn (two masks), the file cut short (a torn write) or emptied:
    verify() reports a "manifest" finding saying what to do, and a writer refuses with
    LedgerCorrupt. The entries themselves all verify first."""
    root = tmp_path / "l"
    _ledger(root, segments=2)
    path = _session(root) / MANIFEST_NAME
    original = path.read_bytes()
    damaged = [bytes(original[:i]) + bytes([original[i] ^ mask]) + original[i + 1:]
               for i in range(len(original)) for mask in (0x01, 0xFF)]
    damaged += [original[: len(original) // 2], original[:-1], b""]
    for i, data in enumerate(damaged):
        path.write_bytes(data)
        report = LedgerStore(root, readonly=True).verify()
        bad = report.first_bad
        assert bad is not None and bad.finding == "manifest", (i, report)
        assert bad.segment == MANIFEST_NAME and report.entries == 6
        assert "Restore the file from a backup" in bad.reason
    with pytest.raises(LedgerCorrupt, match=r"_manifest\.json"):
        LedgerStore(root).count("s")
    path.write_bytes(original)
    assert LedgerStore(root, readonly=True).verify().ok


def test_a_manifest_of_another_session_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "l"
    _ledger(root, segments=1)
    with LedgerStore(root) as store:
        store.append_one("t", Nudge(tag="t", text="another session"))
    shutil.copy(root / "sessions" / "t" / MANIFEST_NAME, _session(root) / MANIFEST_NAME)
    bad = LedgerStore(root, readonly=True).verify("s").first_bad
    assert bad is not None and bad.finding == "manifest" and "names session 't'" in bad.reason


def test_appends_do_not_touch_the_manifest_only_seals_do(tmp_path: Path) -> None:
    """The hot path is unchanged: a hundred appends leave the manifest file as it was (same inode, same
    bytes); the checkpoint that seals them replaces it."""
    root = tmp_path / "l"
    _ledger(root, segments=1)
    path = _session(root) / MANIFEST_NAME
    with LedgerStore(root) as store:
        before = (os.stat(path).st_ino, path.read_bytes())
        for i in range(100):
            store.append_one("s", Nudge(tag="t", text=f"append {i}"))
        assert (os.stat(path).st_ino, path.read_bytes()) == before
        store.checkpoint()
        assert os.stat(path).st_ino != before[0]
    m = read_manifest(_session(root), "s")
    assert m is not None and m.seq == 102 and len(m.segments) == 2
