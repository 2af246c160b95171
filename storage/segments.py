"""Arrow IPC segment files: the on-disk unit of the ledger (docs/LEDGER_FORMAT.md).

A segment is an Arrow IPC *file* (``ARROW1`` magic, the schema, one record batch per commit, then
the footer). While a writer has it open it is named ``_seg-NNNNNN.arrow`` (the leading ``_`` keeps
it out of ``pyarrow.dataset`` discovery, which cannot read a file without its footer) and works as
the write-ahead tail: each commit appends its batch *uncompressed*, because zstd costs about 14 µs
per column buffer whatever its size, which is more than half of a small commit. Sealing compacts
the tail into ``seg-NNNNNN.arrow``: the same batches, one per commit, zstd-compressed, with the
footer (written to a temporary file, fsynced, renamed over, then the tail is removed).

Batches are located by the byte offset of their IPC message, so an unsealed segment (a live one, or
one left by a crash) reads the same way as a sealed one.
"""

from __future__ import annotations

import array
import itertools
import os
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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

# Sealed segments: zstd. use_threads=False: a thread-pool hop per buffer costs more than it saves.
WRITE_OPTIONS = ipc.IpcWriteOptions(compression="zstd", use_threads=False)
_SEG_RE = re.compile(r"^(_?)seg-(\d{6})\.arrow$")


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


def to_batch(entries: list[StoredEntry]) -> pa.RecordBatch:
    """The entries as one record batch of the ledger schema.

    Built straight from buffers: ``pa.array`` costs about 10 µs a column whatever its length,
    which for a commit of a few entries is most of the work. Parents and blobs with nulls in
    them, and anything not plain, go through ``pa.array``; a test checks both paths agree.
    """
    n = len(entries)
    parents = [e.parent for e in entries]
    blobs = [e.blob for e in entries]
    try:
        ids = _utf8_column([e.id for e in entries], pa.string(), "i")
        sessions = _utf8_column([e.session for e in entries], pa.string(), "i")
        kinds = _utf8_column([e.kind for e in entries], pa.string(), "i")
        seqs = array.array("q", [e.seq for e in entries])
        times = array.array("q", [e.time_us for e in entries])
        vs = array.array("h", [e.v for e in entries])
    except (UnicodeEncodeError, OverflowError, TypeError):
        return _to_batch_checked(entries)
    payloads = [e.payload for e in entries]
    payload_offsets = array.array("q", [0, *itertools.accumulate(map(len, payloads))])
    return pa.RecordBatch.from_arrays(
        [
            ids,
            _utf8_column(parents, pa.string(), "i") if None not in parents else pa.array(parents, pa.string()),
            sessions,
            pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(seqs)]),
            pa.Array.from_buffers(_TIME, n, [None, pa.py_buffer(times)]),
            kinds,
            pa.Array.from_buffers(pa.int16(), n, [None, pa.py_buffer(vs)]),
            # Canonical payload bytes are UTF-8 by construction; they are written as a string
            # column so Arrow tools (pyarrow, DuckDB) show JSON text.
            pa.Array.from_buffers(pa.large_string(), n, [None, pa.py_buffer(payload_offsets),
                                                         pa.py_buffer(b"".join(payloads))]),
            pa.nulls(n, pa.large_binary()) if blobs.count(None) == n else pa.array(blobs, pa.large_binary()),
        ],
        schema=SCHEMA,
    )


_TIME = pa.timestamp("us", tz="UTC")


# ------------------------------------------------------------------ a commit's IPC message, from columns
#
# Building a RecordBatch costs about 45 us whatever its length (two dozen pyarrow calls), and its
# serialize() another 5 us: for a one-entry commit that is most of the work outside the sync. The
# message's flatbuffer header has the same shape for every batch of this schema (nine nodes and
# 24 buffers; no field that pyarrow would omit takes its default, since a commit has at least
# one row), so ``encode_message`` patches the numbers of a template header that pyarrow
# serialized and appends the body buffers (each padded to 8 bytes, as pyarrow writes them).
# It is checked against pyarrow once at import, and a property test checks it byte for byte
# (tests/test_ledger_perf_message.py); where it does not apply it falls back to pyarrow.

@dataclass(frozen=True)
class _Template:
    head: bytes  # continuation marker, metadata length, flatbuffer header, padding
    body_length_at: int  # Message.bodyLength (int64)
    length_at: int  # RecordBatch.length (int64)
    nodes_at: int  # first FieldNode {length, null_count}
    buffers_at: int  # first Buffer {offset, length}


def _fb_field(data: bytes, table: int, index: int) -> int:
    """Absolute position of field ``index`` of the flatbuffer table at ``table`` (0: absent)."""
    vtable = table - int.from_bytes(data[table:table + 4], "little", signed=True)
    vt_size = int.from_bytes(data[vtable:vtable + 2], "little")
    slot = 4 + 2 * index
    if slot + 2 > vt_size:
        return 0
    rel = int.from_bytes(data[vtable + slot:vtable + slot + 2], "little")
    return table + rel if rel else 0


def _deref(data: bytes, pos: int) -> int:
    return pos + int.from_bytes(data[pos:pos + 4], "little")


def _make_template() -> _Template | None:
    sample = pa.RecordBatch.from_arrays(
        [pa.array(["a"], pa.string()), pa.array([None], pa.string()), pa.array(["s"], pa.string()),
         pa.array([1], pa.int64()), pa.array([1], _TIME), pa.array(["k"], pa.string()),
         pa.array([1], pa.int16()), pa.array(["{}"], pa.large_string()), pa.array([None], pa.large_binary())],
        schema=SCHEMA,
    )
    msg = sample.serialize().to_pybytes()
    meta_len = int.from_bytes(msg[4:8], "little")
    fb = msg[8:8 + meta_len]
    message = _deref(fb, 0)
    header, body_length = _fb_field(fb, message, 2), _fb_field(fb, message, 3)
    if not header or not body_length:
        return None
    rb = _deref(fb, header)
    length, nodes, buffers = _fb_field(fb, rb, 0), _fb_field(fb, rb, 1), _fb_field(fb, rb, 2)
    if not (length and nodes and buffers) or _fb_field(fb, rb, 3) or _fb_field(fb, rb, 4):
        return None  # compression or variadic counts: not the layout this writer knows
    nodes_vec, buffers_vec = _deref(fb, nodes), _deref(fb, buffers)
    if (int.from_bytes(fb[nodes_vec:nodes_vec + 4], "little") != len(SCHEMA)
            or int.from_bytes(fb[buffers_vec:buffers_vec + 4], "little") != _N_BUFFERS):
        return None
    return _Template(msg[:8 + meta_len], 8 + body_length, 8 + length, 8 + nodes_vec + 4, 8 + buffers_vec + 4)


# string, string?, string, int64, timestamp, string, int16, large_string, large_binary?
_N_BUFFERS = 3 + 3 + 3 + 2 + 2 + 3 + 2 + 3 + 3
_NODES = struct.Struct("<" + "qq" * 9)
_BUFFERS = struct.Struct("<" + "qq" * _N_BUFFERS)
_PAD = bytes(8)


def _validity(values: list[Any]) -> tuple[int, bytes]:
    """(null count, bitmap) of a nullable column; an empty bitmap when nothing is null."""
    nulls = values.count(None)
    if not nulls:
        return 0, b""
    bits = 0
    for i, v in enumerate(values):
        if v is not None:
            bits |= 1 << i
    return nulls, bits.to_bytes((len(values) + 7) // 8, "little")


def _str_data(values: list[str]) -> tuple[list[int], bytes]:
    data = "".join(values).encode()
    lengths = list(map(len, values))
    if len(data) != sum(lengths):  # not all ASCII: offsets count bytes, not characters
        encoded = [v.encode() for v in values]
        lengths = list(map(len, encoded))
    return lengths, data


def _offsets(code: str, lengths: Any) -> bytes:
    """An offsets buffer: 0, then the running sum of ``lengths`` (int32 ``i`` or int64 ``q``)."""
    run = [0, *itertools.accumulate(lengths)]
    return struct.pack(f"<{len(run)}{code}", *run)


def encode_message(
    ids: list[str], parents: list[str | None], session: str, first_seq: int, times: list[int],
    kinds: list[str], vs: list[int], payloads: list[bytes], blobs: list[bytes | None],
) -> bytes:
    """The encapsulated IPC message of one commit: equal, byte for byte, to
    ``to_batch(entries).serialize()`` for the same rows (seqs run from ``first_seq``)."""
    n = len(ids)
    tpl = _TEMPLATE
    if tpl is None or n == 0:
        return _message_via_pyarrow(ids, parents, session, first_seq, times, kinds, vs, payloads, blobs)
    try:
        parent_nulls, parent_bitmap = _validity(parents)
        blob_nulls, blob_bitmap = _validity(blobs)
        id_len, id_data = _str_data(ids)
        par_len, par_data = _str_data([p for p in parents if p is not None])
        if parent_nulls:  # offsets run through the nulls with zero length
            it = iter(par_len)
            par_len = [0 if p is None else next(it) for p in parents]
        ses_len, ses_data = _str_data([session] * n)
        kind_len, kind_data = _str_data(kinds)
        blob_vals = [b"" if b is None else b for b in blobs]
        pack = struct.pack
        columns = [
            b"", _offsets("i", id_len), id_data,
            parent_bitmap, _offsets("i", par_len), par_data,
            b"", _offsets("i", ses_len), ses_data,
            b"", pack(f"<{n}q", *range(first_seq, first_seq + n)),
            b"", pack(f"<{n}q", *times),
            b"", _offsets("i", kind_len), kind_data,
            b"", pack(f"<{n}h", *vs),
            b"", _offsets("q", map(len, payloads)), b"".join(payloads),
            blob_bitmap, _offsets("q", map(len, blob_vals)), b"".join(blob_vals),
        ]
    except (OverflowError, TypeError, UnicodeEncodeError, AttributeError, struct.error):
        return _message_via_pyarrow(ids, parents, session, first_seq, times, kinds, vs, payloads, blobs)
    body: list[bytes | bytearray] = []
    spans: list[int] = []
    pos = 0
    for buf in columns:
        size = len(buf)
        spans += (pos, size)
        pad = -size % 8
        body.append(buf)
        if pad:
            body.append(_PAD[:pad])
        pos += size + pad
    head = bytearray(tpl.head)
    struct.pack_into("<q", head, tpl.body_length_at, pos)
    struct.pack_into("<q", head, tpl.length_at, n)
    _NODES.pack_into(head, tpl.nodes_at, n, 0, n, parent_nulls, n, 0, n, 0, n, 0, n, 0, n, 0, n, 0, n, blob_nulls)
    _BUFFERS.pack_into(head, tpl.buffers_at, *spans)
    body.insert(0, head)
    return b"".join(body)


def _message_via_pyarrow(
    ids: list[str], parents: list[str | None], session: str, first_seq: int, times: list[int],
    kinds: list[str], vs: list[int], payloads: list[bytes], blobs: list[bytes | None],
) -> bytes:
    entries = [StoredEntry(ids[i], parents[i], session, first_seq + i, times[i], kinds[i], vs[i], payloads[i],
                           blobs[i]) for i in range(len(ids))]
    return to_batch(entries).serialize().to_pybytes()


def _template_checked() -> _Template | None:
    """The template, if messages made from it equal pyarrow's for a sample of awkward rows."""
    global _TEMPLATE
    _TEMPLATE = _make_template()
    if _TEMPLATE is None:
        return None
    rows = ([f"{i:064x}" for i in range(11)], [None, *(f"{i:064x}" for i in range(9)), None], "s\u00e9",
            7, list(range(11)), ["nudge", "t\u00e9"] * 5 + ["k"], list(range(11)),
            [b'{"a":1}' * i for i in range(11)], [None, b"x", b""] * 3 + [None, b"\xff" * 9])
    ref = _message_via_pyarrow(*rows)
    return _TEMPLATE if encode_message(*rows) == ref else None


_TEMPLATE: _Template | None = None


def _utf8_column(values: list[Any], type_: pa.DataType, offset_code: str) -> pa.Array:
    lengths = list(map(len, values))
    data = "".join(values).encode()
    if len(data) != sum(lengths):  # not all ASCII: offsets count bytes, not characters
        encoded = [v.encode() for v in values]
        data = b"".join(encoded)
        lengths = list(map(len, encoded))
    offsets = array.array(offset_code, [0, *itertools.accumulate(lengths)])
    return pa.Array.from_buffers(type_, len(values), [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _to_batch_checked(entries: list[StoredEntry]) -> pa.RecordBatch:
    """``to_batch`` through ``pa.array``, which checks every value."""
    return pa.record_batch(
        [
            pa.array([e.id for e in entries], pa.string()),
            pa.array([e.parent for e in entries], pa.string()),
            pa.array([e.session for e in entries], pa.string()),
            pa.array([e.seq for e in entries], pa.int64()),
            pa.array([e.time_us for e in entries], _TIME),
            pa.array([e.kind for e in entries], pa.string()),
            pa.array([e.v for e in entries], pa.int16()),
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


def mkdir_durable(path: Path) -> None:
    """Create ``path`` and any missing parents, each followed by an fsync of its parent folder.

    A new folder's entry is in its parent's directory data: until the parent is synced, a power
    cut can lose the folder, and everything in it, even after its files were synced.
    """
    missing: list[Path] = []
    p = path
    while not p.exists():
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            d.mkdir()
        except FileExistsError:
            pass  # made meanwhile by another process; it syncs what it made
        fsync_dir(d.parent)


def unlink_durable(path: Path) -> None:
    """Remove a file and sync its folder, so a power cut cannot bring it back."""
    os.unlink(path)
    fsync_dir(path.parent)


ZERO_FILL_MIN = 64 * 1024  # a new tail is zero-filled this far, and grows by doubling ...
ZERO_FILL_MAX = 4 * 1024 * 1024  # ... up to this much at a time
_ZEROS = bytes(1024 * 1024)


class SegmentWriter:
    """Appends one record batch per commit to a session's tail, syncing before it returns.

    The tail is zero-filled ahead of the writes, as PostgreSQL does with its WAL segments: a
    commit then overwrites blocks the file already has, so its fsync has no file-size change or
    block allocation for the filesystem journal to commit (about two thirds of the cost of an
    fsync after an append, measured here). Each message is written body first and its leading
    continuation marker last, so a reader, and a writer reopening after a crash, sees either the
    whole message or zeros where it would start: zeros read as the end of the stream.
    """

    def __init__(self, session_dir: Path, number: int) -> None:
        self.session_dir = session_dir
        self.number = number
        self.path = session_dir / open_name(number)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        head = MAGIC + SCHEMA.serialize().to_pybytes()
        os.pwrite(self._fd, head, 0)
        self._end = len(head)  # where the next message goes
        self._zeroed = self._end  # the file is zero-filled up to here
        self._fill_to(self._end + ZERO_FILL_MIN)
        os.fsync(self._fd)
        fsync_dir(session_dir)

    @property
    def size(self) -> int:
        return self._end

    def _fill_to(self, end: int) -> None:
        """Zero-fill the file from the current fill mark to ``end`` (rounded up to 4 KiB)."""
        end = (end + 4095) // 4096 * 4096
        pos = self._zeroed
        while pos < end:
            n = min(len(_ZEROS), end - pos)
            os.pwrite(self._fd, _ZEROS[:n] if n < len(_ZEROS) else _ZEROS, pos)
            pos += n
        self._zeroed = max(self._zeroed, end)

    def write(self, batch: pa.RecordBatch) -> int:
        """Write and sync one batch; returns the byte offset of its IPC message."""
        return self.write_message(batch.serialize().to_pybytes())

    def write_message(self, message: bytes) -> int:
        """Write and sync one encapsulated IPC message (uncompressed: marker, length, metadata, body)."""
        msg = memoryview(message)
        offset, size = self._end, len(msg)
        if offset + size > self._zeroed:
            # Keep a zero-filled stretch ahead; the message itself needs no fill, it is written whole.
            grow = min(max(self._zeroed, ZERO_FILL_MIN), ZERO_FILL_MAX)
            os.pwrite(self._fd, msg[4:], offset + 4)
            self._zeroed = max(self._zeroed, offset + size)
            self._fill_to(offset + size + grow)
        else:
            os.pwrite(self._fd, msg[4:], offset + 4)
        os.pwrite(self._fd, msg[:4], offset)  # the continuation marker last: the message is complete
        os.fsync(self._fd)
        self._end = offset + size
        return offset

    def seal(self) -> list[int]:
        """Compact the tail into the sealed, zstd-compressed segment; returns its batch offsets.

        The tail stays until ``remove_tail``, so a reader holding a tail offset can still read it.
        """
        os.close(self._fd)
        self._fd = -1
        scanned = scan_segment(self.path, self.number, False)
        if scanned.torn or scanned.bad_header or any(b.batch is None for b in scanned.batches):
            raise OSError(f"{self.path} changed under its writer: {scanned.torn or scanned.bad_header}")
        return rewrite_sealed(self.session_dir, self.number, [b.batch for b in scanned.batches])

    def remove_tail(self) -> None:
        """Remove the tail once its sealed copy is in place (and readers were pointed at it)."""
        unlink_durable(self.path)

    def abandon(self) -> None:
        """Close the file without sealing it (after a failed write)."""
        if self._fd >= 0:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = -1


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
            try:
                schema = ipc.read_schema(msg)
            except (pa.ArrowException, ValueError) as exc:
                schema, seg.bad_header = None, f"the schema message does not decode: {exc}"
            if schema is not None and not schema.equals(SCHEMA, check_metadata=True):
                seg.bad_header = f"the schema message is not the ledger schema: {schema}"
            if seg.bad_header:
                return seg
            seg.good_end = end
            continue
        body = msg.body.size if msg.body is not None else 0
        if msg.type != "record batch":
            seg.batches.append(ScannedBatch(offset, end, None, f"unexpected {msg.type} message", body))
        else:
            try:
                batch = ipc.read_record_batch(msg, SCHEMA)
                batch.validate(full=True)
                seg.batches.append(ScannedBatch(offset, end, batch, "", body))
            except (pa.ArrowException, ValueError, OSError) as exc:
                seg.batches.append(ScannedBatch(offset, end, None, f"{type(exc).__name__}: {exc}", body))
        seg.good_end = end
    if first and not seg.torn:
        seg.torn = "no schema message"
    if not sealed:
        # A tail is zero-filled ahead of its writes, and zeros read as the end of the stream. Bytes
        # that are not zero after the last complete message are a torn or foreign write.
        rest = len(data[seg.good_end:].rstrip(b"\0"))
        seg.dropped = rest
        if rest and not seg.torn:
            seg.torn = f"{rest} unreadable bytes after the last complete message, at byte {seg.good_end}"
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


def rewrite_sealed(session_dir: Path, number: int, batches: list[pa.RecordBatch]) -> list[int]:
    """Write complete batches into a sealed, zstd-compressed segment atomically.

    Used to seal a tail and to seal a segment a crash left open. Returns each batch's offset.
    """
    target = session_dir / sealed_name(number)
    tmp = session_dir / f"_tmp-{number:06d}.arrow"
    offsets: list[int] = []
    with open(tmp, "wb") as f:
        with ipc.new_file(f, SCHEMA, options=WRITE_OPTIONS) as w:
            for b in batches:
                offsets.append(f.tell())
                w.write_batch(b)
        f.flush()
        os.fsync(f.fileno())
    if offsets:
        offsets[0] = _first_batch_offset(tmp)
    os.rename(tmp, target)
    fsync_dir(session_dir)
    return offsets


def _first_batch_offset(path: Path) -> int:
    # Arrow writes the magic and the schema lazily, with the first batch: find where they end.
    with pa.OSFile(str(path), "rb") as f:
        f.seek(len(MAGIC))
        ipc.read_message(f)
        return int(f.tell())


_TEMPLATE = _template_checked()  # after to_batch and its helpers are defined
