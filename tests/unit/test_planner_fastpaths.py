"""The planner's fast paths give exactly what the straightforward computations give (property tests).

Each mechanism that keeps the plan's cost from growing with the session is checked against the
direct version it replaces: BM25 scoring as C-level maps and as numpy columns against the per-posting
loop, the greedy Full promotion (ranked from lists and from numpy columns) against one sort of every
candidate, the table's copy on write of the columns a plan keeps, the table's incremental token
columns, running totals and chunked sizes digest against recomputing them, and relevance by turn
position against relevance by turn id. Equal means equal floats and equal digests, not approximately equal.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.fakes.sessions import WORDS, SessionBuilder, profile
from vak_context.bm25 import Bm25Index, terms
from vak_context.context.planner.fill import history_codes as _history_codes
from vak_context.context.planner.fill import promote as _promote
from vak_context.context.planner.history import HistoryColumns as _Work
from vak_context.context.planner.plan import plan, scores_by_id
from vak_context.context.planner.relevance import PositionBm25, TurnScores
from vak_context.context.planner.sizes import (
    VECTOR_ROWS,
    TokenColumns,
    TurnSize,
    TurnTable,
    running_totals,
    sizes_digest,
)

texts = st.lists(st.sampled_from([*WORDS, "alpha", "beta", "x1"]), max_size=30).map(" ".join)


def _reference_scores(bm: Bm25Index[str], query: str) -> dict[str, float]:
    """BM25 as it was written first: one posting at a time."""
    n = len(bm.lengths)
    if not n:
        return {}
    avg = bm.total / n or 1.0
    out: dict[str, float] = {}
    for t in sorted(set(terms(query))):
        docs = bm.postings.get(t)
        if not docs or (n > 8 and len(docs) * 2 > n):
            continue
        idf = math.log(1.0 + (n - len(docs) + 0.5) / (len(docs) + 0.5))
        for doc, tf in docs.items():
            norm = tf + bm.K1 * (1 - bm.B + bm.B * bm.lengths[doc] / avg)
            out[doc] = out.get(doc, 0.0) + idf * tf * (bm.K1 + 1) / norm
    return out


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 12), texts), max_size=40), texts)
def test_bm25_scores_equal_the_per_posting_loop(docs: list[tuple[int, str]], query: str) -> None:
    bm: Bm25Index[str] = Bm25Index()
    for key, text in docs:  # repeated keys re-index a document
        bm.add(f"d{key}", text)
    assert bm.scores(query) == _reference_scores(bm, query)
    assert bm.total == sum(bm.lengths.values())
    assert all(docs_ for docs_ in bm.postings.values())  # no empty posting list is left behind
    assert {d for docs_ in bm.postings.values() for d in docs_} <= set(bm.lengths)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), texts), max_size=80), texts, st.integers(0, 40))
def test_vectorised_bm25_equals_the_per_posting_loop_bit_for_bit(docs: list[tuple[int, str]], query: str,
                                                                  vector_from: int) -> None:
    """``PositionBm25.columns`` gives the per-posting loop's floats, bit for bit, in position order,
    on its numpy path and on its list path (few postings); re-indexed and removed documents leave
    its numpy columns in step, whether they were built before the changes or after."""
    vector, lists = PositionBm25(), PositionBm25()
    vector.VECTOR_POSTINGS, lists.VECTOR_POSTINGS = 0, 10**9
    for step, (key, text) in enumerate(docs):  # repeated keys re-index a document (mid-column removals)
        vector.add(key, text)
        lists.add(key, text)
        if step == vector_from:
            vector.columns(query)  # the columns are built here, then kept in step
        if step % 7 == 6:
            vector.remove(docs[step // 2][0])
            lists.remove(docs[step // 2][0])
    reference = _reference_scores(vector, query)  # type: ignore[arg-type]
    for bm in (vector, lists):
        positions, raw = bm.columns(query)
        assert isinstance(positions, np.ndarray) == (bm is vector and bool(reference))
        assert list(positions) == sorted(reference)
        assert [float(x).hex() for x in raw] == [reference[p].hex() for p in sorted(reference)]
        assert bm.scores(query) == reference
        scores = TurnScores(positions, raw)
        assert TurnScores.of(scores.by_position).by_position == reference


def _reference_promote(w: _Work, keep_from: int, left: int) -> None:
    """The Full promotion as one sort of every candidate, as it was written first."""
    n, an, fid = len(w.turns), w.anaphora, w.fid
    special = {*w.relevance, *([an] if an is not None else [])}
    keyed = [(-1.0 / (n - i), i != an, -i, i) for i in range(keep_from, n) if fid[i] == "c" and i not in special]
    keyed += [(-w.value(i), i != an, -i, i) for i in special if fid[i] == "c" or (fid[i] == "p" and i < keep_from)]
    keyed.sort()
    for *_key, i in keyed:
        if left <= 0:
            break
        extra = w.full[i] - (w.card[i] if fid[i] == "c" else 0)
        if extra <= left:
            if fid[i] == "p":
                w.retrieved.add(i)
            fid[i] = "F"
            left -= extra


def _work(full: list[int], card: list[int], rel: dict[int, float], anaphora: int | None, keep_from: int,
          columns: bool = False) -> _Work:
    n = len(full)
    fid = ["p"] * keep_from + ["F" if full[i] <= card[i] else "c" for i in range(keep_from, n)]
    scored = sorted(rel)
    w = _Work([None] * n, full, card, list(map(min, full, card)), [], [], dict(rel), anaphora,  # type: ignore[list-item]
              fid, set(), None, keep_from)
    w.scored, w.scores = scored, [rel[i] for i in scored]
    if columns:  # as the planner holds many scores: numpy columns
        w.scored, w.scores = np.array(w.scored, dtype=np.int64), np.array(w.scores, dtype=np.float64)
    return w


@st.composite
def promotions(draw: st.DrawFn) -> tuple[list[int], list[int], dict[int, float], int | None, int, int]:
    n = draw(st.integers(1, 40))
    full = draw(st.lists(st.integers(1, 300), min_size=n, max_size=n))
    card = draw(st.lists(st.integers(1, 120), min_size=n, max_size=n))
    levels = st.sampled_from([1.0, 0.5, 0.25, 0.1, 0.03, 0.01, 1 / 3])  # ties with each other and with recency
    rel = draw(st.dictionaries(st.integers(0, n - 1), levels, max_size=n))
    if rel:
        rel[max(rel, key=rel.__getitem__)] = 1.0  # normalised: the best scores 1
    anaphora = draw(st.sampled_from([None, n - 1]))
    keep_from = draw(st.integers(0, n))
    left = draw(st.integers(1, 1_500))
    return full, card, rel, anaphora, keep_from, left


@settings(max_examples=500, deadline=None)
@given(promotions())
@example(([100, 100], [50, 50], {0: 0.5, 1: 1.0}, 1, 2, 200))  # the referred-to turn, packeted: placed once
@example(([90, 120, 80], [40, 40, 40], {0: 1.0, 2: 1.0}, None, 2, 130))  # equal values: the newer first
def test_promotion_with_a_heap_equals_one_sort_of_every_candidate(
    case: tuple[list[int], list[int], dict[int, float], int | None, int, int],
) -> None:
    full, card, rel, anaphora, keep_from, left = case
    slow = _work(full, card, rel, anaphora, keep_from)
    _reference_promote(slow, keep_from, left)
    for columns in (False, True):  # ranked from Python lists, and from numpy columns
        fast = _work(full, card, rel, anaphora, keep_from, columns)
        _promote(fast, keep_from, left)
        assert fast.fid == slow.fid and fast.retrieved == slow.retrieved
    assert _history_codes(fast, False) == "".join(fast.fid)  # runs of "p" and the retrieved ones


sizes = st.builds(TurnSize, st.integers(0, 5_000), st.integers(0, 800), st.integers(0, 300), st.integers(0, 5))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), sizes), max_size=60), st.sampled_from([0.25, 0.27, 0.3, 0.5]))
def test_incremental_token_columns_equal_a_recomputation(sets: list[tuple[int, TurnSize]], tpc: float) -> None:
    table = TurnTable()
    table.tokens(tpc, 0, 0)  # kept from the first row on, then updated row by row
    table.sums(tpc)
    for position, size in sets:
        position = min(position, len(table.ids))  # the table grows one row at a time
        table.set(position, f"t{position}", size)
        full = [math.ceil(c * tpc) for c in table.full_chars]
        card = [math.ceil(c * tpc) for c in table.card_chars]
        cheap = list(map(min, full, card))
        assert table.tokens(tpc, 0, len(table.ids)) == (full, card, cheap)
        assert table.tokens(tpc, 1, len(table.ids)) == (full[1:], card[1:], cheap[1:])
        assert table.sums(tpc) == (running_totals(cheap), running_totals(card),
                                   running_totals(table.evidence_chars), running_totals(table.evidence_items))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 200), sizes, st.integers(0, 200)), max_size=40),
       st.integers(1, 70))
def test_sizes_digest_kept_chunk_by_chunk_equals_a_recomputation(
    sets: list[tuple[int, TurnSize, int]], grow: int
) -> None:
    table = TurnTable()
    for k in range(grow):  # rows past a few whole chunks of SIZES_CHUNK (64), digested as they come
        table.set(k, f"t{k}", TurnSize(k, k % 7, k % 3, k % 2))
        if k % 9 == 0:
            table.digest(len(table.ids))
    for position, size, stop in sets:  # then rows changed anywhere (a card arriving late) or appended
        position = min(position, len(table.ids))
        table.set(position, f"t{position}", size)
        stop = min(stop, len(table.ids))
        columns = (table.ids, table.full_chars, table.card_chars, table.evidence_chars, table.evidence_items)
        for at in (stop, len(table.ids)):
            assert table.digest(at) == sizes_digest(*(column[:at] for column in columns))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 30), st.sampled_from(["copper price", "ledger commit again", "flight cache window", "zz"]),
       st.sampled_from([2_000, 3_000, 6_000, 50_000]), st.sampled_from([None, -1, 3]))
def test_relevance_by_position_plans_as_relevance_by_turn_id(turns: int, query: str, horizon: int,
                                                             current: int | None) -> None:
    b = SessionBuilder()
    for i in range(turns):
        words = " ".join(WORDS[(i * 5 + k) % len(WORDS)] for k in range(6))
        b.turn(f"Turn {i}: {words}", [("web_search", {"q": words}, f"{words}\n" * (i % 4 + 1), False)], f"done {words}")
    view = b.view
    at = None if current is None else max(1, min(turns, turns + 1 + current if current < 0 else current))
    text = "" if at is not None else query
    by_position = view.plan(profile(horizon), text, prefix_tokens=0, tail_tokens=0, current=at)
    by_id = plan(view.index, profile(horizon), text, prefix_tokens=0, tail_tokens=0, current=at,
                 sizes=view.sizes(),
                 relevance=scores_by_id(view.index, view.relevance(view.index.turn(at).directive.text if at else query)))
    assert by_position.digest == by_id.digest and by_position.inputs_digest == by_id.inputs_digest
    assert by_position.fidelities == by_id.fidelities


def test_a_lent_table_copies_its_columns_before_changing_a_row_in_place() -> None:
    """A plan keeps the table's ids and token columns without copying them (``TurnTable.lend``): rows
    appended later are past its own, and a row changed in place is changed in a copy."""
    table = TurnTable()
    for i in range(3):
        table.set(i, f"t{i}", TurnSize(100 + i, 10, 0, 0))
    full, card, _ = table.tokens(0.5, 0, 3)
    ids = table.ids
    table.lend()
    table.set(3, "t3", TurnSize(7, 7, 0, 0))  # appended: the same lists grow
    assert table.ids is ids and ids[:3] == ["t0", "t1", "t2"]
    table.set(1, "t1", TurnSize(100 + 1, 10, 0, 0))  # unchanged: nothing to copy
    assert table.ids is ids
    table.set(1, "other", TurnSize(999, 99, 0, 0))  # changed in place: the lent lists stay as they were
    assert ids[:3] == ["t0", "t1", "t2"] and full[:3] == [50, 51, 51] and card[:3] == [5, 5, 5]
    assert table.ids[1] == "other" and table.tokens(0.5, 0, 4)[0][1] == 500


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 2_000_000), min_size=VECTOR_ROWS, max_size=3 * VECTOR_ROWS),
       st.floats(0.01, 2.0, allow_nan=False))
def test_token_columns_derived_as_vectors_are_the_ints_math_ceil_gives(chars: list[int], tpc: float) -> None:
    """A new rate re-derives every row's tokens; from ``VECTOR_ROWS`` rows as numpy vectors: the same ints
    ``estimate_tokens`` (``math.ceil(chars * tpc)``) gives, and the same running totals."""
    card = [c // 3 for c in chars]
    columns = TokenColumns.of(tpc, chars, card)
    full_t, card_t = [math.ceil(c * tpc) for c in chars], [math.ceil(c * tpc) for c in card]
    cheap = list(map(min, full_t, card_t))
    assert (columns.full, columns.card, columns.cheap) == (full_t, card_t, cheap)
    assert all(type(v) is int for v in (*columns.full, *columns.cheap_sums))
    assert (columns.cheap_sums, columns.card_sums) == (running_totals(cheap), running_totals(card_t))
    assert columns.full_array().tolist() == full_t
