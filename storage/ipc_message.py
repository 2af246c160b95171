"""A commit's encapsulated Arrow IPC message, built from columns without pyarrow.

Building a RecordBatch costs about 45 us whatever its length (two dozen pyarrow calls), and its
serialize() another 5 us: for a one-entry commit that is most of the work outside the sync. The
message's flatbuffer header has the same shape for every batch of this schema (nine nodes and
24 buffers; no field that pyarrow would omit takes its default, since a commit has at least
one row), so ``encode_message`` patches the numbers of a template header that pyarrow
serialized and appends the body buffers (each padded to 8 bytes, as pyarrow writes them).
It is checked against pyarrow once at import, and a property test checks it byte for byte
(tests/unit/test_ledger_perf_message.py); where it does not apply it falls back to pyarrow.
"""

from __future__ import annotations

import itertools
import struct
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from vak_context.events.envelope import StoredEntry
from vak_context.storage.segment.schema import _TIME, SCHEMA, to_batch


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
_TEMPLATE = _template_checked()
