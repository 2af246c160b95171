"""The session's full-text index (issue 25): whoosh over every evidence window, card, presentation and directive.

One index per session at ``<root>/sessions/<session>/_search/`` (the underscore keeps it out of
``pyarrow.dataset`` discovery and the segment listing). The documents are
``vak_context.context.history.searchdocs``'s. It is a cache of the ledger: ``state.json`` beside whoosh's files
names the last entry indexed (seq and id) and how many documents were committed, and opening an index whose
state disagrees with its files or with the ledger (torn, deleted, tampered, from another ledger) rebuilds it
from the entries alone (``open_index``). An index behind the ledger (a crash lost its buffered documents, or
the entries were written by a store that does not index, e.g. ``vak import``) is caught up from the entries.

Terms are ``vak_context.bm25.terms`` (``TermsTokenizer``), the tokeniser the planner's relevance, ``find_tools``
and the card index use; scoring is whoosh's BM25F with the same k1 and b. A query is the OR of its terms (no
query syntax: a model's query is never a parse error).

Who writes: whoever holds the session's writer lock. ``storage/indexer.py`` runs the writer side in the
store's process; readers (``vak search``, ``session_search`` with a scope) use ``read_index``, which never
writes: a stale or broken index is searched with the missing documents indexed in memory.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from whoosh.analysis import Token, Tokenizer
from whoosh.fields import STORED, TEXT, Schema
from whoosh.filedb.filestore import FileStorage  # type: ignore[attr-defined]  # whoosh-ng's stubs miss it
from whoosh.query import Or, Term
from whoosh.scoring import BM25F

from vak_context.bm25 import K1, B, terms
from vak_context.context.history.searchdocs import SearchDoc, SessionDocs
from vak_context.errors import LedgerCorrupt, UnknownSession
from vak_context.events.envelope import StoredEntry
from vak_context.storage.ledger_paths import SEARCH_DIR

# The index's files, shared with the catch-up worker (storage/search_state.py); re-exported, as they were here.
from vak_context.storage.search_state import INDEXED_KINDS as INDEXED_KINDS
from vak_context.storage.search_state import SEARCH_FORMAT as SEARCH_FORMAT
from vak_context.storage.search_state import STATE_FILE as STATE_FILE
from vak_context.storage.search_state import Resume as Resume
from vak_context.storage.search_state import docs_after as docs_after
from vak_context.storage.search_state import open_dir as open_dir
from vak_context.storage.search_state import open_resumed as open_resumed
from vak_context.storage.search_state import read_state as read_state
from vak_context.storage.search_state import stale_format as stale_format
from vak_context.storage.search_state import write_state as write_state
from vak_context.storage.search_writer import SegmentBuffer, open_writer

SNIPPET_CHARS = 160
READ_CHUNK = 256  # entries read from the store at a time when catching up


class TermsTokenizer(Tokenizer):
    """whoosh tokens from ``vak_context.bm25.terms``: one analyser for every ranking in the project."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TermsTokenizer)

    def __hash__(self) -> int:
        return hash(TermsTokenizer)

    def __call__(self, value: str, positions: bool = False, chars: bool = False, keeporiginal: bool = False,
                 removestops: bool = True, start_pos: int = 0, start_char: int = 0, tokenize: bool = True,
                 mode: str = "", **kwargs: Any) -> Iterator[Token]:
        t = Token(positions, chars, removestops=removestops, mode=mode, **kwargs)
        for i, term in enumerate(terms(value) if tokenize else [value]):
            t.text = term
            t.boost = 1.0
            if keeporiginal:
                t.original = term
            t.stopped = False
            if positions:
                t.pos = start_pos + i
            if chars:
                t.startchar = t.endchar = start_char
            yield t


def schema() -> Schema:
    """Only ``text`` is indexed, by term frequency (a query is an OR of terms: no phrase, no field but text);
    the rest is stored. (Format 3 indexed every field and each term's positions: most of whoosh's writing.)"""
    return Schema(key=STORED, kind=STORED, ref=STORED, turn=STORED, seq=STORED, start=STORED, end=STORED,
                  tool=STORED, text=TEXT(analyzer=TermsTokenizer(), stored=True, phrase=False))


def _fields(doc: SearchDoc) -> dict[str, Any]:
    return {"key": doc.key, "kind": doc.kind, "ref": doc.ref, "turn": doc.turn, "seq": doc.seq,
            "start": doc.start, "end": doc.end, "tool": doc.tool, "text": doc.text}


@dataclass(frozen=True)
class Hit:
    """One search result: where it is, a snippet, and the recall call that returns it."""

    session: str
    turn: int
    kind: str
    ref: str
    start: int
    end: int
    score: float
    snippet: str
    recall: str
    tool: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"session": self.session, "turn": self.turn, "kind": self.kind, "id": self.ref,
                "lines": [self.start, self.end] if self.kind == "evidence" else None, "score": round(self.score, 3),
                "snippet": self.snippet, "recall": self.recall, "tool": self.tool}


def snippet(text: str, query_terms: set[str], width: int = SNIPPET_CHARS) -> tuple[str, int]:
    """The first line holding a query term (clipped to ``width``) and its offset in lines (0-based)."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if query_terms.intersection(terms(line)):
            line = line.strip()
            return (line if len(line) <= width else line[: width - 1] + "…"), i
    first = lines[0].strip() if lines else ""
    return (first if len(first) <= width else first[: width - 1] + "…"), 0


def run_query(searcher: Any, session: str, query: str, limit: int, *, in_memory: bool = False) -> list[Hit]:
    """The best ``limit`` documents for ``query``, best first (ties by key).

    whoosh's skipping by block quality, and its matcher replacement, are always off: it needs block statistics that postings of its memory
    codec lack (the buffer) and that whoosh-ng 5.4's on-disk postings lack too once a segment was written
    from a buffer (``AttributeError: 'NoneType' object has no attribute 'min_length'`` on a reopened index).
    ``in_memory`` is kept for callers' clarity; it no longer changes the query."""
    wanted = sorted(set(terms(query)))
    if not wanted:
        return []
    # Windows overlap, so a passage near a window edge matches two of them: ask for more, keep the best
    # window of each matched line.
    from whoosh.collectors import TopCollector

    # replace=0: never swap in quality-pruned matchers either (they read the same missing statistics)
    collector = TopCollector(limit=limit * 2, usequality=False, replace=0)
    searcher.search_with_collector(Or([Term("text", t) for t in wanted]), collector)
    results = collector.results()
    hits = []
    seen: set[tuple[str, int]] = set()
    for r in results:
        f = r.fields()
        text, line = snippet(f["text"], set(wanted))
        if (f["ref"], f["start"] + line) in seen:
            continue
        seen.add((f["ref"], f["start"] + line))
        doc = SearchDoc(f["key"], session, f["turn"], f["kind"], f["ref"], f["seq"], f["start"], f["end"], "",
                        f.get("tool", ""))
        hits.append(Hit(session, doc.turn, doc.kind, doc.ref, doc.start, doc.end, float(r.score), text,
                        doc.recall(), doc.tool))
    hits.sort(key=lambda h: (-h.score, h.ref, h.start))
    return hits[:limit]


# ---------------------------------------------------------------------------------------------- the state


def search_path(root: Path, session: str) -> Path:
    return root / "sessions" / session / SEARCH_DIR


def ledger_ids(store: Any, session: str) -> list[tuple[str, str]]:
    """(id, kind) of every entry of the session, by seq, without reading payloads."""
    return [(eid, kind) for _seq, eid, _parent, kind, _t in store.iter_metadata(session)]


def check_index(folder: Path, session: str, ids: Sequence[tuple[str, str]]) -> tuple[Any, dict[str, Any]] | str:
    """The open whoosh index and its state, or what is wrong with it (a sentence)."""
    state = read_state(folder)
    if state is None and (stale := stale_format(folder)) is not None:
        return f"it is of the older format {stale}"
    if state is None:
        return "no index" if not folder.exists() else "its state file is missing or unreadable"
    if state.get("session") != session:
        return f"its state names session {state.get('session')!r}"
    seq = state.get("seq")
    if not isinstance(seq, int) or seq < -1 or seq >= len(ids):
        return f"it indexed up to seq {seq!r}, past the ledger's {len(ids) - 1}"
    if seq >= 0 and ids[seq][0] != state.get("id"):
        return f"the entry it indexed last (seq {seq}) is not the ledger's"
    try:
        ix = open_dir(folder)
        count = ix.doc_count()
    except Exception as exc:  # whoosh raises many kinds on torn files: each means "rebuild"
        return f"whoosh cannot open it ({type(exc).__name__}: {exc})"
    if count != state.get("docs"):
        ix.close()
        return f"it holds {count} documents where its state says {state.get('docs')}"
    return ix, state


def _payload(store: Any, entry: StoredEntry) -> Any:
    return store.mapper.payload_of(entry)


def docs_from_store(store: Any, session: str, start: int, docs: SessionDocs,
                    ids: Sequence[tuple[str, str]]) -> Iterator[SearchDoc]:
    """The documents of the entries from ``start`` on; ``docs`` first counts the turns before ``start``."""
    for eid, kind in ids[:start]:
        docs.note(eid, kind)
    seq = start
    while seq < len(ids):
        wanted = [q for q in range(seq, min(seq + READ_CHUNK, len(ids))) if ids[q][1] in INDEXED_KINDS]
        for q in wanted:
            entry = store.entries(session, q, q + 1)[0]
            yield from docs.add(q, entry.id, _payload(store, entry), entry.blob)
        seq = min(seq + READ_CHUNK, len(ids))


# ---------------------------------------------------------------------------------------------- writer side


class WriterIndex:
    """One session's index held by the session's writer. Its documents go straight to a whoosh segment
    writer, written as one segment at each commit (``SegmentBuffer``, storage/search_writer.py); with
    ``buffered`` (the ``SearchIndexer`` of a ``search=True`` store) to a ``BufferedWriter``, searchable before
    it commits."""

    def __init__(self, store: Any, session: str, *, stop: Callable[[], bool] | None = None,
                 commit: bool = True, resume: Resume | None = None, buffered: bool = False) -> None:
        """Opened, caught up from the ledger (or rebuilt) and committed. ``stop``, asked between entries, ends
        the catch-up early (a closing store): what was indexed so far is committed and the state names the
        last entry taken, so the next open goes on from there. ``commit=False``: left buffered, for a caller
        that closes it next (``close`` commits it). ``resume``: where this process's last catch-up left the
        session (``resume_point``); while the state names that entry only the entries after it are read."""
        self.store, self.session = store, session
        self.folder = search_path(Path(store.root), session)
        self.docs = SessionDocs(session)
        self.rebuilt: str | None = None  # why it was rebuilt on open, for callers and tests
        self.stopped = False  # ``stop`` ended the catch-up before the ledger's last entry
        self.resumed = False  # opened from ``resume``: only the entries after it were read
        resumed = open_resumed(store, session, self.folder, resume) if resume is not None else None
        if resumed is not None and resume is not None:
            self.ix, state, tail, base = resumed
            self.resumed = True
            ids = [(e.id, e.kind) for e in tail]
            self.docs = resume.docs
            self.committed_docs = int(state["docs"])
            start = base
            end = base + len(ids)
            last_id: str | None = resume.entry_id
            found: Iterator[SearchDoc] = docs_after(store, tail, self.docs)
        else:
            ids = ledger_ids(store, session)
            base = 0
            checked = check_index(self.folder, session, ids)
            if isinstance(checked, str):
                self.rebuilt = checked
                shutil.rmtree(self.folder, ignore_errors=True)
                self.folder.mkdir(parents=True)
                self.ix = FileStorage(str(self.folder), supports_mmap=False).create_index(schema())
                self.committed_docs = 0
                start = 0
            else:
                self.ix, state = checked
                self.committed_docs = int(state["docs"])
                start = int(state["seq"]) + 1
            end = len(ids)
            last_id = ids[start - 1][0] if start else None
            found = docs_from_store(store, session, start, self.docs, ids)
        self.writer: Any = open_writer(self.ix, buffered=buffered)
        # what the state file says now (None: none written for this index yet), so a commit with nothing new
        # writes nothing at all
        self.saved: tuple[int, str | None] | None = None if self.rebuilt else (start - 1, last_id)
        self.next_seq = end
        entry = -1  # the seq of the entry whose documents are being added
        for doc in found:
            if doc.seq != entry:
                if stop is not None and stop():
                    self.next_seq = doc.seq  # this entry and the rest are left to the next open
                    self.stopped = True
                    break
                entry = doc.seq
            self.writer.add_document(**_fields(doc))
        self.last_id = last_id if self.next_seq == start else ids[self.next_seq - 1 - base][0]
        if commit:
            self.commit()

    def resume_point(self) -> Resume | None:
        """Where the next catch-up of this session may go on from (None: stopped early, start over)."""
        return None if self.stopped else Resume(self.next_seq - 1, self.last_id, self.docs)

    @property
    def buffered(self) -> int:
        return int(self.writer.bufferedcount)

    def add(self, entries: Iterable[StoredEntry]) -> bool:
        """Index entries appended since; True when one closed a turn (a card: commit now)."""
        closed = False
        for e in entries:
            if e.seq < self.next_seq:
                continue  # already indexed when the index was opened or caught up
            if e.kind in INDEXED_KINDS:
                for doc in self.docs.add(e.seq, e.id, _payload(self.store, e), e.blob):
                    self.writer.add_document(**_fields(doc))
                closed = closed or e.kind == "turn_card"
            self.next_seq = e.seq + 1
            self.last_id = e.id
        return closed

    def commit(self) -> None:
        """Commit the buffer and write the state; with nothing buffered, only a state that moved (entries
        that make no document) is written: an empty whoosh commit still writes a new generation, and the
        state's fsync costs as much as the search. (With a ``BufferedWriter``, ``close`` still commits whoosh's
        writer once: whoosh removes an unfinished writer's files only in a commit, a cancelled writer leaves
        them. A ``SegmentBuffer`` opens a writer only for a document.)"""
        pending = self.buffered
        if pending:
            self.writer.commit()
            self.committed_docs += pending
        elif self.saved == (self.next_seq - 1, self.last_id):
            return
        write_state(self.folder, self.session, self.next_seq - 1, self.last_id, self.committed_docs)
        self.saved = (self.next_seq - 1, self.last_id)

    def search(self, query: str, limit: int) -> list[Hit]:
        if self.buffered and (self.committed_docs == 0 or isinstance(self.writer, SegmentBuffer)):
            # what was added is committed first (a BufferedWriter searches its buffer, but not over an index
            # with no segment yet: a MultiReader of an empty reader has no field lengths)
            self.commit()
        source = self.ix if isinstance(self.writer, SegmentBuffer) else self.writer
        with source.searcher(weighting=BM25F(B=B, K1=K1)) as searcher:
            return run_query(searcher, self.session, query, limit, in_memory=self.buffered > 0)

    def close(self) -> None:
        """Commit what is buffered, then the state, and close: at most one whoosh commit (none where nothing
        was added since the last; a ``BufferedWriter`` commits its buffer and its writer together)."""
        pending, moved = self.buffered, self.saved != (self.next_seq - 1, self.last_id)
        self.writer.close()
        self.committed_docs += pending
        if pending or moved:
            write_state(self.folder, self.session, self.next_seq - 1, self.last_id, self.committed_docs)
            self.saved = (self.next_seq - 1, self.last_id)
        self.ix.close()

    def abandon(self) -> None:
        """Drop it without committing (its files are about to be deleted)."""
        try:
            self.writer.cancel() if isinstance(self.writer, SegmentBuffer) else self.writer.writer.cancel()
        finally:
            self.ix.close()


# ---------------------------------------------------------------------------------------------- reader side


def read_index(store: Any, session: str, query: str, limit: int = 10) -> tuple[list[Hit], str | None]:
    """Search a session without writing anything: (hits, a note when the index could not be used whole).

    A sound index behind the ledger is searched together with the missing entries, indexed in memory; a
    missing or broken one is replaced, for this search only, by an in-memory index of every entry."""
    from whoosh.codec.memory import MemoryCodec  # type: ignore[attr-defined]
    from whoosh.reading import MultiReader
    from whoosh.searching import Searcher

    if session not in store.sessions():
        raise UnknownSession(session)
    folder = search_path(Path(store.root), session)
    ids = ledger_ids(store, session)
    checked = check_index(folder, session, ids)
    note = None
    if isinstance(checked, str):
        ix, start = None, 0
        if checked != "no index" or ids:
            note = f"the search index of {session!r} was not used ({checked}); searched in memory: run `vak reindex`"
    else:
        ix, state = checked
        start = int(state["seq"]) + 1
        if start < len(ids):
            note = f"the search index of {session!r} is {len(ids) - start} entries behind; the rest searched in memory"
    codec = MemoryCodec()
    sch = ix.schema if ix is not None else schema()
    with codec.writer(sch) as w:
        for doc in docs_from_store(store, session, start, SessionDocs(session), ids):
            w.add_document(**_fields(doc))
    ram = codec.reader(sch)
    try:
        if ix is None or ix.doc_count() == 0:
            reader = ram
        else:
            reader = ix.reader()
            if ram.doc_count():
                reader = MultiReader([reader, ram]) if reader.is_atomic() else (reader.add_reader(ram) or reader)
        with Searcher(reader, weighting=BM25F(B=B, K1=K1)) as searcher:
            return run_query(searcher, session, query, limit, in_memory=ram.doc_count() > 0), note
    except LedgerCorrupt:
        raise
    except Exception as exc:  # a file torn under an index that opened: the ledger still answers
        if ix is None:
            raise
        return _memory_only(store, session, query, limit, ids), (
            f"the search index of {session!r} failed ({type(exc).__name__}); searched in memory: run `vak reindex`")
    finally:
        if ix is not None:
            ix.close()


def _memory_only(store: Any, session: str, query: str, limit: int, ids: Sequence[tuple[str, str]]) -> list[Hit]:
    from whoosh.codec.memory import MemoryCodec  # type: ignore[attr-defined]
    from whoosh.searching import Searcher

    codec = MemoryCodec()
    sch = schema()
    with codec.writer(sch) as w:
        for doc in docs_from_store(store, session, 0, SessionDocs(session), ids):
            w.add_document(**_fields(doc))
    with Searcher(codec.reader(sch), weighting=BM25F(B=B, K1=K1)) as searcher:
        return run_query(searcher, session, query, limit, in_memory=True)


def index_findings(store: Any, session: str) -> str | None:
    """What ``vak verify`` reports of a session's search index (None: absent or it agrees with the ledger).
    Read-only: compares the state and document count with whoosh's files and the ledger, and the set of
    document keys with the documents the ledger's entries make."""
    folder = search_path(Path(store.root), session)
    if not folder.exists():
        return None
    ids = ledger_ids(store, session)
    checked = check_index(folder, session, ids)
    if isinstance(checked, str):
        return f"session {session!r}: the search index disagrees with the ledger: {checked}; run `vak reindex`"
    ix, state = checked
    try:
        with ix.searcher() as searcher:
            have = {f["key"] for f in searcher.all_stored_fields()}
    except Exception as exc:
        return f"session {session!r}: the search index cannot be read ({type(exc).__name__}); run `vak reindex`"
    finally:
        ix.close()
    want = {d.key for d in docs_from_store(store, session, 0, SessionDocs(session), ids[: int(state["seq"]) + 1])}
    if have != want:
        return (f"session {session!r}: the search index holds {len(have - want)} document(s) the ledger does not "
                f"make and lacks {len(want - have)}; run `vak reindex`")
    return None
