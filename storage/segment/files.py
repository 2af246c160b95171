"""Arrow IPC segment files, the on-disk unit of the ledger (docs/LEDGER_FORMAT.md): naming and reading.

Each session folder holds sealed segments ``seg-NNNNNN.arrow`` (zstd Arrow IPC files with a footer)
and at most one open tail ``_seg-NNNNNN.arrow`` (how a writer appends and seals one:
``storage/segment/writer.py``). Batches are located by the byte offset of their IPC message, so an
unsealed segment (a live one, or one left by a crash) reads the same way as a sealed one;
``scan_segment`` reads every message of a segment and notes where the complete ones end.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import blake3
import pyarrow as pa
import pyarrow.ipc as ipc

from vak_context.storage.segment.schema import (
    FORMAT_1_SCHEMA_MESSAGES,
    FORMAT_VERSION,
    MAGIC,
    SCHEMA,
    SCHEMA_MESSAGE,
    from_batch,
    to_batch,
)

# The schema and batch conversions live in vak_context.storage.segment.schema, the commit message in
# vak_context.storage.ipc_message, the writer in vak_context.storage.segment.writer; these names are read from here too.
__all__ = ["ARROW_ERRORS", "FORMAT_VERSION", "MAGIC", "SCHEMA", "ScannedBatch", "ScannedSegment", "batch_offsets", "from_batch",
           "list_segments", "open_name", "read_batch_at", "scan_segment", "sealed_name", "stale_tails", "to_batch"]

_SEG_RE = re.compile(r"^(_?)seg-(\d{6})\.arrow$")

# What pyarrow raises on bytes it cannot read: its own errors, and the plain OSError (a flatbuffer
# that fails its checks: "Unexpected null field ... in flatbuffer-encoded metadata") and ValueError
# (UnicodeDecodeError among them) it raises besides. Scanning translates each into a finding.
ARROW_ERRORS: tuple[type[Exception], ...] = (pa.ArrowException, OSError, ValueError)
_SCHEMA_MESSAGES = FORMAT_1_SCHEMA_MESSAGES | {blake3.blake3(SCHEMA_MESSAGE).hexdigest()}


def sealed_name(number: int) -> str:
    return f"seg-{number:06d}.arrow"


def open_name(number: int) -> str:
    return f"_seg-{number:06d}.arrow"


def list_segments(session_dir: Path) -> list[tuple[int, Path, bool]]:
    """(number, path, sealed) for every segment in a session folder, in order.

    When both ``seg-N`` and ``_seg-N`` exist, sealing was interrupted after the sealed copy was
    renamed into place (so it is complete) and before the tail was removed: only ``seg-N`` counts.
    """
    found: dict[int, tuple[int, Path, bool]] = {}
    for p in session_dir.iterdir():
        m = _SEG_RE.match(p.name)
        if m:
            number, sealed = int(m.group(2)), m.group(1) == ""
            if number not in found or sealed:
                found[number] = (number, p, sealed)
    return [found[n] for n in sorted(found)]


def stale_tails(session_dir: Path) -> list[Path]:
    """Open tails whose sealed copy already exists (left by an interrupted seal)."""
    return [p for p in session_dir.glob("_seg-*.arrow") if (session_dir / p.name[1:]).exists()]


@dataclass
class ScannedBatch:
    offset: int  # byte offset of the IPC message
    end: int  # byte offset just past it
    batch: pa.RecordBatch | None  # None when the message did not decode
    error: str = ""
    body_length: int = 0  # the message's body; end - offset - body_length is its metadata, prefix included


@dataclass
class ScannedSegment:
    path: Path
    number: int
    sealed: bool
    batches: list[ScannedBatch]
    good_end: int  # end of the last complete message
    size: int
    torn: str = ""  # why the tail is incomplete, when it is
    bad_header: str = ""
    dropped: int = 0  # bytes past good_end that are not zero fill: what truncating the tail drops
    first_id: str | None = None  # with a bad header: the first entry's id, when its batch still decodes


def scan_segment(path: Path, number: int, sealed: bool) -> ScannedSegment:
    """Read every IPC message of a segment, noting where the complete ones end."""
    data = path.read_bytes()
    seg = ScannedSegment(path, number, sealed, [], 0, len(data))
    if len(data) < len(MAGIC) or data[: len(MAGIC)] != MAGIC:
        seg.bad_header = "missing ARROW1 magic"
        # A writer creates the tail, then writes its header, then syncs both before its first
        # commit; a kill in between leaves an empty tail, or (after a power cut) the start of the
        # magic and zeros. Nothing in it was ever acknowledged: a torn tail, not damage.
        written = data if sealed else data.rstrip(b"\0")
        if len(written) < len(MAGIC) and MAGIC.startswith(written):
            seg.torn = f"the header was never completely written ({len(data)} bytes)"
            seg.dropped = len(written)
        else:
            seg.first_id = _first_id(data)
        return seg
    reader = pa.BufferReader(data)
    reader.seek(len(MAGIC))
    first = True
    seg.good_end = len(MAGIC)
    for offset, msg, err in _messages(reader):
        if err and first and sealed:  # a sealed segment's header was written whole: damage, not a torn write
            seg.bad_header, seg.first_id = f"the schema message does not read ({err})", _first_id(data)
            return seg
        if err:
            seg.torn = err
            break
        assert msg is not None
        end = reader.tell()
        if first:
            first = False
            seg.bad_header = _schema_problem(msg, data, end)
            if seg.bad_header:
                seg.first_id = _first_id(data)
                return seg
            seg.good_end = end
            continue
        seg.batches.append(_scanned_batch(msg, offset, end))
        seg.good_end = end
    if first and not seg.torn:
        if sealed:
            seg.bad_header, seg.first_id = "no schema message after the magic", _first_id(data)
            return seg
        seg.torn = "no schema message"
    if not sealed:
        # A tail is zero-filled ahead of its writes, and zeros read as the end of the stream. Bytes
        # that are not zero after the last complete message are a torn or foreign write.
        rest = len(data[seg.good_end:].rstrip(b"\0"))
        seg.dropped = rest
        if rest and not seg.torn:
            seg.torn = f"{rest} unreadable bytes after the last complete message, at byte {seg.good_end}"
    return seg


def _scanned_batch(msg: ipc.Message, offset: int, end: int) -> ScannedBatch:
    """One complete message after the schema: its record batch, validated, or why it is not one."""
    body = msg.body.size if msg.body is not None else 0
    if msg.type != "record batch":
        return ScannedBatch(offset, end, None, f"unexpected {msg.type} message", body)
    try:
        batch = ipc.read_record_batch(msg, SCHEMA)
        batch.validate(full=True)
        return ScannedBatch(offset, end, batch, "", body)
    except ARROW_ERRORS as exc:
        return ScannedBatch(offset, end, None, f"{type(exc).__name__}: {exc}", body)


def _schema_problem(msg: ipc.Message, data: bytes, end: int) -> str:
    """Why the segment's first message is not the ledger's schema message ("" when it is, byte for byte)."""
    if msg.type != "schema":
        return f"first message is {msg.type}, not the schema"
    written = data[len(MAGIC):end]
    if blake3.blake3(written).hexdigest() in _SCHEMA_MESSAGES:
        return ""
    try:
        schema = ipc.read_schema(msg)
        if not schema.equals(SCHEMA, check_metadata=True):
            return f"the schema message is not the ledger schema: {schema}"
    except ARROW_ERRORS as exc:
        return f"the schema message does not decode ({type(exc).__name__}: {exc})"
    differ = next((i for i, (a, b) in enumerate(zip(written, SCHEMA_MESSAGE, strict=False)) if a != b),
                  min(len(written), len(SCHEMA_MESSAGE)))
    return (f"the schema message differs from the ledger's at byte {len(MAGIC) + differ} of the file "
            f"({len(written)} bytes where the ledger's has {len(SCHEMA_MESSAGE)}), though pyarrow still reads "
            "the ledger schema from it: altered where pyarrow does not look")


def _first_id(data: bytes) -> str | None:
    """With a bad header: the first entry's id, read where the first batch follows an intact header
    (a flipped byte moves nothing), when a batch there still decodes; None otherwise."""
    reader = pa.BufferReader(data)
    reader.seek(min(len(data), len(MAGIC) + len(SCHEMA_MESSAGE)))
    try:
        msg = ipc.read_message(reader)
        if msg.type != "record batch":
            return None
        batch = ipc.read_record_batch(msg, SCHEMA)
        batch.validate(full=True)  # before reading a value: invalid offsets could read out of bounds
        return str(batch.column("id")[0].as_py()) if batch.num_rows else None
    except EOFError:
        return None
    except ARROW_ERRORS:
        return None


def _messages(reader: pa.BufferReader) -> Iterator[tuple[int, ipc.Message | None, str]]:
    while True:
        offset = reader.tell()
        try:
            msg = ipc.read_message(reader)
        except EOFError:
            return  # a clean end: EOS marker, or end of an unsealed file exactly at a boundary
        except ARROW_ERRORS as exc:
            yield offset, None, f"incomplete message at byte {offset}: {exc}"
            return
        yield offset, msg, ""


def batch_offsets(path: Path) -> list[int]:
    """Byte offsets of a segment's record batch messages, in order, without decoding them."""
    offsets: list[int] = []
    with pa.memory_map(str(path), "r") as f:
        f.seek(len(MAGIC))
        while True:
            offset = f.tell()
            try:
                msg = ipc.read_message(f)
            except EOFError:
                return offsets
            if msg.type == "record batch":
                offsets.append(offset)


def read_batch_at(path: Path, offset: int) -> pa.RecordBatch:
    with pa.OSFile(str(path), "rb") as f:
        f.seek(offset)
        msg = ipc.read_message(f)
        return ipc.read_record_batch(msg, SCHEMA)


