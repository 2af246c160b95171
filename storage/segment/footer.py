"""The footer of a sealed segment, read byte by byte and held against the batches of its stream.

An Arrow IPC file ends with a flatbuffer ``Footer`` (format/File.fbs): the schema, and one
``Block`` per record batch (the batch message's offset, its metadata length including the
8-byte prefix and padding, and its body length), then the footer's length (int32) and
``ARROW1``. Readers that seek by the footer (``pyarrow.ipc.open_file``, ``pyarrow.dataset``,
DuckDB) trust those blocks; a reader of the stream never looks at them. So a footer whose blocks
were flipped or swapped reads fine one way and fails, or returns rows out of order, the other.
``check_footer`` parses the blocks here (pyarrow does not expose them) and compares them, in
order, with the messages as read from the stream; and compares the footer's schema with the
ledger schema through pyarrow's own footer reader (which also runs the flatbuffer verifier).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.ipc as ipc

FILE_MAGIC = b"ARROW1"
EOS = b"\xff\xff\xff\xff\x00\x00\x00\x00"  # the end-of-stream marker, just before the footer
METADATA_V5 = 4  # MetadataVersion.V5, what every current Arrow writer writes
_BLOCK = struct.Struct("<qi4xq")  # Block: offset int64, metaDataLength int32, (padding), bodyLength int64


@dataclass(frozen=True)
class Block:
    offset: int
    metadata_length: int
    body_length: int


@dataclass(frozen=True)
class StreamBatch:
    """A record batch message as read from the stream: where it starts and how long its parts are."""

    offset: int
    metadata_length: int
    body_length: int
    batch: pa.RecordBatch


class FooterError(ValueError):
    """The footer bytes do not parse as an Arrow file footer."""


class _Buf:
    """Bounds-checked little-endian reads from the footer flatbuffer."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def _get(self, fmt: str, pos: int) -> int:
        size = struct.calcsize(fmt)
        if pos < 0 or pos + size > len(self.data):
            raise FooterError(f"offset {pos} points outside the footer ({len(self.data)} bytes)")
        return int(struct.unpack_from(fmt, self.data, pos)[0])

    def u16(self, pos: int) -> int:
        return self._get("<H", pos)

    def i16(self, pos: int) -> int:
        return self._get("<h", pos)

    def u32(self, pos: int) -> int:
        return self._get("<I", pos)

    def i32(self, pos: int) -> int:
        return self._get("<i", pos)


@dataclass(frozen=True)
class Footer:
    version: int
    dictionaries: list[Block]
    record_batches: list[Block]
    start: int  # byte offset of the footer flatbuffer in the file


def read_footer(data: bytes) -> Footer:
    """Parse a whole segment file's footer. Raises FooterError when it does not parse."""
    if len(data) < 8 + 10 or data[-6:] != FILE_MAGIC:
        raise FooterError("the file does not end with the ARROW1 magic")
    length = struct.unpack_from("<i", data, len(data) - 10)[0]
    start = len(data) - 10 - length
    if length <= 0 or start < 8:
        raise FooterError(f"footer length {length} does not fit the file ({len(data)} bytes)")
    buf = _Buf(data[start: start + length])
    table = buf.u32(0)
    vtable = table - buf.i32(table)
    vt_size = buf.u16(vtable)
    if vt_size < 4 or vt_size % 2:
        raise FooterError(f"footer vtable size {vt_size} is malformed")

    def field(index: int) -> int:  # the field's position in the table, 0 when it is absent
        slot = 4 + 2 * index
        rel = buf.u16(vtable + slot) if slot < vt_size else 0
        return table + rel if rel else 0

    def blocks(index: int) -> list[Block]:
        pos = field(index)
        if not pos:
            return []
        vec = pos + buf.u32(pos)
        n = buf.u32(vec)
        if vec + 4 + n * _BLOCK.size > len(buf.data):
            raise FooterError(f"a block vector of {n} blocks runs past the footer")
        return [Block(*_BLOCK.unpack_from(buf.data, vec + 4 + i * _BLOCK.size)) for i in range(n)]

    version_pos = field(0)
    version = buf.i16(version_pos) if version_pos else 0  # flatbuffers omit a default (V1 = 0)
    if not field(1):
        raise FooterError("the footer has no schema")
    return Footer(version, blocks(2), blocks(3), start)


def check_footer(data: bytes, stream: list[StreamBatch], schema: pa.Schema, stream_end: int) -> str:
    """Why the sealed segment's footer does not describe its stream, or "" when it does.

    ``stream`` is every record batch message in stream order; ``stream_end`` is where the last
    message ends (the end-of-stream marker follows it, then the footer).
    """
    try:
        footer = read_footer(data)
    except FooterError as exc:
        return f"the footer does not parse: {exc}"
    if footer.version != METADATA_V5:
        return f"the footer says metadata version {footer.version}, not V5 ({METADATA_V5})"
    if data[stream_end: stream_end + len(EOS)] != EOS or footer.start != stream_end + len(EOS):
        return (f"the footer starts at byte {footer.start}, not right after the stream's end-of-stream "
                f"marker at byte {stream_end}")
    if footer.dictionaries:
        return f"the footer lists {len(footer.dictionaries)} dictionary blocks; the ledger schema has none"
    if len(footer.record_batches) != len(stream):
        return f"the footer lists {len(footer.record_batches)} record batches where the stream has {len(stream)}"
    for i, (block, seen) in enumerate(zip(footer.record_batches, stream, strict=True)):
        if (block.offset, block.metadata_length, block.body_length) != (
                seen.offset, seen.metadata_length, seen.body_length):
            return (f"footer block {i} says offset {block.offset}, metadata {block.metadata_length} bytes, "
                    f"body {block.body_length} bytes; the stream's batch {i} is at {seen.offset} with "
                    f"{seen.metadata_length} and {seen.body_length}")
    # Then read the file as plain Arrow tools do: pyarrow's footer reader runs the flatbuffer
    # verifier, and decodes each batch with the footer's schema. Schema.equals does not see every
    # part of a schema that changes how buffers decode (a flipped bit in the footer's schema table
    # can), so each batch read through the footer must equal the batch read from the stream.
    try:
        with ipc.open_file(pa.BufferReader(data)) as reader:
            if not reader.schema.equals(schema, check_metadata=True):
                return f"the footer's schema differs from the ledger schema: {reader.schema}"
            if reader.num_record_batches != len(stream):
                return f"pyarrow reads {reader.num_record_batches} batches from the footer, the stream has {len(stream)}"
            for i, seen in enumerate(stream):
                batch = reader.get_batch(i)
                batch.validate(full=True)  # before equals(): comparing invalid buffers can read out of bounds
                if not batch.equals(seen.batch):
                    return f"record batch {i} read through the footer differs from the stream's batch {i}"
    except (pa.ArrowException, OSError, ValueError) as exc:
        return f"pyarrow cannot read the file through its footer: {exc}"
    return ""
