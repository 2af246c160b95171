"""The card index's whoosh half: schema, a WeightingModel that scores exactly as ``vak_context.bm25``, the
collector that keeps ties for the turn-id tie-break, and the state file that makes the index a checked cache.

Why a WeightingModel of our own: whoosh's BM25F has another idf (ln(N / (df + 1)) + 1) and stores each
document's length in one byte (lossy above a few dozen terms), so its scores cannot equal the planner's
relevance. Here the statistics a score needs (the live document count, the average length, each query term's
live document frequency) are read once per search (``search_stats``) and handed to ``Bm25Weighting``; a
document's exact length is the weight of its one posting in the ``n`` field (``LENGTH_FIELD``), read beside
the term's postings as the matcher moves (postings are in document order), so memory (the buffer) and disk
segments give the same integers. The per-term gain is ``vak_context.bm25.gain``, the same float operations as
``Bm25Index.term_scores``; only the order in which a document's gains are summed over several terms is
whoosh's, which moves a score by a few ulps (the tests compare to 1e-9).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from heapq import heappush, heapreplace
from pathlib import Path
from typing import Any

from whoosh import index as whoosh_index
from whoosh.analysis import Token, Tokenizer
from whoosh.collectors import TopCollector
from whoosh.fields import ID, STORED, TEXT, Schema
from whoosh.query import Or, Term
from whoosh.scoring import BaseScorer, WeightingModel

from vak_context.bm25 import gain, idf, is_common, terms
from vak_context.storage.search import TermsTokenizer
from vak_context.storage.search_writer import tiered_merge

# 2: whoosh (1 was cards.jsonl, BM25 in memory); 3: one-character terms are indexed (vak_context.bm25).
# An index of an older format is rebuilt on open.
CARDS_FORMAT = "vak-cards/3"
STATE_FILE = "vak-cards.json"
OLD_CARDS_FILE = "cards.jsonl"
LENGTH_FIELD = "n"
LENGTH_TERM = "n"


class LengthTokenizer(Tokenizer):
    """One token ``n`` whose boost is the document's term count: whoosh keeps it as the posting's weight,
    exactly (a float of a small integer), in memory and on disk, through merges."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LengthTokenizer)

    def __hash__(self) -> int:
        return hash(LengthTokenizer)

    def __call__(self, value: str, positions: bool = False, chars: bool = False, keeporiginal: bool = False,
                 removestops: bool = True, start_pos: int = 0, start_char: int = 0, tokenize: bool = True,
                 mode: str = "", **kwargs: Any) -> Iterator[Token]:
        t = Token(positions, chars, removestops=removestops, mode=mode, **kwargs)
        t.text, t.boost, t.stopped = LENGTH_TERM, float(value), False
        if positions:
            t.pos = start_pos
        if chars:
            t.startchar = t.endchar = start_char
        yield t


def schema() -> Schema:
    return Schema(turn=ID(stored=True, unique=True), card=STORED,
                  text=TEXT(analyzer=TermsTokenizer(), phrase=False),
                  n=TEXT(analyzer=LengthTokenizer(), phrase=False))


def fields(turn_id: str, card_id: str, text: str) -> dict[str, Any]:
    # one "n" posting per document, even for a text with no terms: N counts every document, as Bm25Index does
    return {"turn": turn_id, "card": card_id, "text": text, "n": str(len(terms(text)))}


# ---------------------------------------------------------------------------------------------- scoring


@dataclass(frozen=True)
class SearchStats:
    """What a BM25 score needs from the whole session: as ``Bm25Index`` counts them, over live documents."""

    documents: int
    average: float
    containing: dict[str, int]  # each query term's document frequency (absent terms left out)

    def chosen(self, wanted: Sequence[str]) -> list[str]:
        """The terms searched: ``Bm25Index.search``'s rule (common terms only when nothing else matches)."""
        present = [t for t in wanted if self.containing.get(t)]
        rare = [t for t in present if not is_common(self.documents, self.containing[t])]
        return rare or present


def _leaf_live_ids(leaf: Any, fieldname: str, text: str) -> Iterator[tuple[int, float]]:
    if (fieldname, text) not in leaf:
        return
    m = leaf.postings(fieldname, text)
    while m.is_active():
        if not leaf.is_deleted(m.id()):
            yield m.id(), m.weight()
        m.next()


def search_stats(reader: Any, wanted: Sequence[str]) -> SearchStats:
    """The statistics over live documents. Without deletions whoosh's totals are exact; a re-indexed turn
    leaves a deleted document (in the buffer or a segment, until a merge drops it) that whoosh still counts,
    so then they are counted from the postings (rare: a card is written once per turn)."""
    documents = reader.doc_count()
    if not reader.has_deletions():
        total = reader.frequency(LENGTH_FIELD, LENGTH_TERM) if documents else 0.0
        containing = {t: reader.doc_frequency("text", t) for t in wanted}
    else:
        leaves = [leaf for leaf, _ in reader.leaf_readers()]
        total = sum(w for leaf in leaves for _, w in _leaf_live_ids(leaf, LENGTH_FIELD, LENGTH_TERM))
        containing = {t: sum(1 for leaf in leaves for _ in _leaf_live_ids(leaf, "text", t)) for t in wanted}
    average = (int(total) / documents if documents else 0.0) or 1.0  # Bm25Index.average_length
    return SearchStats(documents, average, {t: n for t, n in containing.items() if n})


class Bm25Weighting(WeightingModel):
    """``vak_context.bm25``'s score: idf = ``bm25.idf`` over the live documents, the gain ``bm25.gain``."""

    use_final = False

    def __init__(self, stats: SearchStats) -> None:
        self.stats = stats

    def supports_block_quality(self) -> bool:
        return False

    def scorer(self, searcher: Any, fieldname: str, text: str | bytes, qf: int = 1) -> BaseScorer:
        term = text.decode("utf-8") if isinstance(text, bytes) else text
        weight = idf(self.stats.documents, self.stats.containing[term])
        return _Scorer(searcher.reader(), weight, self.stats.average)


class _Scorer(BaseScorer):
    def __init__(self, leaf: Any, weight: float, average: float) -> None:
        self.weight, self.average = weight, average
        self.lengths = leaf.postings(LENGTH_FIELD, LENGTH_TERM)  # every document has its one "n" posting

    def supports_block_quality(self) -> bool:
        return False

    def score(self, matcher: Any) -> float:
        doc, lengths = matcher.id(), self.lengths
        if lengths.id() != doc:
            lengths.skip_to(doc)  # the matcher moves forward only: so does this
        return gain(self.weight, matcher.weight(), lengths.weight(), self.average)


class TopWithTies(TopCollector):
    """whoosh's top-N, also keeping the documents tied with the N-th score: whoosh breaks ties by document
    number, the card index by turn id (``best_first``), so the caller sorts these and cuts to N."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit=limit, usequality=False, replace=0)  # see storage/search.py's run_query
        self.ties: list[tuple[float, int]] = []

    def _collect(self, global_docnum: int, score: float) -> float:
        items = self.items
        self.total += 1
        if len(items) < self.limit:
            heappush(items, (score, 0 - global_docnum))
        elif score > items[0][0]:
            out = heapreplace(items, (score, 0 - global_docnum))
            self.minscore = items[0][0]
            self.ties = [t for t in [*self.ties, out] if t[0] == self.minscore]
        elif score == items[0][0]:
            self.ties.append((score, 0 - global_docnum))
        return 0 - score

    def scored(self) -> list[tuple[float, int]]:
        return [(score, 0 - neg) for score, neg in [*self.items, *self.ties]]


def query(chosen: Sequence[str]) -> Or:
    return Or([Term("text", t) for t in chosen])


# ---------------------------------------------------------------------------------------------- the state


def _raw_state(folder: Path) -> Any:
    try:
        return json.loads((folder / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def stale_format(folder: Path) -> str | None:
    """The format an index of another version states (it is rebuilt), or None."""
    state = _raw_state(folder)
    stated = state.get("format") if isinstance(state, dict) else None
    return stated if isinstance(stated, str) and stated != CARDS_FORMAT else None


def read_state(folder: Path) -> dict[str, Any] | None:
    state = _raw_state(folder)
    return state if isinstance(state, dict) and state.get("format") == CARDS_FORMAT else None


def write_state(folder: Path, session: str, generation: int, docs: int) -> None:
    """Replace the state atomically after each whoosh commit: a crash leaves the old one or the new one."""
    tmp = folder / f"_tmp-{STATE_FILE}"
    data = json.dumps({"format": CARDS_FORMAT, "session": session, "generation": generation, "docs": docs})
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, folder / STATE_FILE)


def check(folder: Path, session: str) -> Any | str:
    """The open whoosh index when its files and its state agree, or what is wrong (a sentence).

    Cheap, for every open: no document is read. ``generation`` is whoosh's commit number, so a state left
    from another commit (a copy, a hand edit, a crash between whoosh's commit and the state's) is caught."""
    if not folder.exists():
        return "no index"
    if (folder / OLD_CARDS_FILE).exists():
        return f"it is of the older format ({OLD_CARDS_FILE})"
    state = read_state(folder)
    if state is None and (stale := stale_format(folder)) is not None:
        return f"it is of the older format {stale}"
    if state is None:
        return "its state file is missing or unreadable"
    if state.get("session") != session:
        return f"its state names session {state.get('session')!r}"
    try:
        ix = whoosh_index.open_dir(str(folder))  # type: ignore[attr-defined]  # whoosh-ng's stubs miss it
        generation, count = ix.latest_generation(), ix.doc_count()
    except Exception as exc:  # whoosh raises many kinds on torn files: each means "rebuild"
        return f"whoosh cannot open it ({type(exc).__name__}: {exc})"
    if generation != state.get("generation") or count != state.get("docs"):
        ix.close()
        return (f"whoosh holds {count} documents at commit {generation} where its state says "
                f"{state.get('docs')} at {state.get('generation')}")
    return ix


COMMIT_LOCK = "VAK_COMMITLOCK"
LOCK_WAIT_S = 10.0


@contextmanager
def commit_lock(folder: Path) -> Iterator[None]:
    """Held around a whoosh commit and the state written after it, and around a rebuild: a reader that
    finds the two disagreeing takes it before it rebuilds, so it never rebuilds under a commit in flight."""
    from whoosh.filedb.filestore import FileStorage  # type: ignore[attr-defined]  # whoosh-ng's stubs miss it
    from whoosh.util.filelock import try_for  # type: ignore[attr-defined]  # whoosh-ng's stubs miss it

    lock = FileStorage(str(folder)).lock(COMMIT_LOCK)
    if not try_for(lock.acquire, timeout=LOCK_WAIT_S, delay=0.01):
        raise TimeoutError(f"the card index at {folder} is being committed by another writer")
    try:
        yield
    finally:
        lock.release()


class PendingDocs:
    """The documents added since the last commit, kept as their fields: whoosh analyses them only at the commit
    (one segment writer for all of them, one segment, ``storage.search_writer.tiered_merge``) or when a search
    needs them before it (one in-memory segment for all of them, kept until the next add). whoosh's
    ``BufferedWriter`` (this class's predecessor) analysed each document into an in-memory segment of its own as
    it came (a writer opened, flushed and closed per document), then read every posting back at the commit: a
    turn's close paid for it on a worker thread (bench/embed.py's cpu ms over main cpu).

    Holds nothing of whoosh's between commits (no write lock, no file): an object never closed leaks nothing,
    and two writers of one session (two in-process sessions, another process) take turns instead of failing.
    A document whose turn is in the committed segments is committed at once (``CardIndex._add``): its old
    document must be deleted, which takes whoosh's segment writer; so the pending ones are all new turns."""

    def __init__(self) -> None:
        self.docs: dict[str, dict[str, Any]] = {}  # turn id -> fields, in the order added
        self._codec: Any = None  # the in-memory segment of ``docs`` a search made, until the next add

    def __len__(self) -> int:
        return len(self.docs)

    def add(self, fields: dict[str, Any]) -> None:
        self.docs.pop(fields["turn"], None)  # a later document for a pending turn replaces it
        self.docs[fields["turn"]] = fields
        self._codec = None

    def reader(self, ix: Any) -> Any:
        """A reader of ``ix``'s committed segments and these documents (the caller closes it)."""
        from whoosh.codec.memory import MemoryCodec  # type: ignore[attr-defined]  # whoosh-ng's stubs miss it
        from whoosh.reading import MultiReader

        if self._codec is None:
            codec = MemoryCodec()
            with codec.writer(ix.schema) as w:
                for fields in self.docs.values():
                    w.add_document(**fields)
            self._codec = codec
        reader, ram = ix.reader(), self._codec.reader(ix.schema)
        if reader.is_atomic():
            return MultiReader([reader, ram])
        reader.add_reader(ram)
        return reader

    def commit(self, ix: Any, committed: set[str]) -> None:
        """Write the documents as one segment; a turn in ``committed`` (the turns in the segments) is
        re-indexed (its old document deleted). Kept if whoosh fails: the next commit tries again."""
        writer = ix.writer(limitmb=64, timeout=LOCK_WAIT_S, delay=0.01)
        try:
            for turn, fields in self.docs.items():
                if turn in committed:
                    writer.update_document(**fields)
                else:
                    writer.add_document(**fields)
        except BaseException:
            writer.cancel()
            raise
        writer.commit(mergetype=tiered_merge)
        self.docs.clear()
        self._codec = None


def live_docs(ix: Any) -> int:
    """The index's undeleted documents, from its table of contents: what ``ix.doc_count()`` answers, without
    opening a reader of every segment (whoosh's way, tens of ms on a large index, after each commit)."""
    return sum(segment.doc_count() for segment in ix._read_toc().segments)


def open_as_is(folder: Path) -> Any | None:
    try:
        return whoosh_index.open_dir(str(folder))  # type: ignore[attr-defined]
    except Exception:  # torn: nothing to search until its writer commits or it is rebuilt
        return None


def create(folder: Path) -> Any:
    folder.mkdir(parents=True, exist_ok=True)
    return whoosh_index.create_in(str(folder), schema())  # type: ignore[attr-defined]
