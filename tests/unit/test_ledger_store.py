"""The Arrow ledger store: appends, reads, chains, group commit, limits, and plain-Arrow readability."""

from __future__ import annotations

import threading
from pathlib import Path

import duckdb
import pyarrow.dataset as ds
import pytest

from vak_context.errors import (
    InvalidName,
    InvalidUtf8,
    LedgerClosed,
    OversizeEntry,
    SessionLocked,
    UnknownEntry,
    UnknownKind,
    UnknownParent,
    UnknownSession,
)
from vak_context.events.envelope import LedgerLimits
from vak_context.events.payloads import Directive, EvidenceBody, Nudge
from vak_context.sessions.generator import generate_session
from vak_context.storage.ledger import LedgerStore


def test_append_read_and_chain(ledger_dir: Path) -> None:
    with LedgerStore(ledger_dir) as store:
        a, b = store.append("s", [Directive(text="one"), Nudge(tag="t", text="two")])
        c = store.append_one("s", Nudge(tag="t", text="three"))
        assert store.head("s") == c
        assert [e.id for e in store.chain_to_root(c)] == [a, b, c]
        assert store.get(b).parent == a
        assert store.payload(a) == Directive(text="one")
        assert [e.seq for e in store.entries("s", 1, 3)] == [1, 2]
        # a branch: an explicit parent makes a tree; chain_to_root follows parents only
        d = store.append_one("s", Nudge(tag="t", text="branch"), parent=a)
        assert [e.id for e in store.chain_to_root(d)] == [a, d]
        assert store.head("s") == d
    with LedgerStore(ledger_dir) as store:  # reopen: same entries, same head, next append continues
        assert store.head("s") == d
        e = store.append_one("s", Nudge(tag="t", text="after reopen"))
        assert store.get(e).seq == 4 and store.get(e).parent == d
        assert store.verify().ok


def test_group_commit_shares_fsyncs(ledger_dir: Path) -> None:
    with LedgerStore(ledger_dir) as store:
        store.append_one("g", Nudge(tag="t", text="first"))
        before = store.commits("g")

        def writer(w: int) -> None:
            for i in range(40):
                store.append_one("g", Nudge(tag="t", text=f"{w}-{i}"))

        threads = [threading.Thread(target=writer, args=(w,)) for w in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert store.count("g") == 1 + 16 * 40
        commits = store.commits("g") - before
        assert commits < 16 * 40, "concurrent appends must share commits"
        report = store.verify()
        assert report.ok and report.entries == 641
        # one linear chain despite the concurrency
        chain = store.chain_to_root(store.head("g") or "")
        assert len(chain) == 641


def test_big_evidence_body_is_stored_whole(ledger_dir: Path) -> None:
    body = (b"0123456789abcdef" * 4096 + b"\xff\xfe not utf-8\n") * 1025  # a little over 64 MiB
    assert len(body) >= 64 * 1024 * 1024
    with LedgerStore(ledger_dir) as store:
        eid = store.append_one("big", EvidenceBody(tool_use_id="t", tool_name="cat", encoding="binary",
                                                   chars=len(body), bytes=len(body)), blob=body)
    with LedgerStore(ledger_dir) as store:
        got = store.get(eid)
        assert got.blob == body
        assert store.verify().ok


def test_bad_input_gets_typed_errors_and_nothing_is_lost(ledger_dir: Path) -> None:
    with LedgerStore(ledger_dir, limits=LedgerLimits(max_payload_bytes=4096, max_blob_bytes=1 << 20)) as store:
        ok = store.append_one("s", Nudge(tag="t", text="kept"))
        with pytest.raises(UnknownKind):
            store.append("s", [{"kind": "mind_reading", "text": "x"}])
        with pytest.raises(UnknownParent):
            store.append("s", [Nudge(tag="t", text="x")], parent="0" * 64)
        with pytest.raises(OversizeEntry):
            store.append("s", [Nudge(tag="t", text="x" * 5000)])
        with pytest.raises(OversizeEntry):
            store.append("s", [EvidenceBody(tool_use_id="t", tool_name="x", chars=1, bytes=1)], blobs=[b"x" * (2 << 20)])
        with pytest.raises(InvalidUtf8):
            store.append("s", [Nudge(tag="t", text="bad \udcff text")])
        with pytest.raises(InvalidName):
            store.append("../escape", [Nudge(tag="t", text="x")])
        with pytest.raises(UnknownEntry):
            store.get("not-an-id")
        with pytest.raises(UnknownSession):
            store.head("never-written")
        # a failed append in the middle of a batch writes none of the batch
        with pytest.raises(UnknownKind):
            store.append("s", [Nudge(tag="t", text="a"), {"kind": "nope"}])
        assert store.count("s") == 1 and store.head("s") == ok
    with pytest.raises(LedgerClosed):
        store.append_one("s", Nudge(tag="t", text="x"))
    with LedgerStore(ledger_dir) as store:
        assert [e.id for e in store.entries("s")] == [ok]


def test_one_writer_per_session(ledger_dir: Path) -> None:
    with LedgerStore(ledger_dir) as first:
        first.append_one("s", Nudge(tag="t", text="x"))
        with LedgerStore(ledger_dir) as second:
            with pytest.raises(SessionLocked):
                second.append_one("s", Nudge(tag="t", text="y"))
            second.append_one("other", Nudge(tag="t", text="fine"))  # another session is free
        reader = LedgerStore(ledger_dir, readonly=True)
        assert reader.count("s") == 1  # readers never need the lock
        reader.close()


def test_plain_arrow_tools_read_the_folder(ledger_dir: Path) -> None:
    with LedgerStore(ledger_dir) as store:
        gen = generate_session(seed=1, turns=6, append=lambda p, b: store.append_one("demo", p, blob=b))
        store.append_one("other", Directive(text="second session"))
    # No project code below this line: pyarrow.dataset and DuckDB read the segments directly.
    dataset = ds.dataset(str(ledger_dir / "sessions"), format="arrow")
    table = dataset.to_table(columns=["session", "seq", "kind", "id", "parent", "payload"])
    assert table.num_rows == len(gen.ids) + 1
    demo = table.filter(ds.field("session") == "demo").sort_by("seq")
    assert demo.column("id").to_pylist() == gen.ids
    con = duckdb.connect()
    con.register("ledger", dataset)
    rows = con.execute(
        "select kind, count(*) from ledger where session = 'demo' group by kind order by kind"
    ).fetchall()
    assert dict(rows)["directive"] == 6
    text = con.execute(
        "select json_extract_string(payload, '$.text') from ledger where kind = 'directive' and session = 'other'"
    ).fetchone()
    assert text == ("second session",)
