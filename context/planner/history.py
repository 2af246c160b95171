"""The history a plan places, as columns: sizes in tokens, relevance, and the digests of both. Pure.

``vak_context.context.planner.plan.plan`` builds one ``HistoryColumns`` over the turns after the last reset and before
the current one (position i = the i-th planned turn, oldest first), then fills it
(``vak_context.context.planner.fill``). Sizes come from the caller's ``TurnTable`` when it is in step with the
index (its token columns and running totals, read, never changed), else are estimated from each
turn's card; relevance from the caller's ``TurnScores`` (by turn position), else BM25 over the cards.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from operator import add, gt, truediv
from typing import overload

import blake3
import numpy as np
import numpy.typing as npt

from vak_context.bm25 import Bm25Index
from vak_context.context.capacity.tokens import estimate_tokens
from vak_context.context.history.turns import Turn, TurnIndex
from vak_context.context.planner.records import PACKET
from vak_context.context.planner.relevance import (
    Floats,
    Positions,
    SparseRelevance,
    TurnScores,
    normalised_columns,
)
from vak_context.context.planner.sizes import (
    TurnTable,
    estimate_size,
    running_totals,
    size_values,
    sizes_digest,
    turn_document,
)
from vak_context.errors import InvalidInput

CHEAP, CARD, EVIDENCE_CHARS, EVIDENCE_ITEMS = range(4)  # the columns of ``HistoryColumns.totals``


class TurnRange(Sequence[Turn]):
    """Turns ``start..end`` of the index's list, read in place: a plan copies none of the session's turns."""

    __slots__ = ("_start", "_stop", "_turns")

    def __init__(self, turns: list[Turn], start: int, end: int) -> None:
        self._turns, self._start, self._stop = turns, start, max(start, min(end, len(turns)))

    def __len__(self) -> int:
        return self._stop - self._start

    @overload
    def __getitem__(self, i: int) -> Turn: ...

    @overload
    def __getitem__(self, i: slice) -> list[Turn]: ...

    def __getitem__(self, i: int | slice) -> Turn | list[Turn]:
        n = self._stop - self._start
        if isinstance(i, slice):
            a, b, step = i.indices(n)
            return self._turns[self._start + a : self._start + b : step] if step > 0 else list(self)[i]
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"turn {i} of {n}")
        return self._turns[self._start + i]

    def __iter__(self) -> Iterator[Turn]:
        return map(self._turns.__getitem__, range(self._start, self._stop))


@dataclass
class HistoryColumns:
    """The history being planned, as columns (position i = the i-th planned turn, oldest first). The token
    columns may run past the planned turns (a table's whole columns, read in place): ``len(turns)`` bounds them."""

    turns: Sequence[Turn]
    full: Sequence[int]
    card: Sequence[int]
    cheap: Sequence[int]
    ev_chars: list[int]
    ev_items: list[int]
    relevance: Mapping[int, float]  # sparse: only turns that share a term with the query
    anaphora: int | None  # position of the referred-to turn
    fid: list[str]  # ``Fidelity.code`` per turn: "F" full, "c" card, "p" packet
    retrieved: set[int]
    table: TurnTable | None  # the caller's size table, when it is in step with the index
    keep_from: int = 0  # the first turn after the packet range
    # ``relevance`` as columns in position order: the digest and the Full candidates walk them in order.
    # numpy columns when there are many scores, else Python lists (``vak_context.context.planner.relevance``)
    scored: Positions | list[int] = field(default_factory=list)
    scores: Floats | list[float] = field(default_factory=list)
    # Running totals of cheap, card, evidence characters and items (``TurnTable.sums``), from ``base``:
    # the sum over positions a..b is ``totals[base + b] - totals[base + a]``.
    totals: tuple[list[int], list[int], list[int], list[int]] = ([0], [0], [0], [0])
    base: int = 0
    # ``full`` as an int64 numpy column from the caller's table (None without one): the Full promotion
    # gathers many packeted turns' records from it in C
    full_array: npt.NDArray[np.int64] | None = None

    def total(self, column: int, a: int, b: int) -> int:
        totals = self.totals[column]
        return totals[self.base + b] - totals[self.base + a]

    def suffix_start(self, room: int) -> int:
        """The first position of the longest newest-first run whose cheap forms fit ``room``."""
        cheap, base, n = self.totals[CHEAP], self.base, len(self.turns)
        # the smallest a with total(a, n) <= room: the totals never fall, so it is a binary search
        return min(n, bisect_left(cheap, cheap[base + n] - room, base, base + n + 1) - base)

    def recency(self, i: int) -> float:
        return 1.0 / (len(self.turns) - i)

    def value(self, i: int) -> float:
        return max(self.recency(i), self.relevance.get(i, 0.0), 1.0 if i == self.anaphora else 0.0)


def history_columns(index: TurnIndex, start: int, end: int, sizes: TurnTable | None, tpc: float) -> HistoryColumns:
    """Turns ``start..end`` (positions) at ``tpc`` tokens per character, every one still to be placed."""
    turns = TurnRange(index.turns, start, end)
    table = in_step(sizes, index, start, end)
    fid = [PACKET] * len(turns)  # every turn starts in the packet until the fill places it
    if table is not None:  # token columns and running totals kept by the caller's table between plans
        if start == 0:  # the table's own columns, read in place (rows past ``end`` are never read)
            columns = table.whole_tokens(tpc)
            full, card, cheap = columns.full, columns.card, columns.cheap
            full_array: npt.NDArray[np.int64] | None = columns.full_array()
        else:
            full, card, cheap = table.tokens(tpc, start, end)
            full_array = None
        w = HistoryColumns(turns, full, card, cheap, [], [], {}, None, fid, set(), table)
        w.totals, w.base, w.full_array = table.sums(tpc), start, full_array
        return w
    full_c, card_c, ev_chars, ev_items = estimated_rows(index, turns)
    full_t = [estimate_tokens(c, tpc) for c in full_c]
    card_t = [estimate_tokens(c, tpc) for c in card_c]
    cheap_t = list(map(min, full_t, card_t))
    w = HistoryColumns(turns, full_t, card_t, cheap_t, ev_chars, ev_items, {}, None, fid, set(), None)
    w.totals = (running_totals(cheap_t), running_totals(card_t), running_totals(ev_chars), running_totals(ev_items))
    return w


def in_step(sizes: TurnTable | None, index: TurnIndex, start: int, stop: int) -> TurnTable | None:
    """The table, when it is kept in step with the index (SessionView): its ends name the same turns."""
    if sizes is None:
        return None
    if start >= stop or (len(sizes.ids) >= stop and sizes.ids[start] == index.turns[start].id
                         and sizes.ids[stop - 1] == index.turns[stop - 1].id):
        return sizes
    return None


def estimated_rows(index: TurnIndex, turns: Sequence[Turn]) -> tuple[list[int], list[int], list[int], list[int]]:
    """Characters of ``turns`` estimated from their cards: full, card, evidence lines, evidence count."""
    rows = [size_values(estimate_size(index, t)) for t in turns]
    return [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], [r[3] for r in rows]


def turn_ids(index: TurnIndex, stop: int, sizes: TurnTable | None) -> list[str]:
    """The ids of turns ``1..stop``. Read only: it may be the table's own column."""
    table = in_step(sizes, index, 0, stop)
    if table is not None:
        return table.ids if stop == len(table.ids) else table.ids[:stop]
    return [t.id for t in index.turns[:stop]]


def behind_tokens(index: TurnIndex, start: int, sizes: TurnTable | None, tpc: float) -> tuple[list[int], list[int]]:
    """Full and card tokens of the ``start`` turns behind a reset (listed in the rows, never planned)."""
    table = in_step(sizes, index, 0, start)
    if table is not None:
        full_c, card_c = table.full_chars[:start], table.card_chars[:start]
    else:
        full_c, card_c, _, _ = estimated_rows(index, index.turns[:start])
    return [estimate_tokens(f, tpc) for f in full_c], [estimate_tokens(c, tpc) for c in card_c]


def sizes_digest_of(index: TurnIndex, sizes: TurnTable | None, ids: Sequence[str], end: int) -> str:
    """Every turn's sizes in characters up to the last planned one, behind a reset or not
    (``vak_context.context.planner.sizes.sizes_digest``): kept chunk by chunk by the caller's table, so a new turn
    adds its own row to hash, not the session's."""
    table = in_step(sizes, index, 0, end)
    if table is not None:
        return table.digest(end)
    return sizes_digest(list(ids[:end]), *estimated_rows(index, index.turns[:end]))


def relevance_digest(scored: Positions | list[int], scores: Floats | list[float], start: int) -> str:
    """The scored turns' positions (``start`` + each, as int64; the chain head names their turns), then
    their normalised scores as float64 bytes, in turn order: no per-turn text to join."""
    h = blake3.blake3(f"{start}\n".encode())
    # numpy columns or Python lists (few scores): the same native int64 and float64 bytes
    h.update(scored.tobytes() if isinstance(scored, np.ndarray) else array("q", scored).tobytes())
    h.update(scores.tobytes() if isinstance(scores, np.ndarray) else array("d", scores).tobytes())
    return h.hexdigest()


def scores_by_id(index: TurnIndex, relevance: Mapping[str, float]) -> TurnScores:
    """Raw scores by turn id as ``TurnScores`` by position; ids of turns not in the chain are dropped
    (a score for another chain's turn has nothing to rank)."""
    by_position = {}
    for turn_id, score in relevance.items():
        try:
            by_position[index.by_id(turn_id).ordinal - 1] = float(score)
        except InvalidInput:
            continue
    return TurnScores.of(by_position)


def card_scores(index: TurnIndex, turns: Sequence[Turn], query: str) -> TurnScores:
    """BM25 scores of ``turns``' cards (or directives) for ``query``, by position: when the caller
    keeps no index of its own."""
    bm: Bm25Index[str] = Bm25Index()
    for t in turns:
        bm.add(t.id, turn_document(t))
    return scores_by_id(index, bm.scores(query))


def apply_relevance(w: HistoryColumns, relevance: TurnScores) -> None:
    """Normalise the raw scores of the planned turns (÷ the best) into ``w``'s relevance columns.
    Scores are sparse (only turns that share a term score at all): walk them, not the session."""
    if not w.turns:
        return
    lo, n = w.turns[0].ordinal - 1, len(w.turns)
    if isinstance(relevance.positions, np.ndarray):
        columns = normalised_columns(relevance.positions, np.asarray(relevance.raw, dtype=np.float64), lo, n)
        if columns is not None:
            w.scored, w.scores = columns
            w.relevance = SparseRelevance(*columns)
        return
    at, raw = list(relevance.positions), list(map(float, relevance.raw))  # few scores, as Python lists
    if at and not (lo == 0 and at[0] >= 0 and at[-1] < n and all(map(gt, raw, repeat(0.0)))):
        # some fall outside the planned turns (a reset, a replay) or do not score: filter them
        kept = [(p - lo, r) for p, r in zip(at, raw, strict=True) if r > 0 and lo <= p < lo + n]
        at, raw = [p for p, _ in kept], [r for _, r in kept]
    best = max(raw, default=0.0)
    if best > 0:
        w.scored = at
        w.scores = list(map(truediv, raw, repeat(best)))
        w.relevance = dict(zip(at, w.scores, strict=True))


def shifted_relevance(w: HistoryColumns, start: int) -> Mapping[int, float]:
    """The plan's relevance by session position: the history's, ``start`` positions on."""
    if not start:
        return w.relevance
    if isinstance(w.scored, np.ndarray) and isinstance(w.scores, np.ndarray):
        return SparseRelevance(w.scored, w.scores, start)
    return dict(zip(map(add, w.scored, repeat(start)), w.scores, strict=True))
