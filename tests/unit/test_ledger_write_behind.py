"""Write-behind appends (``LedgerStore.hold``): written, readable and given their ids at once, made durable by
one fsync at ``sync`` (or by any durable commit after them), so that a turn's appends share one commit per
model call (docs/LEDGER_FORMAT.md, "Durability")."""

from __future__ import annotations

from pathlib import Path

from vak_context.events.payloads import Activity
from vak_context.storage.group_commit import COMMITS
from vak_context.storage.ledger import LedgerStore


def _note(i: int) -> Activity:
    return Activity(activity="test.note", detail={"i": i})


def _commits() -> int:
    return int(COMMITS.snapshot()["commits"])


def test_held_appends_are_readable_at_once_and_share_one_sync(tmp_path: Path) -> None:
    with LedgerStore(tmp_path) as store:
        store.append("s", [_note(0)])  # opens the session's tail (a durable commit)
        store.hold("s")
        before = _commits()
        ids = [store.append_one("s", _note(i)) for i in range(1, 6)]
        assert _commits() == before  # written, not synced
        assert store.written_behind("s")
        assert [store.payload(i).detail["i"] for i in ids] == [1, 2, 3, 4, 5]
        assert store.head("s") == ids[-1] and store.count("s") == 6
        assert store.sync("s") is True and _commits() == before + 1
        assert not store.written_behind("s")
        assert store.sync("s") is False and _commits() == before + 1  # nothing behind: no fsync
        store.release("s")
        store.append("s", [_note(6)])
        assert _commits() == before + 2  # outside the hold every append is durable again


def test_a_durable_append_covers_what_was_written_behind(tmp_path: Path) -> None:
    with LedgerStore(tmp_path) as store:
        store.hold("s")
        store.append("s", [_note(0)])
        assert store.written_behind("s")
        store.release("s", sync=False)  # nothing synced yet
        assert store.written_behind("s")
        before = _commits()
        store.append("s", [_note(1)])  # one fsync covers the file: both entries
        assert _commits() == before + 1 and not store.written_behind("s")


def test_entries_written_behind_are_read_back_after_a_reopen(tmp_path: Path) -> None:
    with LedgerStore(tmp_path) as store:
        store.hold("s")
        ids = store.append("s", [_note(0), _note(1)])
    # The close sealed the tail (a synced copy): everything written behind is on disk, hash links intact.
    with LedgerStore(tmp_path, readonly=True) as store:
        assert [e.id for e in store.entries("s")] == ids
        assert store.verify().ok


def test_append_held_writes_only_where_it_would_wait_for_nothing(tmp_path: Path) -> None:
    """``append_held`` (an event loop's append, no thread hand-off): None for a session not open, not held, or
    with a commit being written or queued, or after concurrent writers; else the same entries ``append``
    writes, behind the hold, made durable by the next sync."""
    with LedgerStore(tmp_path) as store:
        assert store.append_held("s", [_note(0)]) is None  # not open in this store
        store.append("s", [_note(0)])
        assert store.append_held("s", [_note(1)]) is None  # open, not held: an append syncs
        store.hold("s")
        before = _commits()
        ids = [store.append_held("s", [_note(i)]) for i in range(1, 4)]
        assert all(i is not None and len(i) == 1 for i in ids) and _commits() == before
        assert [store.payload(i[0]).detail["i"] for i in ids if i] == [1, 2, 3]
        s = store._sessions["s"]
        with s.cond:
            s.flushing = True  # a commit being written: it would wait for it
        assert store.append_held("s", [_note(9)]) is None
        with s.cond:
            s.flushing = False
            peak, s.peak_inflight = s.peak_inflight, 2.0  # writers were concurrent: the committer leads
        assert store.append_held("s", [_note(9)]) is None
        s.peak_inflight = peak
        assert store.written_behind("s") and store.sync("s") and _commits() == before + 1
        store.release("s")
        assert [e.id for e in store.entries("s")][1:] == [i[0] for i in ids if i]
    with LedgerStore(tmp_path, readonly=True) as reader:
        assert reader.verify().ok and [reader.payload(e.id).detail["i"] for e in reader.entries("s")] == [0, 1, 2, 3]
        assert reader.append_held("s", [_note(4)]) is None  # a reader writes nothing


def test_then_chains_entries_that_name_the_first_ones_in_one_append(tmp_path: Path) -> None:
    """``append(..., then=)`` and ``append_held(..., then=)``: ``then`` gets the first entries' ids and its entries
    follow them in the same chain and the same record batch (a step and the receipt naming it), durable as one."""
    with LedgerStore(tmp_path) as store:
        seen: list[list[str]] = []

        def then(ids: list[str]) -> list[Activity]:
            seen.append(ids)
            return [Activity(activity="test.after", detail={"of": ids[0]}), _note(99)]

        before = _commits()
        ids = store.append("s", [_note(0), _note(1)], then=then)
        assert _commits() == before + 1 and len(ids) == 4 and seen == [ids[:2]]
        assert store.payload(ids[2]).detail == {"of": ids[0]} and store.get(ids[2]).parent == ids[1]
        store.hold("s")
        held = store.append_held("s", [_note(2)], then)
        assert held is not None and seen[-1] == held[:1] and store.payload(held[1]).detail == {"of": held[0]}
        assert _commits() == before + 1 and store.sync("s")
        store.release("s")
        entries = store.entries("s")
        assert [e.id for e in entries] == ids + held
        assert len({e.time_us for e in entries[:4]}) == 1  # one append, one time
    with LedgerStore(tmp_path, readonly=True) as reader:
        assert reader.verify().ok and len(reader.entries("s")) == 7
