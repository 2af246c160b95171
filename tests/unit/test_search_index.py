"""The session's full-text index (issue 25): whoosh under _search/, a cache of the ledger.

Rare terms of the recorded and generated sessions are found and recalled exactly; a deleted, truncated or
stale index is rebuilt with the same hits; verify-style checks report a tampered index; the chosen whoosh
imports under -W error."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest

from tests.fakes.imported import Imported
from tests.fakes.rare_terms import rare_terms, recalls_exact, recorded_sessions
from vak_context.context.evidence.digest import select
from vak_context.context.history.searchdocs import SessionDocs, windows
from vak_context.events.payloads import Directive, EvidenceBody
from vak_context.sessions.generator import generate_session
from vak_context.storage.ledger import LedgerStore
from vak_context.storage.search import SEARCH_DIR, STATE_FILE, Hit, index_findings, read_index


def test_whoosh_ng_is_the_installed_line_and_imports_under_w_error() -> None:
    assert metadata.version("whoosh-ng").startswith("5.")
    code = ("import whoosh, whoosh.index, whoosh.fields, whoosh.query, whoosh.scoring, whoosh.writing, "
            "whoosh.codec.memory, whoosh.reading, whoosh.searching; import vak_context.storage.search")
    done = subprocess.run([sys.executable, "-W", "error", "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_windows_are_the_lines_recall_counts() -> None:
    text = "".join(f"l{i}\n" for i in range(1, 101))
    got = [(a, b) for a, b, _ in windows(text)]
    assert got == [(1, 40), (31, 70), (61, 100)]
    for a, b, chunk in windows(text):
        assert chunk + "\n" == select(text, "e" * 64, (a, b))
    assert list(windows("")) == []
    assert [(a, b) for a, b, _ in windows("one line, no newline")] == [(1, 1)]


def _body(text: str, name: str = "read_file", encoding: str = "utf-8") -> EvidenceBody:
    return EvidenceBody(tool_use_id="t", tool_name=name, encoding=encoding, chars=len(text), bytes=len(text))  # type: ignore[arg-type]


def test_json_is_indexed_with_escapes_decoded_and_binary_not_at_all() -> None:
    docs = SessionDocs("s")
    [doc] = docs.add(3, "e" * 64, _body('{"note": "caf\\u00e9 z\\u00fcrich\\nwombat"}'), b'{"note": "caf\\u00e9 z\\u00fcrich\\nwombat"}')
    assert "café" in doc.text and "wombat" in doc.text.split("\n")[1]
    assert docs.add(4, "f" * 64, _body("x", encoding="binary"), b"\x00\x01") == []


def _store(root: Path, **kw: object) -> LedgerStore:
    return LedgerStore(root, search=True, **kw)  # type: ignore[arg-type]


def _write(store: LedgerStore, session: str, text: str) -> str:
    store.append(session, [Directive(text="look for it")])
    return store.append(session, [_body(text)], blobs=[text.encode()])[0]


def _key(hits: list[Hit]) -> list[tuple[str, int, int, int]]:
    return [(h.ref, h.start, h.end, h.turn) for h in hits]


BODY = "".join(f"row {i} filler words here\n" for i in range(200)).replace("row 120 ", "row 120 quokka ")


def test_buffered_documents_are_found_before_any_commit(tmp_path: Path) -> None:
    with _store(tmp_path / "l") as store:
        assert store.search_index is not None
        store.search_index.commit_s = 3600.0  # no commit by time in this test
        _write(store, "s", "an earlier result\n")
        assert store.search("s", "earlier", 5)  # the session's first search commits what was indexed
        eid = _write(store, "s", BODY)
        [hit] = store.search("s", "quokka", 5)
        assert store.search_index.index("s").buffered > 0  # searched from the buffer
        assert (hit.ref, hit.turn, hit.kind) == (eid, 2, "evidence")
        assert hit.start <= 121 <= hit.end and "quokka" in hit.snippet
        assert hit.recall == f'recall({{"id": "{eid[:12]}", "range": [{hit.start}, {hit.end}]}})'


def test_deleted_truncated_or_stale_index_is_rebuilt_with_the_same_hits(tmp_path: Path) -> None:
    root = tmp_path / "l"
    with _store(root) as store:
        generate_session(seed=4, turns=6, append=lambda p, b: store.append("g", [p], blobs=[b])[0])
        _write(store, "g", BODY)
        queries = ["quokka", "ledger segment", "planner budget", "evidence digest window"]
        before = {q: _key(store.search("g", q, 5)) for q in queries}
    assert all(before.values())
    folder = root / "sessions" / "g" / SEARCH_DIR
    import shutil

    def damage() -> Iterator[str]:
        shutil.rmtree(folder)
        yield "deleted"
        seg = max(folder.glob("*.seg"), key=lambda p: p.stat().st_size)
        seg.write_bytes(seg.read_bytes()[: seg.stat().st_size // 2])
        yield "truncated"
        state = json.loads((folder / STATE_FILE).read_text())
        state["docs"] += 1
        (folder / STATE_FILE).write_text(json.dumps(state))
        yield "tampered"

    for what in damage():
        with LedgerStore(root, readonly=True) as reader:  # a reader never writes, and still finds everything
            got = {q: _key(read_index(reader, "g", q, 5)[0]) for q in queries}
            assert got == before, what
            assert read_index(reader, "g", "quokka", 5)[1] is not None
            # a missing index is no disagreement (it is a cache); a damaged one is reported
            assert (index_findings(reader, "g") is None) == (what == "deleted"), what
        with _store(root) as store:  # the writer rebuilds it on open
            assert {q: _key(store.search("g", q, 5)) for q in queries} == before, what
        with LedgerStore(root, readonly=True) as reader:
            assert index_findings(reader, "g") is None
            assert read_index(reader, "g", "quokka", 5)[1] is None


def test_an_index_behind_the_ledger_is_caught_up(tmp_path: Path) -> None:
    root = tmp_path / "l"
    with _store(root) as store:
        _write(store, "s", BODY)
    with LedgerStore(root) as plain:  # a writer that does not index (vak import's)
        late = _write(plain, "s", "the numbat came later\n")
    with LedgerStore(root, readonly=True) as reader:
        hits, note = read_index(reader, "s", "numbat", 5)
        assert [h.ref for h in hits] == [late] and note and "behind" in note
        assert index_findings(reader, "s") is None  # behind is not wrong: what it holds agrees
    with _store(root) as store:
        assert [h.ref for h in store.search("s", "numbat", 5)] == [late]
        assert [h.turn for h in store.search("s", "quokka", 5)] == [1]


def test_verify_style_check_names_a_document_the_ledger_does_not_make(tmp_path: Path) -> None:
    root = tmp_path / "l"
    with _store(root) as store:
        _write(store, "s", BODY)
    from whoosh import index as whoosh_index

    from vak_context.context.history.searchdocs import SearchDoc
    from vak_context.storage.search import _fields

    ix = whoosh_index.open_dir(str(root / "sessions" / "s" / SEARCH_DIR))
    with ix.reader() as r:  # only the text is indexed (format 4): the directive is found by its stored kind
        [directive] = [n for n, fields in r.iter_docs() if fields["kind"] == "directive"]
    with ix.writer() as w:
        w.delete_document(directive)
        w.add_document(**_fields(SearchDoc("x" * 64, "s", 1, "directive", "x" * 64, 0, 0, 0, "forged")))
    with LedgerStore(root, readonly=True) as reader:
        finding = index_findings(reader, "s")
    assert finding is not None and "1 document(s) the ledger does not make and lacks 1" in finding


# ------------------------------------------------------------------------------------------ rare terms


def test_rare_terms_of_the_recorded_sessions_are_found_and_recalled(imported: Imported) -> None:
    total = 0
    for session in recorded_sessions(imported):
        picked = rare_terms(imported.store, session)
        total += len(picked)
        found = 0
        for term, eid in picked:
            hits, _note = read_index(imported.store, session, term, 5)
            hit = next((h for h in hits if h.ref == eid), None)
            found += hit is not None and recalls_exact(imported.store, hit, term)
        assert found >= len(picked) - 1, (session, picked, found)  # at least 9 of 10
    assert total >= 40, total


def test_rare_terms_of_a_generated_session_are_found_through_the_writer(tmp_path: Path) -> None:
    with _store(tmp_path / "l") as store:
        generate_session(seed=11, turns=12, append=lambda p, b: store.append("g", [p], blobs=[b])[0])
        picked = rare_terms(store, "g")
        assert len(picked) >= 5
        found = sum(any(h.ref == eid and recalls_exact(store, h, t) for h in store.search("g", t, 5))
                    for t, eid in picked)
        assert found >= len(picked) - 1


@pytest.mark.parametrize("query", ["", "   ", "the of and"])
def test_a_query_without_terms_finds_nothing(tmp_path: Path, query: str) -> None:
    with _store(tmp_path / "l") as store:
        _write(store, "s", BODY)
        assert store.search("s", query, 5) == []


def test_frequent_terms_over_buffer_and_reopened_segments_search_without_a_rebuild(tmp_path: Path) -> None:
    """whoosh-ng's quality pruning reads block statistics its memory codec (and segments written from it)
    lack: the query runs without it, so many matches never fall back to a rebuild."""
    root = tmp_path / "l"
    text = "".join(f"line {i} common words alpha{i}\n" for i in range(60))
    with _store(root) as store:
        assert store.search_index is not None
        store.search_index.commit_s = 3600.0
        for _ in range(12):
            _write(store, "s", text)
        assert len(store.search("s", "line common words", 5)) == 5
        _write(store, "s", text)  # buffered on top of committed segments
        assert len(store.search("s", "line common words alpha3", 5)) == 5
        assert store.search_index.index("s").rebuilt == "no index"
    with _store(root) as store:
        assert store.search_index is not None
        assert len(store.search("s", "line common words", 5)) == 5
        assert store.search_index.index("s").rebuilt is None  # opened as it was, not rebuilt


def test_an_index_of_the_previous_format_is_rebuilt_and_finds_one_character_terms(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An index written by format 2's tokeniser (one-character runs dropped) is rebuilt on open, after which
    a digit tells 26 otherwise alike results apart; a reader meanwhile searches the entries in memory."""
    import re

    from vak_context import bm25
    from vak_context.storage import search_state

    root = tmp_path / "l"
    with monkeypatch.context() as old:  # format 2: terms of two characters or more
        old.setattr(bm25, "_TERM", re.compile(r"[a-z0-9][a-z0-9_]+"))
        old.setattr(search_state, "SEARCH_FORMAT", "vak-search/2")
        with _store(root) as store:
            for n in range(1, 27):
                _write(store, "s", f"topic {n}\nvector databases compared for topic {n}\n")
            hits = store.search("s", "topic 1 vector databases", 5)
            assert len({round(h.score, 6) for h in hits}) == 1  # all alike: the digit was no term
    folder = root / "sessions" / "s" / SEARCH_DIR
    assert json.loads((folder / STATE_FILE).read_text())["format"] == "vak-search/2"
    with LedgerStore(root, readonly=True) as reader:
        assert index_findings(reader, "s") is not None  # reported, not written
        found, note = read_index(reader, "s", "topic 1 vector databases", 5)
        assert found[0].turn == 1 and note is not None
    with _store(root) as store:
        assert store.search_index is not None
        hits = store.search("s", "topic 1 vector databases", 5)
        assert store.search_index.index("s").rebuilt == "it is of the older format vak-search/2"
        assert hits[0].turn == 1 and hits[0].score > hits[1].score
    assert json.loads((folder / STATE_FILE).read_text())["format"] == search_state.SEARCH_FORMAT == "vak-search/4"
