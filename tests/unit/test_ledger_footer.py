"""verify() holds a sealed segment's footer against its stream, and a torn or empty last tail is a note.

Plain Arrow readers (``pyarrow.ipc.open_file``, ``pyarrow.dataset``) find batches through the
footer's blocks; project code reads the stream. A footer that disagrees with the stream makes the
two see different ledgers, so verify() must name the segment.
"""

from __future__ import annotations

import shutil
import struct
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.ipc as ipc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vak_context.cli.main import main
from vak_context.events.payloads import Nudge
from vak_context.storage.ledger import LedgerStore
from vak_context.storage.segment.files import SCHEMA, scan_segment
from vak_context.storage.segment.footer import read_footer

BLOCK = struct.Struct("<qi4xq")


def _ledger(root: Path) -> Path:
    """A ledger whose first sealed segment has four batches of different sizes; that segment's path."""
    with LedgerStore(root) as store:
        for i in range(4):
            store.append("s", [Nudge(tag="t", text=f"batch {i} " + "x" * 150 * i)] * (i + 1))
    with LedgerStore(root) as store:  # a second sealed segment after it
        store.append_one("s", Nudge(tag="t", text="later"))
    return root / "sessions" / "s" / "seg-000001.arrow"


def _block_positions(data: bytes) -> list[int]:
    """Byte positions of the footer's record batch Blocks, found by their values from the stream."""
    footer = read_footer(data)
    positions = []
    for b in footer.record_batches:
        packed = BLOCK.pack(b.offset, b.metadata_length, b.body_length)
        pos = data.index(packed, footer.start)
        positions.append(pos)
    return positions


def _verify_cli(root: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["verify", str(root)])
    return code, capsys.readouterr().out


def test_the_stream_and_the_footer_agree_on_a_sealed_segment(tmp_path: Path) -> None:
    """The blocks parsed from a real pyarrow footer equal the messages read from the stream, in order."""
    seg = _ledger(tmp_path / "l")
    data = seg.read_bytes()
    scanned = scan_segment(seg, 1, True)
    blocks = read_footer(data).record_batches
    assert [(b.offset, b.metadata_length + b.body_length) for b in blocks] == [
        (sb.offset, sb.end - sb.offset) for sb in scanned.batches]
    assert [b.body_length for b in blocks] == [sb.body_length for sb in scanned.batches]
    assert LedgerStore(tmp_path / "l", readonly=True).verify().ok


@pytest.mark.parametrize("field", ["offset", "metadata_length", "body_length"])
@pytest.mark.parametrize("block", [0, 2])
def test_a_flipped_footer_block_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str,
                                         block: int) -> None:
    """Flipping one bit of one field of one footer Block fails verify, naming the segment; `vak verify` exits 1."""
    seg = _ledger(tmp_path / "l")
    data = bytearray(seg.read_bytes())
    pos = _block_positions(bytes(data))[block] + {"offset": 0, "metadata_length": 8, "body_length": 16}[field]
    data[pos] ^= 0x08
    seg.write_bytes(bytes(data))
    report = LedgerStore(tmp_path / "l", readonly=True).verify()
    assert not report.ok and report.first_bad is not None
    assert report.first_bad.segment == "seg-000001.arrow"
    assert "footer" in report.first_bad.reason
    code, out = _verify_cli(tmp_path / "l", capsys)
    assert code == 1 and "seg-000001.arrow" in out and "footer" in out


def test_swapped_footer_blocks_are_named_though_arrow_reads_rows_out_of_order(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two swapped Blocks: pyarrow.dataset reads every row but out of order; verify names the segment."""
    seg = _ledger(tmp_path / "l")
    before = ds.dataset(str(seg), format="arrow").to_table()
    data = bytearray(seg.read_bytes())
    p0, p1 = _block_positions(bytes(data))[:2]
    data[p0:p0 + BLOCK.size], data[p1:p1 + BLOCK.size] = data[p1:p1 + BLOCK.size], data[p0:p0 + BLOCK.size]
    seg.write_bytes(bytes(data))
    after = ds.dataset(str(seg), format="arrow").to_table()
    assert after.num_rows == before.num_rows and after.column("seq") != before.column("seq")  # the harm
    report = LedgerStore(tmp_path / "l", readonly=True).verify()
    assert report.first_bad is not None and report.first_bad.segment == "seg-000001.arrow"
    assert "footer block 0" in report.first_bad.reason
    code, out = _verify_cli(tmp_path / "l", capsys)
    assert code == 1 and "seg-000001.arrow" in out


def test_a_footer_schema_that_differs_is_named(tmp_path: Path) -> None:
    """A renamed column in the footer's schema (the stream's schema untouched) fails verify."""
    seg = _ledger(tmp_path / "l")
    data = seg.read_bytes()
    start = read_footer(data).start
    pos = data.index(b"payload", start)
    seg.write_bytes(data[:pos] + b"paxload" + data[pos + 7:])
    assert "paxload" in ipc.open_file(str(seg)).schema.names  # plain readers see the renamed column
    report = LedgerStore(tmp_path / "l", readonly=True).verify()
    assert report.first_bad is not None and report.first_bad.segment == "seg-000001.arrow"
    assert "schema" in report.first_bad.reason


def _read_as_arrow_tools_do(seg: Path) -> pa.Table | None:
    """The segment as pyarrow.ipc and pyarrow.dataset read it, or None when either fails or disagrees."""
    try:
        t1 = ipc.open_file(str(seg)).read_all()
        t2 = ds.dataset(str(seg), format="arrow").to_table()
        for t in (t1, t2):
            t.validate(full=True)
    except (pa.ArrowException, OSError, ValueError):
        return None
    return t1 if t1.equals(t2) else None


def test_random_footer_flips_are_named_or_harmless() -> None:
    """Any bytes flipped between the end of the stream and the end of the file: either verify names the
    segment, or pyarrow.ipc and pyarrow.dataset still read exactly the original rows, in order."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "l"
        seg = _ledger(root)
        original = seg.read_bytes()
        table = _read_as_arrow_tools_do(seg)
        assert table is not None and table.schema.equals(SCHEMA)
        stream_end = scan_segment(seg, 1, True).good_end
        named = []

        @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        @given(st.lists(st.tuples(st.integers(stream_end, len(original) - 1), st.integers(1, 255)),
                        min_size=1, max_size=4))
        def flipped(flips: list[tuple[int, int]]) -> None:
            data = bytearray(original)
            for pos, mask in flips:
                data[pos] ^= mask
            seg.write_bytes(bytes(data))
            try:
                report = LedgerStore(root, readonly=True).verify()
                if report.ok:
                    read = _read_as_arrow_tools_do(seg)
                    assert read is not None and read.equals(table), f"verify passed {flips}; Arrow tools misread it"
                else:
                    assert report.first_bad is not None and report.first_bad.segment == "seg-000001.arrow"
                    named.append(flips)
            finally:
                seg.write_bytes(original)

        flipped()
        assert named  # the property was not vacuous: most flips matter
        shutil.rmtree(root)


# ------------------------------------------------------------------ torn or empty last tail (item 10)


def _sealed_ledger(root: Path) -> Path:
    with LedgerStore(root) as store:
        store.append("s", [Nudge(tag="t", text="kept")] * 3)
    return root / "sessions" / "s"


@pytest.mark.parametrize("content", [b"", b"ARR", bytes(64 * 1024), b"ARROW" + bytes(4091)],
                         ids=["empty", "part_of_magic", "zero_fill_only", "part_of_magic_then_zeros"])
def test_an_unwritten_tail_is_a_note_not_damage(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                content: bytes) -> None:
    """A last tail killed before its header was written: `vak verify` exits 0 with a note, and leaves it as it was."""
    session = _sealed_ledger(tmp_path / "l")
    tail = session / "_seg-000002.arrow"
    tail.write_bytes(content)
    code, out = _verify_cli(tmp_path / "l", capsys)
    assert code == 0, out
    assert "ok: 3 entries" in out and "note:" in out and "_seg-000002.arrow" in out and "torn tail" in out
    assert tail.read_bytes() == content  # read-only: nothing repaired or removed
    with LedgerStore(tmp_path / "l") as store:  # the next writer seals it, dropping nothing acknowledged
        assert [e.kind for e in store.entries("s")].count("nudge") == 3
        assert [r["batches_kept"] for r in store.recoveries] == [0]
        assert [r["bytes_dropped"] for r in store.recoveries] == [len(content.rstrip(b"\0"))]
    assert LedgerStore(tmp_path / "l", readonly=True).verify().ok


def test_an_empty_segment_before_the_last_is_damage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An empty unsealed segment followed by another segment was not a live tail: verify fails and names it."""
    session = _sealed_ledger(tmp_path / "l")
    (session / "seg-000001.arrow").rename(session / "seg-000003.arrow")
    (session / "_seg-000002.arrow").write_bytes(b"")
    code, out = _verify_cli(tmp_path / "l", capsys)
    assert code == 1 and "_seg-000002.arrow" in out
