"""A byte flipped in a sealed segment's header (the magic and the schema message) is damage that verify()
reports, naming the first entry it can no longer vouch for; it never raises pyarrow's error (issue 22).

The schema message is held to the bytes a vak writer writes, byte for byte, so no flip here is harmless:
even one in flatbuffer padding, or in a field pyarrow's reader skips, is reported (another Arrow reader
may not skip it). What decodes is still named: the first entry's id, when its batch still reads.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from vak_context.cli.main import main
from vak_context.events.payloads import Nudge
from vak_context.storage.ledger import LedgerStore
from vak_context.storage.segment.files import MAGIC, scan_segment

MASKS = (0x01, 0x80, 0xFF)  # the low bit, the high bit, every bit


def _ledger(root: Path) -> tuple[Path, int, str]:
    """Two sealed segments (3 entries, then 2); the second's path, its first seq and its first id."""
    with LedgerStore(root) as store:
        for i in range(3):
            store.append_one("s", Nudge(tag="t", text=f"first segment {i}"))
    with LedgerStore(root) as store:
        first_id = store.append_one("s", Nudge(tag="t", text="second segment 0"))
        store.append_one("s", Nudge(tag="t", text="second segment 1"))
    return root / "sessions" / "s" / "seg-000002.arrow", 3, first_id


def _raises_in_pyarrow(header: bytes) -> str:
    """What pyarrow's own reader says of a segment header: the error the issue saw escape, or ""."""
    try:
        reader = pa.BufferReader(header)
        reader.seek(len(MAGIC))
        ipc.read_schema(ipc.read_message(reader))
    except (pa.ArrowException, OSError, ValueError, EOFError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return ""


@pytest.mark.slow  # 1,800 verifies: 10-30 s on 2 busy cores
def test_every_flipped_header_byte_of_a_sealed_segment_is_reported(tmp_path: Path) -> None:
    """Each byte of the magic and the schema message, flipped in turn (three masks, a fresh copy of the
    segment each time): verify() never raises, never reports clean, and names the segment's first entry."""
    root = tmp_path / "l"
    seg, first_seq, first_id = _ledger(root)
    original = seg.read_bytes()
    header_end = scan_segment(seg, 2, True).batches[0].offset  # the magic, then the schema message
    assert header_end > 500
    pyarrow_errors: list[str] = []
    for pos in range(header_end):
        for mask in MASKS:
            data = bytearray(original)
            data[pos] ^= mask
            seg.write_bytes(bytes(data))
            report = LedgerStore(root, readonly=True).verify()  # raising here fails the test
            bad = report.first_bad
            assert bad is not None, f"byte {pos} ^ {mask:#x}: verify reported clean"
            assert (bad.segment, bad.seq, bad.finding) == ("seg-000002.arrow", first_seq, "segment"), (pos, mask, bad)
            # The first batch still sits right after where the header ends, so its first entry is named by id.
            assert bad.id == first_id, (pos, mask, bad)
            assert f"seq {first_seq} (id {first_id})" in str(bad) and report.entries == first_seq
            if error := _raises_in_pyarrow(bytes(data[:header_end])):
                pyarrow_errors.append(error)
    seg.write_bytes(original)
    assert LedgerStore(root, readonly=True).verify().ok
    # The flips cover the case: pyarrow itself raises on many of them, the flatbuffer one included.
    assert any("in flatbuffer-encoded metadata" in e for e in pyarrow_errors), pyarrow_errors[:5]


def test_vak_verify_prints_a_report_and_exits_1_on_the_flip_pyarrow_raises_on(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The issue's case through the CLI: a flip that makes pyarrow raise "Unexpected null field
    custom_metadata.key"; `vak verify` prints the finding (no traceback) and exits 1."""
    root = tmp_path / "l"
    seg, first_seq, _ = _ledger(root)
    original = seg.read_bytes()
    header_end = scan_segment(seg, 2, True).batches[0].offset
    found = None
    for pos in range(len(MAGIC), header_end):
        for value in range(256):
            data = bytearray(original)
            data[pos] = value
            if "custom_metadata.key" in _raises_in_pyarrow(bytes(data[:header_end])):
                found = bytes(data)
                break
        if found:
            break
    assert found is not None, "no single byte makes pyarrow raise the issue's error"
    seg.write_bytes(found)
    code = main(["verify", str(root)])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "FAILED" in out and "seg-000002.arrow" in out and f"seq {first_seq}" in out
    assert "the schema message does not decode (OSError: Unexpected null field custom_metadata.key" in out
