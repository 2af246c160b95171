"""The faster write path keeps the format and the ids byte for byte.

The commit's IPC message is built from column buffers (``segments.encode_message``) instead of a
pyarrow RecordBatch; ids are chained once per append (``envelope.chain_ids``); a writer alone
commits its own group in its own thread. These tests hold each against the reference path, and
a fixed ledger against the bytes the code before issue 14 wrote.
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vak_context.events.envelope import StoredEntry, blob_meta, chain_ids, compute_id
from vak_context.events.payloads import Directive, EvidenceBody, Nudge
from vak_context.storage import seal_options
from vak_context.storage.ipc_message import _TEMPLATE, encode_message
from vak_context.storage.ledger import LedgerStore
from vak_context.storage.segment.schema import MAGIC, to_batch

names = st.text(min_size=1, max_size=12)
row = st.tuples(
    names,  # id (any string: the encoder must not assume hex)
    st.none() | names,  # parent
    st.integers(-(2**62), 2**62),  # time
    names,  # kind
    st.integers(-(2**15), 2**15 - 1),  # v
    st.text(max_size=40).map(lambda t: t.encode("utf-8", "surrogatepass")),  # payload bytes
    st.none() | st.binary(max_size=20),  # blob
)


@given(st.lists(row, min_size=1, max_size=20), names, st.integers(0, 2**40))
@settings(max_examples=200)
def test_message_equals_pyarrows_serialization(rows: list[tuple[Any, ...]], session: str, first_seq: int) -> None:
    """encode_message gives the bytes RecordBatch.serialize() gives for the same rows: nulls,
    blobs, non-ASCII names and any row count included."""
    assert _TEMPLATE is not None, "the template did not pass its check against pyarrow at import"
    entries = [StoredEntry(i, p, session, first_seq + k, t, kind, v, pay, blob)
               for k, (i, p, t, kind, v, pay, blob) in enumerate(rows)]
    cols = list(zip(*rows, strict=True))
    fast = encode_message(list(cols[0]), list(cols[1]), session, first_seq, list(cols[2]), list(cols[3]),
                          list(cols[4]), list(cols[5]), list(cols[6]))
    assert fast == to_batch(entries).serialize().to_pybytes()


@given(st.none() | st.text(alphabet="0123456789abcdef", min_size=64, max_size=64) | st.just("odd parent é"),
       st.sampled_from(["s", "sess.ion-1", "odd session é"]), st.integers(0, 10**6),
       st.integers(0, 2**60) | st.just(-1),
       st.lists(st.tuples(st.sampled_from(["nudge", "directive", "odd kind"]), st.integers(1, 3),
                          st.binary(max_size=30), st.none() | st.binary(max_size=8)), min_size=1, max_size=8))
@settings(max_examples=200)
def test_chained_ids_equal_compute_id(parent: str | None, session: str, first: int, time_us: int,
                                      entries: list[tuple[str, int, bytes, bytes | None]]) -> None:
    """chain_ids gives, entry by entry, the id compute_id gives with the previous id as parent."""
    kinds, vs, payloads, blobs = (list(c) for c in zip(*entries, strict=True))
    infos = [blob_meta(b) for b in blobs]
    expected, prev = [], parent
    for i, (kind, v, payload, info) in enumerate(zip(kinds, vs, payloads, infos, strict=True)):
        prev = compute_id(prev, session, first + i, time_us, kind, v, payload, info)
        expected.append(prev)
    assert chain_ids(parent, session, first, time_us, kinds, vs, payloads, infos) == expected


# Written by the code before issue 14 (commit 36922b1) with this clock and these appends.
GOLDEN_IDS = "f623896f2da49b16da972f1ed2ce20a99d7794e0fe83a124f476e52f6574562d"
GOLDEN_HEAD = "5c0a3fcc9f1eb4a9dc8814d18072070a9fbcfe956efbd55e7c1f3d3b77c414d9"
GOLDEN_TAIL = "7656bb8a7778d0215b2b5fd0d3c808fd8b1377053c129062ce936dbbdd30bf39"
GOLDEN_SEALED = "aae0715bfde74bededabf9dbca02c3f1919634b7eade4690891d235b54e512d5"


def _bodies(path: Path) -> list[bytes]:
    """The body bytes of every record batch message in a segment file."""
    out = []
    with pa.memory_map(str(path), "r") as f:
        f.seek(len(MAGIC))
        while True:
            try:
                msg = ipc.read_message(f)
            except EOFError:
                return out
            if msg.type == "record batch":
                out.append(msg.body.to_pybytes())


@pytest.mark.parametrize("sealed", ["zstd", "plain"])
def test_a_ledger_is_byte_for_byte_what_the_earlier_code_wrote(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               sealed: str) -> None:
    """Ids, the tail and the sealed segment of a fixed ledger hash to what the code before issue
    14 wrote: non-ASCII text, a blob, a batch of 20 and an explicit parent included. Its batches are small,
    so it is sealed plain since issue 35 (storage/seal_options.py: the same batches, uncompressed); with
    zstd forced, the sealed segment is what the earlier code wrote, byte for byte."""
    if sealed == "zstd":
        monkeypatch.setattr(seal_options, "PLAIN_BELOW", 0)
    t = [1_700_000_000_000_000]

    def clock() -> int:
        t[0] += 7
        return t[0]

    store = LedgerStore(tmp_path, clock=clock)
    ids: list[str] = []
    ids += store.append("golden", [Directive(text="héllo \u2028 wörld \"q\" \\ \n\t")])
    ids += store.append("golden", [Nudge(tag=f"t{i}", text="x" * i) for i in range(20)])
    ids += store.append("golden", [EvidenceBody(tool_use_id="u", tool_name="cat", encoding="binary", chars=3,
                                                bytes=3), Nudge(tag="a", text="b")], blobs=[b"\xff\x00z", None])
    ids += store.append("golden", [Nudge(tag="after", text="blob")], parent=ids[3])
    folder = tmp_path / "sessions" / "golden"
    tail = next(folder.glob("_seg-*.arrow"))
    assert hashlib.sha256("".join(ids).encode()).hexdigest() == GOLDEN_IDS and ids[-1] == GOLDEN_HEAD
    assert hashlib.sha256(tail.read_bytes()).hexdigest() == GOLDEN_TAIL
    in_tail = _bodies(tail)
    store.close()
    sealed_path = next(folder.glob("seg-*.arrow"))
    if sealed == "zstd":
        assert hashlib.sha256(sealed_path.read_bytes()).hexdigest() == GOLDEN_SEALED
    else:  # the tail's batch messages, body for body, in the file format with its footer
        assert _bodies(sealed_path) == in_tail and len(in_tail) == 4
    with LedgerStore(tmp_path, readonly=True) as reader:
        assert reader.verify().ok


def test_inline_and_committer_commits_interleave_into_one_chain(tmp_path: Path) -> None:
    """With inline commits on, a writer alone commits inline (no committer thread starts); when 8
    more join, the committer thread takes over; the result is one verified chain with every
    acknowledged id in it, in each writer's order."""
    with LedgerStore(tmp_path) as store:
        store.inline_commits = True  # off by default (docs/PERFORMANCE.md); the path must stay correct
        alone = [store.append_one("c", Nudge(tag="alone", text=str(i))) for i in range(30)]
        assert store.commits("c") == 30 and store._sessions["c"].committer is None
        got: dict[int, list[str]] = {}
        start = threading.Barrier(8)

        def writer(w: int) -> None:
            start.wait()
            got[w] = [store.append_one("c", Nudge(tag=f"w{w}", text=str(i))) for i in range(25)]

        threads = [threading.Thread(target=writer, args=(w,)) for w in range(8)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        after = [store.append_one("c", Nudge(tag="alone", text=f"after {i}")) for i in range(5)]
        chain = [e.id for e in store.chain_to_root(store.head("c") or "")]
        assert chain[:30] == alone and chain[-5:] == after and len(chain) == 30 + 8 * 25 + 5
        position = {eid: k for k, eid in enumerate(chain)}
        for ids in got.values():
            assert [position[i] for i in ids] == sorted(position[i] for i in ids)
        report = store.verify()
        assert report.ok and report.entries == len(chain)
    with LedgerStore(tmp_path) as reopened:
        assert reopened.head("c") == chain[-1] and reopened.verify().ok
