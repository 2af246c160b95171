"""Entries a caller chains itself (``At``, ``chained``): the ids it computes are the ids the writer gives, and
the writer appends them only where the caller says the head is (issue 37 item 1: the Ray driver knows a
step's ids without a call)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from vak_context.actors.ledger.client import LedgerClient
from vak_context.errors import ChainMoved
from vak_context.events.envelope import At, Mapper, chained
from vak_context.events.payloads import Directive, EvidenceBody, Nudge
from vak_context.storage.ledger import LedgerStore

ENCODE = Mapper().encode_payload


def test_chained_ids_are_the_ids_written(ledger_dir: Path) -> None:
    with LedgerStore(ledger_dir) as store:
        head = store.append_one("s", Directive(text="start"))
        body = EvidenceBody(tool_use_id="c1", tool_name="grep", media_type="text/plain", encoding="utf-8",
                            chars=5, bytes=5)
        at = At(head, store.count("s"), 1_700_000_000_000_000)
        entries = chained(at, "s", [ENCODE(Nudge(tag="t", text="one")), ENCODE(body)], [None, b"hello"])
        ids = store.append("s", [(e.kind, e.payload) for e in entries], blobs=[e.blob for e in entries], at=at)
        assert ids == [e.id for e in entries]
        read = store.entries("s", 1)
        assert read == entries  # parent, seq, the caller's time, kind, payload and blob, as chained
        assert store.head("s") == entries[-1].id and store.verify().ok


def test_a_chain_on_a_head_that_moved_writes_nothing(ledger_dir: Path) -> None:
    with LedgerStore(ledger_dir) as store:
        head = store.append_one("s", Directive(text="start"))
        at = At(head, 1, 1_700_000_000_000_000)
        entries = chained(at, "s", [ENCODE(Nudge(tag="t", text="late"))])
        moved = store.append_one("s", Nudge(tag="t", text="another writer first"))
        with pytest.raises(ChainMoved, match="moved on"):
            store.append("s", [(e.kind, e.payload) for e in entries], at=at)
        with pytest.raises(ChainMoved):  # the right parent at the wrong seq is no better
            store.append("s", [(e.kind, e.payload) for e in entries], at=At(moved, 1, at.time_us))
        assert store.count("s") == 2 and store.head("s") == moved


def test_a_client_commits_runs_of_several_times_in_one_commit(ledger_dir: Path) -> None:
    with LedgerStore(ledger_dir) as store:
        head = store.append_one("s", Directive(text="start"))
        first = chained(At(head, 1, 10), "s", [ENCODE(Nudge(tag="t", text="a")), ENCODE(Nudge(tag="t", text="b"))])
        second = chained(At(first[-1].id, 3, 20), "s", [ENCODE(Nudge(tag="t", text="c"))])
        commits = store.commits("s")
        asyncio.run(LedgerClient(str(ledger_dir), store).append_chain_async("s", [*first, *second]))
        assert store.commits("s") == commits + 1
        assert [e.time_us for e in store.entries("s", 1)] == [10, 10, 20]
        assert store.entries("s", 1) == [*first, *second] and store.verify().ok
