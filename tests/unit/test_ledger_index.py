"""The ledger's index (format 2, storage/ledger_index.py): a session's head and newest profile per model key,
kept on append, caught up on open, and read by binding instead of every entry of every session.

Today's ledgers (format 1, no index files) are the committed ledger in tests/unit/data/ledger-format-1, written
by the code before the index (its README says how): opened by this code, it is indexed, and answers what a
scan of every entry answers."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.fakes.ledger_contract import profile_record
from vak_context.context.capacity.profile import ProfileKey, from_record
from vak_context.engine.binding import recorded_profile
from vak_context.events.envelope import Mapper, StoredEntry
from vak_context.events.payloads import CapacityProfileRecord, Directive, Nudge
from vak_context.storage import index_files, ledger_index, recovery
from vak_context.storage.ledger import LedgerStore
from vak_context.storage.ledger_format import LEDGER_FORMAT
from vak_context.storage.ledger_index import INDEX_NAME, SessionIndex, read_index, read_rest
from vak_context.storage.segment.files import list_segments

FORMAT_1 = Path(__file__).parent / "data" / "ledger-format-1"
KEYS = [("openai", "gpt-4o-mini", ""), ("local", "qwen", ""), ("openai", "gpt-4o", "")]


def scanned(store: LedgerStore, key: tuple[str, str, str]) -> StoredEntry | None:
    """The answer before the index: every entry of every session read, in order, the last newest kept."""
    mapper, best = Mapper(), None
    for session in store.sessions():
        for entry in store.entries(session):
            if entry.kind == "capacity_profile":
                record = mapper.payload_of(entry)
                assert isinstance(record, CapacityProfileRecord)
                if (record.provider, record.model, record.quantisation) == key and (
                        best is None or entry.time_us >= best.time_us):
                    best = entry
    return best


def copy_format_1(tmp_path: Path) -> Path:
    root = tmp_path / "ledger"
    shutil.copytree(FORMAT_1, root, ignore=shutil.ignore_patterns("README.md"))
    return root


def test_a_format_1_ledger_is_indexed_on_open_and_answers_what_a_scan_does(tmp_path: Path) -> None:
    root = copy_format_1(tmp_path)
    sessions = root / "sessions"
    assert not list(sessions.glob(f"*/{INDEX_NAME}"))  # today's ledger: no index
    with LedgerStore(root, readonly=True) as reader:  # before any writer: read from the entries
        before = {key: scanned(reader, key) for key in KEYS}
        assert {key: reader.profile_entry(*key) for key in KEYS} == before
        heads = {name: reader.head(name) for name in reader.sessions()}
    newest = before[KEYS[0]]
    assert newest is not None and newest.session == "s2"  # the newest is in the tail a crash left open
    assert b'"declared_window":12000' in newest.payload and before[KEYS[2]] is None

    with LedgerStore(root) as store:
        assert sorted(store.catch_up_index()) == ["probe", "s1", "s2"]  # on open: each session gets its index
        assert store.catch_up_index() == []  # and only once
        for name, count in (("probe", 2), ("s1", 4), ("s2", 3)):
            index = read_index(sessions / name, name)
            assert index is not None and index.seq == count
            assert index.head == heads[name]
        assert {key: store.profile_entry(*key) for key in KEYS} == before
        assert store.sessions() and not store._sessions  # answered from the index files: no session was opened
        profile = recorded_profile(store, ProfileKey("openai", "gpt-4o-mini"))
        record = Mapper().payload_of(newest)
        assert isinstance(record, CapacityProfileRecord) and profile == from_record(record)

        store.append("s2", [Nudge(tag="t", text="five")])  # the writer opens s2: it seals the crash's tail
        assert (sessions / "s2" / "seg-000001.arrow").exists()
        assert store.profile_entry(*KEYS[0]) == newest
    for name in ("probe", "s1", "s2"):
        index = read_index(sessions / name, name)
        assert index is not None and index.body()["format"] == LEDGER_FORMAT
    with LedgerStore(root, readonly=True) as reader:
        assert reader.verify().ok and {key: reader.profile_entry(*key) for key in KEYS} == before


def test_the_index_follows_each_profile_appended_without_a_seal(tmp_path: Path) -> None:
    """A writer writes the index at each commit holding a profile: another store reads it from the index file,
    nothing after it, while the writer's tail is still open."""
    root = tmp_path / "ledger"
    with LedgerStore(root) as writer:
        writer.append("a", [Directive(text="go"), profile_record("m", 1000)])
        (second,) = writer.append("b", [profile_record("m", 2000)])
        writer.append("b", [Directive(text="more")])  # no profile: the file is not rewritten for it
        on_disk = read_index(root / "sessions" / "b", "b")
        assert on_disk is not None and on_disk.seq == 1 and on_disk.head == second
        assert on_disk.profiles[("openai", "m", "")] == writer.get(second)
        assert not (root / "sessions" / "b" / "seg-000001.arrow").exists()  # still the open tail
        with LedgerStore(root, readonly=True) as reader:
            index = reader.session_index("b")  # the file, then the one batch after it
            assert (index.seq, index.head) == (2, writer.head("b"))
            assert reader.profile_entry("openai", "m") == writer.get(second)
        assert writer.session_index("b").seq == 2  # the writer's own, kept in memory


def test_a_crash_image_reads_the_index_then_its_rest_and_the_next_writer_catches_it_up(tmp_path: Path) -> None:
    """A copy of a live writer's folder is what a SIGKILL leaves (its tail is on disk, unsealed): the reader
    reads the index file and the batches after it; the next writer seals the tail and writes a current index."""
    live, crashed = tmp_path / "live", tmp_path / "crashed"
    with LedgerStore(live) as writer:
        writer.append("a", [profile_record("m", 1000)])
        _, late = writer.append("a", [Directive(text="x"), profile_record("m", 3000)])
        writer.append("a", [Nudge(tag="t", text=str(i)) for i in range(5)])
        shutil.copytree(live, crashed)
        expected = writer.get(late)
    folder = crashed / "sessions" / "a"
    behind = read_index(folder, "a")
    assert behind is not None and behind.seq == 3  # the commit of the last profile
    with LedgerStore(crashed, readonly=True) as reader:
        assert reader.profile_entry("openai", "m") == expected and reader.session_index("a").seq == 8
    with LedgerStore(crashed) as writer:
        assert writer.head("a") == writer.entries("a")[-1].id  # opened: recovered, sealed
        caught_up = read_index(folder, "a")
        assert caught_up is not None and (caught_up.seq, caught_up.segment, caught_up.offset) == (8, 2, 0)
        assert writer.profile_entry("openai", "m") == expected


def test_any_index_is_true_of_what_it_covers_even_after_its_tail_was_sealed(tmp_path: Path) -> None:
    """An index taken inside a tail that has since been sealed (its offsets moved) or grown: reading on from
    it gives what reading the whole session gives, never a wrong head or profile."""
    root = tmp_path / "ledger"
    folder = root / "sessions" / "a"
    with LedgerStore(root) as writer:
        writer.append("a", [profile_record("m", 1000), Directive(text="x")])
        old = read_index(folder, "a")
        assert old is not None and old.offset > 0  # inside the open tail
        (newest,) = writer.append("a", [profile_record("m", 2000)])
        writer.append("a", [Nudge(tag="t", text="y")])
    full = read_rest(folder, SessionIndex("a"))  # from the first segment: the scan the index replaces
    from_old = read_rest(folder, old)  # its tail is now seg-000001, compressed: read from its first batch
    assert (from_old.seq, from_old.head, from_old.profiles) == (full.seq, full.head, full.profiles) == (
        4, full.head, {("openai", "m", ""): newest_entry(root, newest)})


def newest_entry(root: Path, entry_id: str) -> StoredEntry:
    with LedgerStore(root, readonly=True) as reader:
        return reader.get(entry_id)


def test_a_torn_or_foreign_index_file_is_ignored_and_rebuilt_from_the_entries(tmp_path: Path) -> None:
    root = tmp_path / "ledger"
    with LedgerStore(root) as writer:
        (entry,) = writer.append("a", [profile_record("m", 1000)])
    path = root / "sessions" / "a" / INDEX_NAME
    good = path.read_bytes()
    for bad in (good[: len(good) // 2], good.replace(b'"seq":1', b'"seq":9'), good.replace(b'"format":2', b'"format":99')):
        path.write_bytes(bad)
        assert read_index(root / "sessions" / "a", "a") is None
        with LedgerStore(root, readonly=True) as reader:
            found = reader.profile_entry("openai", "m")
            assert found is not None and found.id == entry
    with LedgerStore(root) as store:
        assert store.catch_up_index() == ["a"] and path.read_bytes() == good


def test_a_tail_sealed_between_listing_and_reading_is_read_from_its_sealed_copy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 35's FileNotFoundError (1 in 6 after a crash): a reader listed a session's tail, and the writer
    sealed and removed it before the reader read it. Here the writer seals right after each listing, every time:
    a read-only open and the index's read both read the sealed copy instead."""
    root = tmp_path / "ledger"
    writer = LedgerStore(root)
    (entry,) = writer.append("a", [profile_record("m", 1000)])
    writer.append("a", [Directive(text="x")])
    folder = root / "sessions" / "a"
    (folder / INDEX_NAME).unlink()  # so the index's read lists the segments too
    sealed: list[str] = []

    def listing_then_seal(session_dir: Path) -> list[tuple[int, Path, bool]]:
        listed = list_segments(session_dir)
        if not sealed:
            writer.close()  # seals _seg-000001 into seg-000001 and removes the tail
            sealed.append("a")
        return listed

    for module in (recovery, ledger_index):
        sealed.clear()
        monkeypatch.setattr(module, "list_segments", listing_then_seal)
        if module is ledger_index:  # the writer is closed: a new one, with an open tail again
            writer = LedgerStore(root)
            writer.append("a", [Nudge(tag="t", text="y")])
            (folder / INDEX_NAME).unlink()
        with LedgerStore(root, readonly=True) as reader:
            if module is recovery:
                assert reader.entries("a")[0].id == entry and len(reader.entries("a")) == 2
            found = reader.profile_entry("openai", "m")
            assert found is not None and found.id == entry and sealed == ["a"]
        monkeypatch.undo()
        assert not list(folder.glob("_seg-*.arrow"))


def test_a_held_session_has_its_index_file_rewritten_in_the_background(tmp_path: Path) -> None:
    """Under a hold (the engine's turn) a commit holding a profile marks the index file behind and the store's
    background thread rewrites it, so the append does not wait for the file; a reader meanwhile reads the
    file and the batches after it (the same answer), and the store's close leaves it current."""
    root = tmp_path / "ledger"
    folder = root / "sessions" / "a"
    with LedgerStore(root) as writer:
        writer.append("a", [profile_record("m", 1000)])  # not held: the file is written in the append
        first = read_index(folder, "a")
        assert first is not None and first.seq == 1 and writer.index_files.written == 0
        writer.hold("a")
        ids = [writer.append("a", [Directive(text=str(i)), profile_record("m", 2000 + i)])[1] for i in range(20)]
        with LedgerStore(root, readonly=True) as reader:  # whatever the file says, the rest is read after it
            assert reader.profile_entry("openai", "m") == writer.get(ids[-1])
            assert reader.session_index("a").seq == 41
        writer.index_files.flush()
        on_disk = read_index(folder, "a")
        assert on_disk is not None and on_disk.seq == 41 and on_disk.head == ids[-1]
        assert on_disk.profiles[("openai", "m", "")] == writer.get(ids[-1])
        assert 1 <= writer.index_files.written <= 20  # marks that came while one was written coalesce
        writer.release("a")
        writer.append("a", [Nudge(tag="t", text="after")])
        writer.hold("a")
        (late,) = writer.append("a", [profile_record("m", 9000)])
    closed = read_index(folder, "a")  # the close flushed, then sealed: current
    assert closed is not None and closed.seq == 43 and closed.head == late
    with LedgerStore(root, readonly=True) as reader:
        assert reader.profile_entry("openai", "m") == reader.get(late)


def test_marks_after_the_writer_stopped_are_ignored_and_a_vanished_folder_is_not_an_error(tmp_path: Path) -> None:
    root = tmp_path / "ledger"
    with LedgerStore(root) as writer:
        writer.hold("a")
        writer.append("a", [profile_record("m", 1000)])
        writer.index_files.flush()
        s = writer._sessions["a"]
        shutil.rmtree(tmp_path / "elsewhere", ignore_errors=True)
        moved = s.dir
        s.dir = tmp_path / "elsewhere"  # a folder that is not there: the rewrite fails quietly (a cache)
        writer.index_files.mark(s)
        writer.index_files.flush()
        s.dir = moved
        writer.index_files.stop()
        writer.index_files.mark(s)  # after stop: ignored, nothing waits
        writer.index_files.flush()
        writer.release("a", sync=True)


def test_an_append_written_behind_has_its_index_file_rewritten_in_the_background(tmp_path: Path) -> None:
    """An append written behind outside a hold (the LedgerActor's ``append_chain(behind=True)``, a held turn's
    pass on Ray: synced on its own thread beside the model call) marks the index file behind as a held one
    does: the commit holding a profile does not wait for the file, a reader reads the batches after it, and a
    flush makes it current."""
    root = tmp_path / "ledger"
    folder = root / "sessions" / "a"
    with LedgerStore(root) as writer:
        writer.append("a", [profile_record("m", 1000)])  # not held, synced: the file is written in the append
        assert writer.index_files.written == 0
        [ids] = writer.append_many("a", [([Directive(text="d"), profile_record("m", 2000)], None)], behind=True)
        assert isinstance(ids, list)
        stale = read_index(folder, "a")
        with LedgerStore(root, readonly=True) as reader:
            assert reader.profile_entry("openai", "m") == writer.get(ids[-1])
        writer.index_files.flush()
        on_disk = read_index(folder, "a")
        assert on_disk is not None and on_disk.seq == 3 and on_disk.head == ids[-1] and writer.index_files.written >= 1
        assert stale is not None and (stale.seq == 1 or stale == on_disk)  # behind, or its thread was quick


def test_marks_of_fast_steps_share_one_rewrite_and_a_flush_does_not_wait_for_the_window(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The index thread waits ``COALESCE_S`` after a first mark: every mark within it shares one rewrite of the
    newest index (a loop of fast steps is not a file a step). A flush, and the store's close, write at once."""
    monkeypatch.setattr(index_files, "COALESCE_S", 3600.0)  # a window no test run reaches: only a flush ends it
    root = tmp_path / "ledger"
    folder = root / "sessions" / "a"
    with LedgerStore(root) as writer:
        writer.hold("a")
        ids = [writer.append("a", [Directive(text=str(i)), profile_record("m", 2000 + i)])[1] for i in range(30)]
        assert writer.index_files.written == 0 and read_index(folder, "a") is None  # marked 30 times, waiting
        writer.index_files.flush()
        assert writer.index_files.written == 1
        on_disk = read_index(folder, "a")
        assert on_disk is not None and on_disk.seq == 60 and on_disk.head == ids[-1]
        (late,) = writer.append("a", [profile_record("m", 9000)])
        assert writer.index_files.written == 1
    closed = read_index(folder, "a")  # the close flushed (not waiting out the window), then sealed: current
    assert closed is not None and closed.head == late
