"""Arrow IPC segment files: the on-disk unit of the ledger (docs/LEDGER_FORMAT.md).

A segment is an Arrow IPC *file* (``ARROW1`` magic, the schema, one zstd-compressed record batch
per commit, then the footer written when the segment is sealed). While a writer has it open it is
named ``_seg-NNNNNN.arrow`` (the leading ``_`` keeps it out of ``pyarrow.dataset`` discovery, which
cannot read a file without its footer); sealing writes the footer and renames it ``seg-NNNNNN.arrow``.

Batches are located by the byte offset of their IPC message, so an unsealed segment (a live one, or
one left by a crash) reads the same way as a sealed one.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import pyarrow as pa
import pyarrow.ipc as ipc

from events.envelope import StoredEntry

FORMAT_VERSION = "1"
MAGIC = b"ARROW1\x00\x00"

SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("parent", pa.string()),
        pa.field("session", pa.string(), nullable=False),
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("time", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("v", pa.int16(), nullable=False),
        pa.field("payload", pa.large_string(), nullable=False),
        pa.field("blob", pa.large_binary()),
    ],
    metadata={"vak.ledger.format": FORMAT_VERSION},
)

# use_threads=False: a commit is small, and a thread-pool hop per buffer costs more than it saves.
WRITE_OPTIONS = ipc.IpcWriteOptions(compression="zstd", use_threads=False)
_SEG_RE = re.compile(r"^(_?)seg-(\d{6})\.arrow$")


def sealed_name(number: int) -> str:
    return f"seg-{number:06d}.arrow"


def open_name(number: int) -> str:
    return f"_seg-{number:06d}.arrow"


def list_segments(session_dir: Path) -> list[tuple[int, Path, bool]]:
    """(number, path, sealed) for every segment in a session folder, in order."""
    found = []
    for p in session_dir.iterdir():
        m = _SEG_RE.match(p.name)
        if m:
            found.append((int(m.group(2)), p, m.group(1) == ""))
    found.sort(key=lambda t: (t[0], not t[2]))
    return found


def to_batch(entries: list[StoredEntry]) -> pa.RecordBatch:
    return pa.record_batch(
        [
            pa.array([e.id for e in entries], pa.string()),
            pa.array([e.parent for e in entries], pa.string()),
            pa.array([e.session for e in entries], pa.string()),
            pa.array([e.seq for e in entries], pa.int64()),
            pa.array([e.time_us for e in entries], pa.timestamp("us", tz="UTC")),
            pa.array([e.kind for e in entries], pa.string()),
            pa.array([e.v for e in entries], pa.int16()),
            # Canonical payload bytes are UTF-8 by construction; they are written as a string
            # column so Arrow tools (pyarrow, DuckDB) show JSON text.
            pa.array([e.payload for e in entries], pa.large_binary()).view(pa.large_string()),
            pa.array([e.blob for e in entries], pa.large_binary()),
        ],
        schema=SCHEMA,
    )


def from_batch(batch: pa.RecordBatch) -> list[StoredEntry]:
    """Rows of a batch as entries. Payloads are read as raw bytes (no UTF-8 check here)."""
    ids = batch.column("id").to_pylist()
    parents = batch.column("parent").to_pylist()
    sessions = batch.column("session").to_pylist()
    seqs = batch.column("seq").to_pylist()
    times = batch.column("time").cast(pa.int64()).to_pylist()
    kinds = batch.column("kind").to_pylist()
    vs = batch.column("v").to_pylist()
    payloads = batch.column("payload").view(pa.large_binary()).to_pylist()
    blobs = batch.column("blob").to_pylist()
    return [
        StoredEntry(ids[i], parents[i], sessions[i], seqs[i], times[i], kinds[i], vs[i], payloads[i], blobs[i])
        for i in range(batch.num_rows)
    ]


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class SegmentWriter:
    """Appends one record batch per commit to an open segment, fsyncing before it returns."""

    def __init__(self, session_dir: Path, number: int) -> None:
        self.session_dir = session_dir
        self.number = number
        self.path = session_dir / open_name(number)
        self._file: BinaryIO = open(self.path, "xb")
        self._writer = ipc.new_file(self._file, SCHEMA, options=WRITE_OPTIONS)
        self._sync()
        fsync_dir(session_dir)

    @property
    def size(self) -> int:
        return self._file.tell()

    def _sync(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())

    def write(self, batch: pa.RecordBatch) -> int:
        """Write and fsync one batch; returns the byte offset of its IPC message."""
        offset = self._file.tell()
        self._writer.write_batch(batch)
        self._sync()
        if offset == 0:
            # Arrow writes the magic and the schema lazily, with the first batch: find where it ends.
            with pa.OSFile(str(self.path), "rb") as f:
                f.seek(len(MAGIC))
                ipc.read_message(f)
                offset = f.tell()
        return offset

    def seal(self) -> Path:
        """Write the footer, fsync, and rename to the sealed name."""
        self._writer.close()
        self._sync()
        self._file.close()
        sealed = self.session_dir / sealed_name(self.number)
        os.rename(self.path, sealed)
        fsync_dir(self.session_dir)
        return sealed

    def abandon(self) -> None:
        """Close the file without a footer (after a failed write)."""
        try:
            self._file.close()
        except OSError:
            pass


@dataclass
class ScannedBatch:
    offset: int  # byte offset of the IPC message
    end: int  # byte offset just past it
    batch: pa.RecordBatch | None  # None when the message did not decode
    error: str = ""


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


def scan_segment(path: Path, number: int, sealed: bool) -> ScannedSegment:
    """Read every IPC message of a segment, noting where the complete ones end."""
    data = path.read_bytes()
    seg = ScannedSegment(path, number, sealed, [], 0, len(data))
    if len(data) < len(MAGIC) or data[: len(MAGIC)] != MAGIC:
        seg.bad_header = "missing ARROW1 magic"
        seg.torn = seg.bad_header if len(data) < len(MAGIC) and MAGIC.startswith(data) else ""
        return seg
    reader = pa.BufferReader(data)
    reader.seek(len(MAGIC))
    first = True
    seg.good_end = len(MAGIC)
    for offset, msg, err in _messages(reader):
        if err:
            seg.torn = err
            break
        assert msg is not None
        end = reader.tell()
        if first:
            first = False
            if msg.type != "schema":
                seg.bad_header = f"first message is {msg.type}, not the schema"
                return seg
            seg.good_end = end
            continue
        if msg.type != "record batch":
            seg.batches.append(ScannedBatch(offset, end, None, f"unexpected {msg.type} message"))
        else:
            try:
                batch = ipc.read_record_batch(msg, SCHEMA)
                batch.validate(full=True)
                seg.batches.append(ScannedBatch(offset, end, batch))
            except (pa.ArrowException, ValueError, OSError) as exc:
                seg.batches.append(ScannedBatch(offset, end, None, f"{type(exc).__name__}: {exc}"))
        seg.good_end = end
    if first and not seg.torn:
        seg.torn = "no schema message"
    return seg


def _messages(reader: pa.BufferReader) -> Iterator[tuple[int, ipc.Message | None, str]]:
    while True:
        offset = reader.tell()
        try:
            msg = ipc.read_message(reader)
        except EOFError:
            return  # a clean end: EOS marker, or end of an unsealed file exactly at a boundary
        except (pa.ArrowException, OSError, ValueError) as exc:
            yield offset, None, f"incomplete message at byte {offset}: {exc}"
            return
        yield offset, msg, ""


def read_batch_at(path: Path, offset: int) -> pa.RecordBatch:
    with pa.OSFile(str(path), "rb") as f:
        f.seek(offset)
        msg = ipc.read_message(f)
        return ipc.read_record_batch(msg, SCHEMA)


def rewrite_sealed(session_dir: Path, number: int, batches: list[pa.RecordBatch]) -> Path:
    """Write complete batches into a sealed segment atomically (used to seal a crashed segment)."""
    target = session_dir / sealed_name(number)
    tmp = session_dir / f"_tmp-{number:06d}.arrow"
    with open(tmp, "wb") as f:
        with ipc.new_file(f, SCHEMA, options=WRITE_OPTIONS) as w:
            for b in batches:
                w.write_batch(b)
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, target)
    fsync_dir(session_dir)
    return target
