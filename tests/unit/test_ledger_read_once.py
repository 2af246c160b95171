"""A session read back after a restart is read from its files once (issue 35, the restart gaps): opening it
decodes every batch to index it, and keeps the newest of them decoded, so what reads it next (a resumed
``vak serve`` session's client history, the planner's and assembler's views, the evidence index: each reads
the session whole) decodes nothing again; and ``entries_of`` reads only the batches that hold the kinds asked
for. Counted, not timed: ``read_batch_at`` (one batch from a segment file) is what costs."""

from __future__ import annotations

from pathlib import Path

import pytest

from vak_context.events.payloads import Activity, Directive, EvidenceBody, Nudge
from vak_context.storage import ledger as ledger_module
from vak_context.storage.ledger import LedgerStore
from vak_context.storage.segment.files import read_batch_at


def count_reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Path, int]]:
    """The batches the store reads from segment files from now on (the real read, counted)."""
    reads: list[tuple[Path, int]] = []

    def counted(path: Path, offset: int) -> object:
        reads.append((path, offset))
        return read_batch_at(path, offset)

    monkeypatch.setattr(ledger_module, "read_batch_at", counted)
    return reads


def write_session(root: Path, turns: int) -> list[str]:
    """A session of one batch per append (as vak serve appends): a directive, a result's body, a note."""
    ids = []
    with LedgerStore(root) as store:
        for t in range(turns):
            ids += store.append("s", [Directive(text=f"turn {t}")])
            ids += store.append("s", [EvidenceBody(tool_use_id=f"c{t}", tool_name="read", chars=4_000, bytes=4_000)],
                                blobs=[b"x" * 4_000])
            ids += store.append("s", [Activity(activity="serve.history", detail={"turn": t})])
            ids += store.append("s", [Nudge(tag="t", text=f"nudge {t}")])
    return ids


def test_a_session_opened_again_is_read_back_whole_without_reading_a_batch_twice(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ids = write_session(tmp_path / "ledger", 30)
    reads = count_reads(monkeypatch)
    with LedgerStore(tmp_path / "ledger") as store:
        head = store.head("s")  # opens the session: its batches are decoded once, to index them
        assert head == ids[-1]
        for _ in range(3):  # the three folds of a resumed session, and the client history
            assert [e.id for e in store.chain_to_root(head)] == ids
            assert [e.id for e in store.entries("s")] == ids
        assert reads == []  # every read came from the batches opening the session decoded


def test_entries_of_reads_only_the_batches_that_hold_the_kinds_asked_for(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_session(tmp_path / "ledger", 20)
    monkeypatch.setattr(ledger_module, "CACHE_BYTES", 0)  # nothing kept: every read goes to the files
    with LedgerStore(tmp_path / "ledger") as store:
        store.head("s")
        reads = count_reads(monkeypatch)
        notes = store.entries_of("s", ("activity",))
        assert len(reads) == 20  # one batch per note, none of the other 60 (directives, bodies, nudges)
        assert [store.mapper.payload_of(e).detail["turn"] for e in notes] == list(range(20))
        assert [e.seq for e in store.entries_of("s", ("activity", "directive"), start=40)] == [
            e.seq for e in store.entries("s", 40) if e.kind in ("activity", "directive")]


def test_a_resumed_conversation_reads_only_the_notes_of_its_session(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from vak_context.serve.conversation import HISTORY, read_held

    root = tmp_path / "ledger"
    with LedgerStore(root) as store:
        for t in range(10):  # a served turn: its directive and result, then the note of what the client holds
            store.append("s", [Directive(text=f"turn {t}")])
            store.append("s", [EvidenceBody(tool_use_id=f"c{t}", tool_name="read", chars=9, bytes=9)],
                         blobs=[b"x" * 9])
            store.append("s", [Activity(activity=HISTORY, detail={
                "digests": [f"u{t}", f"a{t}"], "roles": ["user", "assistant"], "closed": True})])
    monkeypatch.setattr(ledger_module, "CACHE_BYTES", 0)
    with LedgerStore(root) as store:
        store.head("s")
        reads = count_reads(monkeypatch)
        held = read_held(store, "s")
        assert len(reads) == 10  # the ten notes; none of the twenty other entries
        assert held.digests == [d for t in range(10) for d in (f"u{t}", f"a{t}")]


def test_opening_a_session_holds_up_no_other_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A session is opened under its own lock, not the store's: while one session's open is held (its files
    read, after a crash its tail sealed: fsyncs), another session opens and reads, and a second reader of the
    held session waits for that one open rather than reading the files again."""
    import threading

    from vak_context.storage import recovery

    for name in ("a", "b"):
        with LedgerStore(tmp_path) as store:
            store.append(name, [Directive(text=f"hello {name}")])
    entered, release = threading.Event(), threading.Event()
    opened: list[str] = []

    def held(s: object, **kwargs: object) -> object:
        opened.append(s.name)  # type: ignore[attr-defined]
        if s.name == "a":  # type: ignore[attr-defined]
            entered.set()
            release.wait()
        return recovery.load_session(s, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ledger_module, "load_session", held)
    with LedgerStore(tmp_path) as store:
        readers = [threading.Thread(target=store.entries, args=("a",)) for _ in range(2)]
        readers[0].start()
        entered.wait()
        readers[1].start()
        b_read = threading.Event()

        def read_b() -> None:
            store.entries("b")
            b_read.set()

        other = threading.Thread(target=read_b)
        other.start()
        try:  # b opened and read while a's open is held (a bound on a failure, not a sleep)
            assert b_read.wait(60), "reading session b waited for session a's open"
        finally:
            release.set()
        other.join()
        for t in readers:
            t.join()
        assert store.count("a") == 1
    assert sorted(opened) == ["a", "b"]  # a was opened once, by the first reader


def test_a_session_of_more_batches_than_the_cache_keeps_keeps_its_newest_half_and_reads_the_rest_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ids = write_session(tmp_path / "ledger", 10)  # 40 batches of one entry
    monkeypatch.setattr(ledger_module, "CACHE_BATCHES", 16)
    reads = count_reads(monkeypatch)
    with LedgerStore(tmp_path / "ledger") as store:
        head = store.head("s")
        assert head is not None
        assert len(store._cache) == 8  # the newest half of the cache's batches, decoded together, cut per batch
        assert [e.id for e in store.entries("s", len(ids) - 8)] == ids[-8:]
        assert reads == []
        assert [e.id for e in store.chain_to_root(head)] == ids  # the older ones from their files
        assert len(reads) == len(ids) - 8


def test_what_a_store_writes_is_read_back_without_reading_its_file_and_as_a_fresh_store_decodes_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The step's next fold reads what the step just wrote: the batch is kept as written (issue 37), each entry
    equal, field for field and byte for byte, to what another store decodes from the file."""
    reads = count_reads(monkeypatch)
    with LedgerStore(tmp_path / "ledger") as store:
        ids = store.append("s", [Directive(text="look")])
        ids += store.append("s", [EvidenceBody(tool_use_id="c1", tool_name="read", chars=5, bytes=5),
                                  Nudge(tag="t", text="again")], blobs=[b"hello", None])
        written = store.entries("s")
        assert [e.id for e in written] == ids
        assert reads == []  # every entry from the batches as they were written
    with LedgerStore(tmp_path / "ledger") as fresh:
        monkeypatch.setattr(ledger_module, "CACHE_BYTES", 0)  # read from the files
        assert fresh.entries("s") == written
        assert [e.blob for e in written] == [None, b"hello", None]
