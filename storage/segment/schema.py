"""The ledger's Arrow schema, and entries to and from record batches (docs/LEDGER_FORMAT.md)."""

from __future__ import annotations

import array
import itertools
from typing import Any

import pyarrow as pa

from vak_context.events.envelope import StoredEntry

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

_TIME = pa.timestamp("us", tz="UTC")

# The schema message (continuation marker, length, flatbuffer, padding) that follows the magic in every
# segment: the tail writer writes these bytes and pyarrow's file writer, which seals, writes the same.
# verify() holds a segment's copy to them byte for byte, because a flipped byte pyarrow's reader skips
# (padding, a field it does not read) can still change what another Arrow reader sees.
SCHEMA_MESSAGE = SCHEMA.serialize().to_pybytes()
# blake3 of format 1's schema message as pyarrow 26 writes it: segments written before an Arrow upgrade
# that serialises the schema differently still verify. Such an upgrade adds its digest here.
FORMAT_1_SCHEMA_MESSAGES = frozenset({"3787d651a0e150699a69326a5fe130981d7cb7473c779b0c2bdb172cf64c6499"})


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
    times = batch.column("time").view(pa.int64()).to_pylist()  # the same int64s, no compute cast (16 us a batch)
    kinds = batch.column("kind").to_pylist()
    vs = batch.column("v").to_pylist()
    payloads = batch.column("payload").view(pa.large_binary()).to_pylist()
    blobs = batch.column("blob").to_pylist()
    return [
        StoredEntry(ids[i], parents[i], sessions[i], seqs[i], times[i], kinds[i], vs[i], payloads[i], blobs[i])
        for i in range(batch.num_rows)
    ]


