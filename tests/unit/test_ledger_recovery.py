"""Torn tails are truncated and recorded; tampered bytes are named by verify()."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from vak_context.errors import LedgerCorrupt
from vak_context.events.payloads import Activity, Nudge
from vak_context.storage import seal_options
from vak_context.storage.ledger import LedgerStore
from vak_context.storage.segment.files import list_segments, scan_segment


def _crashed_copy(src_root: Path, dst_root: Path) -> Path:
    """Copy a ledger while its writer still has a segment open: what a crash leaves behind."""
    shutil.copytree(src_root, dst_root)
    (open_seg,) = [p for _, p, sealed in list_segments(dst_root / "sessions" / "s") if not sealed]
    return open_seg


def _written(data: bytes) -> int:
    """Bytes of ``data`` up to its last non-zero byte: what is not zero fill."""
    return len(data.rstrip(b"\0"))


@pytest.mark.parametrize(
    "damage", ["cut_mid_batch", "garbage_tail", "cut_to_magic", "body_without_marker", "marker_without_body"]
)
def test_torn_tail_is_truncated_and_recorded(tmp_path: Path, damage: str) -> None:
    with LedgerStore(tmp_path / "live") as first:  # an earlier, cleanly sealed segment
        acked = [first.append_one("s", Nudge(tag="t", text=f"early {i}")) for i in range(2)]
    live = LedgerStore(tmp_path / "live")
    acked += [live.append_one("s", Nudge(tag="t", text=f"entry {i} " + "y" * 300)) for i in range(3)]
    seg = _crashed_copy(tmp_path / "live", tmp_path / "crashed")
    live.close()
    size = seg.stat().st_size
    scanned = scan_segment(seg, 2, False)
    last = scanned.batches[-1]
    data = seg.read_bytes()
    if damage == "cut_mid_batch":  # the last batch was half written: it was never acknowledged
        cut = last.offset + (last.end - last.offset) // 2
        with open(seg, "r+b") as f:
            f.truncate(cut)
        expect_kept, expect_dropped = acked[:-1], _written(data[last.offset:cut])
    elif damage == "garbage_tail":  # bytes past the zero fill that are no message
        with open(seg, "ab") as f:
            f.write(b"\xff\xff\xff\xff\x10\x00\x00\x00partial-metadata")
        expect_kept, expect_dropped = acked, size - scanned.good_end + 24
    elif damage == "body_without_marker":  # killed between writing a message's body and its marker
        with open(seg, "r+b") as f:
            f.seek(last.offset)
            f.write(bytes(4))
        expect_kept, expect_dropped = acked[:-1], _written(data[last.offset:])
    elif damage == "marker_without_body":  # power cut: the marker's page reached the disk, the body's did not
        with open(seg, "r+b") as f:
            f.seek(last.offset + 200)
            f.write(bytes(last.end - last.offset - 200))
        expect_kept, expect_dropped = acked[:-1], last.end - last.offset
    else:
        with open(seg, "r+b") as f:  # the crash came while the segment's schema was being written
            f.truncate(8 + 40)
        expect_kept, expect_dropped = acked[:2], _written(data[8:48])
    with LedgerStore(tmp_path / "crashed") as store:
        assert [e.id for e in store.entries("s") if e.kind == "nudge"] == expect_kept
        (report,) = store.recoveries
        assert report["bytes_dropped"] == expect_dropped
        note = store.payload(store.head("s") or "")
        assert isinstance(note, Activity) and note.activity == "ledger.torn_tail_truncated"
        assert note.detail["bytes_dropped"] == expect_dropped
        assert store.verify().ok
        nxt = store.append_one("s", Nudge(tag="t", text="after repair"))
        assert store.get(nxt).parent == store.chain_to_root(nxt)[-2].id
    assert size > 0
    with LedgerStore(tmp_path / "crashed") as again:  # the repair is not repeated
        assert again.recoveries == []
        assert again.verify().ok


def test_reader_ignores_a_live_writers_torn_tail(tmp_path: Path) -> None:
    live = LedgerStore(tmp_path / "live")
    ids = [live.append_one("s", Nudge(tag="t", text=str(i))) for i in range(3)]
    reader = LedgerStore(tmp_path / "live", readonly=True)
    assert [e.id for e in reader.entries("s")] == ids
    reader.close()
    live.close()


@pytest.mark.parametrize("sealed", ["zstd", "plain"])
def test_every_single_byte_flip_in_an_entry_is_named_or_harmless(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  sealed: str) -> None:
    """Small batches are sealed plain (storage/seal_options.py); zstd forced here for the other case. In a
    plain body the message's declared body length is the one byte whose flip reads as the next message cut
    short (the batch itself still decodes and hashes): named one batch later, never missed."""
    if sealed == "zstd":
        monkeypatch.setattr(seal_options, "PLAIN_BELOW", 0)
    root = tmp_path / "ledger"
    with LedgerStore(root) as store:
        ids = [store.append_one("s", Nudge(tag="t", text=f"entry number {i} " * 8)) for i in range(6)]
    target_seq = 3
    ((number, seg, _),) = list_segments(root / "sessions" / "s")
    batch = scan_segment(seg, number, True).batches[target_seq]  # one entry per batch here
    original = seg.read_bytes()
    named = harmless = moved = 0
    for pos in range(batch.offset, batch.end):
        data = bytearray(original)
        data[pos] ^= 0x5A
        seg.write_bytes(bytes(data))
        reader = LedgerStore(root, readonly=True)
        report = reader.verify()
        if report.ok:
            # verify found nothing: then the byte was Arrow padding and every entry reads back unchanged
            assert [e.id for e in reader.entries("s")] == ids
            harmless += 1
        else:
            bad = report.first_bad
            assert bad is not None, f"flip at {pos}"
            if sealed == "plain" and bad.seq == target_seq + 1:
                assert bad.finding == "segment" and "cut short" in bad.reason, f"flip at {pos}: {bad}"
                moved += 1
            else:
                assert bad.seq == target_seq, f"flip at {pos}: {bad}"
                # the stored id may itself be what the flip changed; the seq and position still name the entry
                assert bad.batch == target_seq and bad.reason
            named += 1
        reader.close()
    seg.write_bytes(original)
    assert named > harmless, (named, harmless)
    assert moved <= (1 if sealed == "plain" else 0), moved
    print(f"byte flips: {named} named the entry, {harmless} hit padding")


def test_reading_a_tampered_entry_raises_ledger_corrupt(tmp_path: Path) -> None:
    root = tmp_path / "ledger"
    with LedgerStore(root) as store:
        ids = [store.append_one("s", Nudge(tag="t", text="z" * 200)) for _ in range(3)]
    ((number, seg, _),) = list_segments(root / "sessions" / "s")
    batch = scan_segment(seg, number, True).batches[1]
    data = bytearray(seg.read_bytes())
    for pos in range(batch.offset + 200, batch.end - 8):  # wreck the body of the middle batch
        data[pos] = 0
    seg.write_bytes(bytes(data))
    with LedgerStore(root, readonly=True) as reader:
        assert reader.get(ids[0]).id == ids[0]  # what is intact still reads
        assert reader.get(ids[2]).id == ids[2]
        with pytest.raises(LedgerCorrupt):
            reader.chain_to_root(ids[2])
        report = reader.verify()
        assert not report.ok and report.first_bad is not None and report.first_bad.seq == 1
        assert report.first_bad.id == ids[1]  # named through the next entry's parent link
