"""BM25 relevance by turn position, scored as numpy vector operations. Pure.

``SessionView`` keeps one ``PositionBm25`` for its session. Each term's postings (positions and
counts) and every document's length are kept as numpy columns that grow in place, so a plan scores
a term with a handful of vector operations over its postings instead of a Python step per posting,
and hands the planner sorted positions and raw scores (``TurnScores``) it can normalise, digest and
rank as arrays.

It is the project's one BM25 (``vak_context.bm25``: its tokeniser, k1, b, idf and common-term rule, through
``Bm25Index.weighted_terms``), and every float equals the one ``vak_context.bm25.Bm25Index.scores`` computes:
the same IEEE operations in the same order per posting (``idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b *
length / avg))``), and per document the terms added in the same (sorted) order into an accumulator that
starts at 0.0 (as ``0.0 + g == g``, the first term's gain is kept as is, as the dictionary path does).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import compress, repeat
from operator import neg, sub, truediv

import numpy as np
import numpy.typing as npt

from vak_context.bm25 import Bm25Index, query_terms

Positions = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]

class _Postings:
    """One term's postings as two columns (document position, term count), grown by doubling. Their
    order is not the documents' order: each document occurs once, so the scores do not depend on it.

    New postings wait in Python lists until the term is queried (``flush``): folding in a turn then
    costs a list append per term, not a numpy call, and a re-indexed turn (the newest, nearly always)
    is usually still waiting there."""

    __slots__ = ("counts", "pending_counts", "pending_positions", "positions", "size")

    def __init__(self) -> None:
        self.positions: Positions = np.empty(0, dtype=np.int64)
        self.counts: Floats = np.empty(0, dtype=np.float64)
        self.size = 0
        self.pending_positions: list[int] = []
        self.pending_counts: list[int] = []

    def __len__(self) -> int:
        return self.size + len(self.pending_positions)

    def append(self, position: int, count: int) -> None:
        self.pending_positions.append(position)
        self.pending_counts.append(count)

    def flush(self) -> tuple[Positions, Floats]:
        """The postings as numpy columns, the waiting ones moved in."""
        if self.pending_positions:
            size = self.size + len(self.pending_positions)
            if size > len(self.positions):
                capacity = max(2 * len(self.positions), size, 4)
                positions = np.empty(capacity, dtype=np.int64)
                counts = np.empty(capacity, dtype=np.float64)
                positions[: self.size], counts[: self.size] = self.positions[: self.size], self.counts[: self.size]
                self.positions, self.counts = positions, counts
            self.positions[self.size : size] = self.pending_positions
            self.counts[self.size : size] = self.pending_counts
            self.size = size
            self.pending_positions.clear()
            self.pending_counts.clear()
        return self.positions[: self.size], self.counts[: self.size]

    def remove(self, position: int) -> None:
        """Drop ``position``: from the waiting ones, or else the last column entry moves into its slot."""
        pending = self.pending_positions
        if pending and pending[-1] == position:
            pending.pop()
            self.pending_counts.pop()
            return
        if position in pending:
            k = pending.index(position)
            del pending[k], self.pending_counts[k]
            return
        last = self.size - 1
        if self.positions[last] != position:
            slot = int(np.flatnonzero(self.positions[: self.size] == position)[0])
            self.positions[slot] = self.positions[last]
            self.counts[slot] = self.counts[last]
        self.size = last


class PositionBm25(Bm25Index[int]):
    """``Bm25Index`` keyed by turn position, with numpy columns beside its dictionaries: ``columns``
    scores a query as vector operations (the same floats as ``scores``)."""

    # Below this many postings over a query's terms, the dictionary path (``Bm25Index.scores``) is
    # faster than numpy's per-call overhead; it gives the same floats, as Python lists.
    VECTOR_POSTINGS = 256

    def __init__(self) -> None:
        super().__init__()
        # The numpy columns are built from the dictionaries on the first query that needs them, then
        # kept in step: a short session never pays for them.
        self._columns: dict[str, _Postings] | None = None
        self._lengths: Floats = np.zeros(0, dtype=np.float64)  # by position; a removed one is never read
        self._total: Floats = np.zeros(0, dtype=np.float64)  # the scores' accumulator, kept zeroed

    def add(self, doc_id: int, text: str) -> None:
        super().add(doc_id, text)
        if self._columns is not None:
            self._add_columns(doc_id)

    def _add_columns(self, doc_id: int) -> None:
        assert self._columns is not None
        if doc_id >= len(self._lengths):
            grown = np.zeros(max(2 * len(self._lengths), doc_id + 1, 16), dtype=np.float64)
            grown[: len(self._lengths)] = self._lengths
            self._lengths = grown
        self._lengths[doc_id] = self.lengths[doc_id]
        for t in self._terms[doc_id]:
            column = self._columns.get(t)
            if column is None:
                column = self._columns[t] = _Postings()
            column.append(doc_id, self.postings[t][doc_id])

    def remove(self, doc_id: int) -> None:
        if self._columns is not None:
            for t in self._terms.get(doc_id, ()):
                column = self._columns[t]
                column.remove(doc_id)
                if not len(column):
                    del self._columns[t]
        super().remove(doc_id)

    def columns(self, query: str) -> tuple[Positions, Floats] | tuple[list[int], list[float]]:
        """The positions that score above 0 (ascending) and their raw BM25 scores: ``scores`` as
        columns, numpy arrays when the query's postings are many, else Python lists (equal values)."""
        if not self.lengths:
            return [], []
        wanted = query_terms(query)
        postings = sum(len(self.postings.get(t, ())) for t in wanted)
        if postings < self.VECTOR_POSTINGS:
            by_position = self.term_scores(wanted)
            ordered = sorted(by_position)
            return ordered, list(map(by_position.__getitem__, ordered))
        if self._columns is None:
            self._columns = {}
            for doc_id in self.lengths:
                self._add_columns(doc_id)
        avg, k1, b = self.average_length(), self.K1, self.B
        if len(self._total) != len(self._lengths):
            self._total = np.zeros(len(self._lengths), dtype=np.float64)
        total = self._total  # zero everywhere between queries: only the query's postings are touched
        touched: list[Positions] = []
        try:
            for t, idf in self.weighted_terms(wanted):  # as ``Bm25Index.scores``: common terms skipped
                at, tf = self._columns[t].flush()
                damping = k1 * (1 - b + b * self._lengths[at] / avg)
                gain = idf * tf * (k1 + 1) / (tf + damping)
                total[at] += gain  # positions are distinct within a term: one add each, in term order
                touched.append(at)
            if not touched:
                return [], []
            # the scored positions are the union of the terms' postings, ascending: a sort of those (mostly in
            # order already), not a pass over every position of the session
            at = np.sort(np.concatenate(touched) if len(touched) > 1 else touched[0], kind="stable")
            scored = at[np.concatenate(([True], at[1:] != at[:-1]))] if len(touched) > 1 else at
            raw = total[scored]
            if not raw.all():  # as the nonzero positions were: a sum of gains above 0 is above 0
                scored, raw = scored[raw != 0], raw[raw != 0]
            return scored.astype(np.int64, copy=False), raw
        finally:
            for at in touched:
                total[at] = 0.0


@dataclass(frozen=True)
class TurnScores:
    """Raw relevance scores by turn position (ordinal − 1), as ``SessionView``'s BM25 index gives them:
    ``positions`` ascending and distinct, ``raw`` beside them; numpy columns when there are many,
    Python lists when there are few (``PositionBm25.columns``)."""

    positions: Positions | list[int]
    raw: Floats | list[float]

    @classmethod
    def of(cls, by_position: Mapping[int, float]) -> TurnScores:
        at = sorted(by_position)
        return cls(at, [float(by_position[p]) for p in at])

    @property
    def by_position(self) -> dict[int, float]:
        at, raw = self.positions, self.raw
        if isinstance(at, np.ndarray) and isinstance(raw, np.ndarray):
            return dict(zip(at.tolist(), raw.tolist(), strict=True))
        return dict(zip(at, raw, strict=True))


@dataclass(frozen=True)
class SparseRelevance(Mapping[int, float]):
    """Normalised relevance by position (``offset`` + each of ``positions``), read as a mapping; the
    dictionary is built on first lookup, as most plans never read it."""

    positions: Positions
    scores: Floats
    offset: int = 0
    _dict: dict[int, float] = field(default_factory=dict, init=False, repr=False, compare=False)

    def _mapping(self) -> dict[int, float]:
        if not self._dict and len(self.positions):
            at = (self.positions + self.offset) if self.offset else self.positions
            self._dict.update(zip(at.tolist(), self.scores.tolist(), strict=True))
        return self._dict

    def __getitem__(self, position: int) -> float:
        return self._mapping()[position]

    def get(self, position: int, default: float | None = None) -> float | None:  # type: ignore[override]
        # the dictionary's own: ``Mapping.get`` would raise and catch a KeyError for every unscored turn
        return self._mapping().get(position, default)

    def __iter__(self) -> Iterator[int]:
        return iter(self._mapping())

    def __len__(self) -> int:
        return len(self.positions)


# ------------------------------------------------------------------ the planner's steps over many scores


def normalised_columns(at: Positions, raw: Floats, lo: int, n: int) -> tuple[Positions, Floats] | None:
    """Scores of the planned turns (positions ``lo..lo + n``, made relative to ``lo``) that are above
    0, each divided by the best (one vector divide: the same division per score as the scalar one);
    None when none scores."""
    if len(at) and not (lo == 0 and at[0] >= 0 and at[-1] < n and bool((raw > 0).all())):
        # some fall outside the planned turns (a reset, a replay) or do not score: filter them
        keep = (raw > 0) & (at >= lo) & (at < lo + n)
        at, raw = at[keep] - lo, raw[keep]
    best = float(raw.max()) if len(raw) else 0.0
    return (at, raw / best) if best > 0 else None


Key = tuple[float, int]  # a Full candidate's rank: (-value, -position), ascending


class Ranked:
    """The packeted relevant turns as Full candidates, ascending by key ``(-value, -i)``, each with its full
    record's tokens. The promotion reads only the head: ``head(left)`` is the first candidate whose record
    fits ``left``; one that does not is passed over for good (``left`` only falls as turns are raised, so it
    never would fit, and the promotion passed it over the same way when it came to it). Numpy columns are
    turned into Python keys a chunk at a time (doubling), the rest filtered by what still fits first: a
    packet may hold thousands of relevant turns, of which a few are read."""

    __slots__ = ("_at", "_chunk", "_fulls", "_k", "_positions", "_size", "_values")

    FIRST_CHUNK = 16

    def __init__(self, values: Floats, positions: Positions, fulls: Positions) -> None:
        self._values, self._positions, self._fulls = values, positions, fulls  # in key order: -value, -i
        self._at = 0  # the next candidate of the columns not yet in a chunk
        self._chunk: list[tuple[Key, int]] = []
        self._k = 0  # the head's place in the chunk
        self._size = self.FIRST_CHUNK

    @classmethod
    def of(cls, keyed: list[tuple[Key, int]]) -> Ranked:
        """Candidates already ranked as Python keys (few scores), each with its record's tokens."""
        ranked = cls(np.empty(0, dtype=np.float64), np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64))
        ranked._chunk = keyed
        return ranked

    def head(self, left: int) -> Key | None:
        while True:
            chunk, k = self._chunk, self._k
            while k < len(chunk):
                if chunk[k][1] <= left:
                    self._k = k
                    return chunk[k][0]
                k += 1
            self._k = k
            if not self._refill(left):
                return None

    def pop(self) -> None:
        self._k += 1

    def _refill(self, left: int) -> bool:
        if self._at >= len(self._fulls):
            return False
        fits = np.flatnonzero(self._fulls[self._at:] <= left)[: self._size] + self._at
        self._size *= 2
        if not len(fits):
            self._at = len(self._fulls)
            return False
        self._at = int(fits[-1]) + 1
        keys = zip((-self._values[fits]).tolist(), (-self._positions[fits]).tolist(), strict=True)
        self._chunk, self._k = list(zip(keys, self._fulls[fits].tolist(), strict=True)), 0
        return True


def ranked_columns(full: Sequence[int] | Positions, packeted: Positions, scores: Floats, n: int,
                   anaphora: int | None, left: int) -> Ranked:
    """The packeted relevant turns whose full record fits ``left`` (but the referred-to one, placed
    first), ranked by ``(-value, -i)``, value = ``max(1.0 / (n - i), score)``: numpy columns, as a packet
    can hold thousands of relevant turns. ``full``: the records' tokens by position (a numpy column is
    gathered in C)."""
    fulls = _gather(full, packeted)
    fits = fulls <= left
    if anaphora is not None:
        fits &= packeted != anaphora
    packeted, fulls = packeted[fits], fulls[fits]
    values = np.maximum(1.0 / (n - packeted), scores[fits])  # max(1.0 / (n - i), r), per turn
    order = np.lexsort((-packeted, -values))  # the last key sorts first: -value, then -i
    return Ranked(values[order], packeted[order], fulls[order])


def ranked_lists(full: Sequence[int], packeted: list[int], scores: list[float], n: int, anaphora: int | None,
                 left: int) -> Ranked:
    """``ranked_columns`` over Python lists (few scores): the same keys in the same order."""
    fulls = list(map(full.__getitem__, packeted))
    fits = [f <= left and i != anaphora for i, f in zip(packeted, fulls, strict=True)]
    values = map(max, map(truediv, repeat(1.0), map(sub, repeat(n), packeted)), scores)
    # sorted as flat tuples (several times faster to compare than nested ones; the positions are distinct, so
    # the record's tokens after them are never compared), then keyed as ``Ranked`` reads them
    flat = sorted(compress(zip(map(neg, values), map(neg, packeted), fulls, strict=True), fits))
    return Ranked.of([((v, j), f) for v, j, f in flat])


def _gather(column: Sequence[int] | Positions, at: Positions) -> Positions:
    """``column[i]`` for each position in ``at``, as int64."""
    if isinstance(column, np.ndarray):
        return column[at]
    return np.fromiter(map(column.__getitem__, at.tolist()), dtype=np.int64, count=len(at))
