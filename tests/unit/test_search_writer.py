"""How the session's search index takes documents (``storage/search_writer.py``): each turn's close adds one
segment, merged by size tiers so no tier holds more than ``TIER`` segments; the documents stay those a rebuild
from every entry makes, and every turn's words are found; a catch-up with nothing new writes no whoosh
generation."""

from __future__ import annotations

import shutil
from pathlib import Path

from vak_context.events.payloads import Directive, EvidenceBody
from vak_context.storage.ledger import LedgerStore
from vak_context.storage.search import WriterIndex, open_dir, search_path
from vak_context.storage.search_writer import TIER, _tier
from vak_context.storage.sessionsearch import search_sessions


def _turn(store: LedgerStore, session: str, n: int) -> None:
    text = "".join(f"row {i} of turn {n} filler words word{n}x{i % 7}\n" for i in range(50))
    store.append(session, [Directive(text=f"look {n}")])
    store.append(session, [EvidenceBody(tool_use_id=f"t{n}", tool_name="read_file", chars=len(text),
                                        bytes=len(text))], blobs=[text.encode()])


def _segments(root: Path, session: str) -> list[int]:
    ix = open_dir(search_path(root, session))
    try:
        return [segment.doc_count_all() for segment in ix._segments()]
    finally:
        ix.close()


def _documents(root: Path, session: str) -> list[tuple[str, int, str, int]]:
    ix = open_dir(search_path(root, session))
    try:
        with ix.searcher() as searcher:
            return sorted((f["key"], f["turn"], f["kind"], f["seq"]) for f in searcher.all_stored_fields())
    finally:
        ix.close()


def test_each_close_adds_a_segment_and_tiers_keep_their_count_bounded(tmp_path: Path) -> None:
    root = tmp_path / "ledger"
    turns = 3 * TIER
    with LedgerStore(root) as store:
        merged = False
        for n in range(1, turns + 1):
            _turn(store, "s", n)
            before = len(_segments(root, "s")) if n > 1 else 0
            assert store.index_later("s")
            store.index_idle()
            sizes = _segments(root, "s")
            merged = merged or len(sizes) < before + 1
            tiers: dict[int, int] = {}
            for docs in sizes:
                tiers[_tier(docs)] = tiers.get(_tier(docs), 0) + 1
            assert max(tiers.values()) <= TIER, (n, sizes)
        assert merged  # the first tier filled and was merged at least once
        catch_up = store.catch_up
        assert catch_up is not None and catch_up.runs == turns and catch_up.errors == []
        caught_up = _documents(root, "s")
        assert {turn for _key, turn, _kind, _seq in caught_up} == set(range(1, turns + 1))
        for n in (1, TIER, turns):  # a word only turn n's result holds, found after the merges
            hits = search_sessions(store, "s", f"word{n}x3", limit=3).hits
            assert hits and all(h.turn == n for h in hits), n
        shutil.rmtree(search_path(root, "s"))
        WriterIndex(store, "s").close()  # rebuilt from every entry, as one segment
        assert _documents(root, "s") == caught_up and len(_segments(root, "s")) == 1


def test_a_catch_up_with_nothing_new_writes_no_whoosh_generation(tmp_path: Path) -> None:
    root = tmp_path / "ledger"
    with LedgerStore(root) as store:
        _turn(store, "s", 1)
        assert store.index_later("s")
        store.index_idle()
        ix = open_dir(search_path(root, "s"))
        generation = ix.latest_generation()
        assert store.index_later("s")  # nothing appended since
        store.index_idle()
        assert ix.latest_generation() == generation
        index = WriterIndex(store, "s")  # a search's open: nothing to add, so no writer (no whoosh lock) held
        try:
            assert index.buffered == 0 and index.writer.writer is None
            assert [h.turn for h in index.search("word1x3", 2)] == [1, 1]
        finally:
            index.close()
        assert ix.latest_generation() == generation
        ix.close()
