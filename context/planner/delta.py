"""A ``plan`` entry's rows as what changed since the model's plan entry before it (ledger format 2).

A plan at 1,000 turns has 1,000 rows (a turn's id, fidelity, sizes, relevance); written whole, every turn's
plan entry grew with the session (~275 bytes a row as JSON). From one turn's plan to the next little changes:
a turn is added, a few fidelities move, the relevance of the few scored turns changes. So a plan entry holds
``PlanRecord.rows``: the rows against ``PlanRecord.base`` (the entry id of the same model's plan before it in
the session), as edits of each column, or the columns whole when it has no base (the first plan a process
writes for a session, and every ``KEYFRAME_EVERY``-th, so a reader after a restart reads at most that many
plan entries back). The plan decodes exactly: ``vak_context.context.planner.policy.plan_of_entry`` checks its
digest. Entries written before format 2 hold the rows as JSON turns (``plan["turns"]``) and read as before.

The sizes: a row's full and card tokens are its characters at the plan's rate (``ceil(chars x rate)``), and
each reply's receipt measures the rate anew, which moves the tokens of a share of every turn: as token edits
the entry still grew with the session (~10 bytes a turn at 1,000 turns). So a rows record of form 2 holds the
rate and the edits of the characters, which a closed turn never changes, and the tokens are derived again on
reading; form 1 (the token edits) is written where the rows carry no characters (a plan not lent by a table)
or do not derive from them, and is read as before.

The relevance: each scored turn's normalised BM25 score, which each new turn moves a little for every turn
that shares a term with the directive (the document count, the mean length and the best score all move), so
recorded where set or changed (forms 1 and 2) it grew with those turns (~3 KB an entry at 1,000 turns of the
embedding bench, half the entry). It is an input the plan was made from, like the BM25 index and the sizes,
not a decision (the plan's digest never covered it; ``explain()`` replans from the chain and checks its digest,
``inputs["relevance"]``), and no request reads it. So form 3, written wherever form 2 was, is form 2 without
it: a plan read back from one has the same digest, fidelities, packet, budget and projection, and its rows'
``relevance`` is None (not recorded; ``Plan.turns`` then reads 0 for it). Form 1 still records it (against a
base without it, whole; rows without it, as None). Forms 1 and 2 are read as before.

Pure: the entries are read by whoever holds the ledger (``PlanRows.rows_of`` is given the read).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from vak_context.context.planner.records import Rows
from vak_context.context.planner.sizes import Prefix

ROWS_FORM = 3  # the rows record's own version ("form"), in the record: a reader refuses one it does not know
CHARS_FORM = 2  # characters and the rate, and the relevance's edits: read, no longer written
TOKENS_FORM = 1  # the form whose sizes are token edits (written where the rows carry no characters)
VECTOR_CODES = 256  # from this many codes their edits are found as a vector comparison (``_str_edits``)
KEYFRAME_EVERY = 256  # at most this many plan entries in a row are deltas (a restart reads as many back)

Edits = list[list[Any]]  # [[position, [values...]], ...]: runs of positions whose values changed


def rows_record(rows: Rows, base: Rows | None) -> dict[str, Any]:
    """The rows as a plan entry holds them: against ``base`` (the rows of the entry ``PlanRecord.base``
    names), the edits that make them; without a base, the columns whole (as edits of nothing)."""
    end = rows.history_end
    b_ids: Sequence[str] = base.ids if base is not None else ()
    b_codes = base.codes if base is not None else ""
    keep = _common_prefix(b_ids, rows.ids)
    b_ret: frozenset[int] = base.retrieved if base is not None else frozenset()
    chars = _chars(rows, check=True)
    b_chars = _chars(base) if base is not None else ((), (), None)  # checked as it was written, or derived
    sizes: dict[str, Any]
    if chars is not None and b_chars is not None:  # the characters and the rate: bounded by what changed
        sizes = {"form": ROWS_FORM, "rate": chars[2], "full_chars": _edits(b_chars[0], chars[0]),
                 "card_chars": _edits(b_chars[1], chars[1])}
    else:
        b_end = base.history_end if base is not None else 0
        b_rel: Mapping[int, float] = base.relevance or {} if base is not None else {}
        relevance = rows.relevance
        sizes = {"form": TOKENS_FORM,
                 "full": _edits(base.full[:b_end] if base is not None else (), rows.full[:end]),
                 "card": _edits(base.card[:b_end] if base is not None else (), rows.card[:end]),
                 # rows that hold none (read back from form 3) record None: they read back without it
                 "relevance": None if relevance is None else
                 [[i, v] for i, v in sorted(relevance.items()) if b_rel.get(i) != v],
                 "relevance_dropped": [] if relevance is None else sorted(i for i in b_rel if i not in relevance)}
    return {
        **sizes,
        "keep": keep,  # ids kept from the base; the rest follow
        "ids": list(rows.ids[keep:]),
        "codes": _str_edits(b_codes, rows.codes),
        "n": len(rows.codes),
        "history_start": rows.history_start,
        "history_end": end,
        "anaphora": rows.anaphora,
        "retrieved": sorted(rows.retrieved - b_ret),
        "retrieved_dropped": sorted(b_ret - rows.retrieved),
        "current_tokens": rows.current_tokens,
    }


def rows_of_record(raw: Mapping[str, Any], base: Rows | None) -> Rows:
    """The rows a plan entry's ``rows`` record and the rows of its base make (``base`` None: the record holds
    them whole). ValueError for a form this code does not know, or a record that does not fit its base."""
    form = raw.get("form")
    if form not in (TOKENS_FORM, CHARS_FORM, ROWS_FORM):
        raise ValueError(f"plan rows of form {form!r}; this code reads forms {TOKENS_FORM} to {ROWS_FORM}")
    keep = int(raw["keep"])
    b_ids: Sequence[str] = base.ids if base is not None else ()
    if keep > len(b_ids):
        raise ValueError(f"the plan rows keep {keep} ids of a base with {len(b_ids)}")
    n, end = int(raw["n"]), int(raw["history_end"])
    ids = (*b_ids[:keep], *(str(i) for i in raw["ids"]))
    codes = _apply_str(base.codes if base is not None else "", n, raw["codes"])
    b_end = base.history_end if base is not None else 0
    full_chars: tuple[int, ...] | None = None
    card_chars: tuple[int, ...] | None = None
    rate: float | None = None
    if form != TOKENS_FORM:
        b_chars = _chars(base) if base is not None else ((), (), None)
        if b_chars is None:
            raise ValueError("plan rows of characters written against a base without them")
        rate = float(raw["rate"])
        full_chars = tuple(int(v) for v in _apply(b_chars[0], end, raw["full_chars"]))
        card_chars = tuple(int(v) for v in _apply(b_chars[1], end, raw["card_chars"]))
        ceil = math.ceil  # as ``TokenColumns`` derives them
        full: Sequence[Any] = [ceil(c * rate) for c in full_chars]
        card: Sequence[Any] = [ceil(c * rate) for c in card_chars]
    else:
        full = _apply(base.full[:b_end] if base is not None else (), end, raw["full"])
        card = _apply(base.card[:b_end] if base is not None else (), end, raw["card"])
    relevance: dict[int, float] | None = None  # form 3 records none
    if form != ROWS_FORM and raw["relevance"] is not None:  # the base's (if any), then what set or dropped
        relevance = dict(base.relevance or {}) if base is not None else {}
        for i in raw["relevance_dropped"]:
            relevance.pop(int(i), None)
        for i, v in raw["relevance"]:
            relevance[int(i)] = float(v)
    retrieved = set(base.retrieved) if base is not None else set()
    retrieved.difference_update(int(i) for i in raw["retrieved_dropped"])
    retrieved.update(int(i) for i in raw["retrieved"])
    if len(ids) != n or len(codes) != n:
        raise ValueError(f"the plan rows make {len(ids)} ids and {len(codes)} codes for {n} turns")
    anaphora = raw["anaphora"]
    return Rows(ids=ids, codes=codes, full=tuple(int(v) for v in full), card=tuple(int(v) for v in card),
                history_start=int(raw["history_start"]), history_end=end,
                relevance=None if relevance is None else {i: relevance[i] for i in sorted(relevance)},
                anaphora=None if anaphora is None else int(anaphora), retrieved=frozenset(retrieved),
                current_tokens=int(raw["current_tokens"]), full_chars=full_chars, card_chars=card_chars, rate=rate)


def _chars(rows: Rows, check: bool = False) -> tuple[Sequence[int], Sequence[int], float] | None:
    """The history rows' characters and the rate whose ``ceil(chars x rate)`` are their tokens, or None where
    the rows carry no characters (or, ``check``: their tokens are not exactly derived from them)."""
    if rows.full_chars is None or rows.card_chars is None or rows.rate is None:
        return None
    end, rate, ceil = rows.history_end, rows.rate, math.ceil
    full_chars, card_chars = rows.full_chars[:end], rows.card_chars[:end]
    if len(full_chars) != end or len(card_chars) != end:
        return None
    if check and not _lent(rows) and (list(rows.full[:end]) != [ceil(c * rate) for c in full_chars]
                                      or list(rows.card[:end]) != [ceil(c * rate) for c in card_chars]):
        return None
    return full_chars, card_chars, rate


def _lent(rows: Rows) -> bool:
    """Whether the rows' tokens are ones a ``TurnTable`` lent beside their characters at their rate
    (``TurnTable.lent_rows``): derived, ``ceil(chars x rate)`` row by row, so there is nothing to check."""
    full, card = rows.full, rows.card
    return (isinstance(full, Prefix) and isinstance(card, Prefix) and isinstance(rows.full_chars, Prefix)
            and isinstance(rows.card_chars, Prefix) and full.rate is not None and full.rate == card.rate == rows.rate)


class PlanRows:
    """The rows of recent plan entries, by entry id, as a writer wrote them or a reader decoded them: the base
    a new entry is a delta against, and what a delta is read from. ``rows_of`` reads entries back (through
    ``read``, which gives an entry's ``(base, rows record)`` or its decoded rows for an entry of the old form)
    only for what it does not hold: after a restart, at most ``KEYFRAME_EVERY`` entries."""

    def __init__(self, keep: int = 64) -> None:
        self._rows: OrderedDict[str, tuple[Rows, int]] = OrderedDict()  # entry id -> (rows, deltas since whole)
        self.keep = keep

    def base_for(self, entry_id: str | None) -> tuple[str, Rows] | None:
        """The base a new plan entry is written against: the model's last plan entry (``entry_id``) when its
        rows are held and the run of deltas behind it is short enough, else None (the new one is whole)."""
        held = self._rows.get(entry_id) if entry_id is not None else None
        if entry_id is None or held is None or held[1] + 1 >= KEYFRAME_EVERY:
            return None
        return entry_id, held[0]

    def wrote(self, entry_id: str, rows: Rows, base: str | None) -> None:
        """A plan entry with ``rows`` was written (against ``base``, or whole)."""
        depth = 0 if base is None else self._depth(base) + 1
        self._put(entry_id, rows, depth)

    def rows_of(self, entry_id: str,
                read: Callable[[str], tuple[str | None, Mapping[str, Any]] | Rows | None]) -> Rows | None:
        """The rows of plan entry ``entry_id``; None when an entry on the way back does not decode (``read``
        gives None for it: not a plan entry, or one whose rows cannot be rebuilt)."""
        chain: list[tuple[str, str | None, Mapping[str, Any]]] = []
        at: str | None = entry_id
        rows: Rows | None = None
        depth = 0
        while at is not None:
            held = self._rows.get(at)
            if held is not None:
                rows, depth = held
                break
            got = read(at)
            if got is None:
                return None
            if isinstance(got, Rows):  # an entry of the old form: its rows whole
                rows, depth = got, 0
                self._put(at, rows, 0)
                break
            base, raw = got
            chain.append((at, base, raw))
            if len(chain) > 4 * KEYFRAME_EVERY:  # a ledger whose bases loop, or a chain no writer makes
                return None
            at = base
        for eid, base, raw in reversed(chain):
            try:
                rows = rows_of_record(raw, rows if base is not None else None)
            except (KeyError, IndexError, TypeError, ValueError):
                return None
            depth = 0 if base is None else depth + 1
            self._put(eid, rows, depth)
        return rows

    def _depth(self, entry_id: str) -> int:
        held = self._rows.get(entry_id)
        return held[1] if held is not None else KEYFRAME_EVERY

    def _put(self, entry_id: str, rows: Rows, depth: int) -> None:
        self._rows[entry_id] = (rows, depth)
        self._rows.move_to_end(entry_id)
        while len(self._rows) > self.keep:
            self._rows.popitem(last=False)


def _common_prefix(a: Sequence[Any], b: Sequence[Any]) -> int:
    n = min(len(a), len(b))
    x, y = a[:n], b[:n]  # a plan's lent rows slice to a list, decoded rows to a tuple
    if type(x) is not type(y):
        x, y = tuple(x), tuple(y)
    if x == y:  # the usual case: one comparison in C
        return n
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _edits(base: Sequence[Any], new: Sequence[Any]) -> Edits:
    """Runs of positions of ``new`` whose value differs from ``base``'s (or that ``base`` lacks)."""
    out: Edits = []
    m = min(len(base), len(new))
    if tuple(base[:m]) == tuple(new[:m]):  # the usual case: nothing changed but what was added
        return [[m, list(new[m:])]] if len(new) > m else []
    run: list[Any] | None = None
    for i, v in enumerate(new):
        if i < m and base[i] == v:
            run = None
            continue
        if run is None:
            run = [i, []]
            out.append(run)
        run[1].append(v)
    return out


def _str_edits(base: str, new: str) -> Edits:
    """``_edits`` of two code strings, each run's values joined. The runs are found as a vector comparison
    of the codes' bytes (one letter each): a plan's codes are a session long, and a few move a turn."""
    m = min(len(base), len(new))
    if base[:m] == new[:m]:
        return [[m, new[m:]]] if len(new) > m else []
    if len(new) < VECTOR_CODES or not (base.isascii() and new.isascii()):  # few: numpy's overhead outweighs them
        return [[i, "".join(vs)] for i, vs in _edits(base, new)]
    moved = np.ones(len(new), dtype=bool)  # past the base's end every code is new
    moved[:m] = np.frombuffer(base[:m].encode(), dtype=np.uint8) != np.frombuffer(new[:m].encode(), dtype=np.uint8)
    edges = np.flatnonzero(np.diff(moved.astype(np.int8), prepend=0, append=0))  # run starts, then run ends
    return [[a, new[a:b]] for a, b in zip(edges[::2].tolist(), edges[1::2].tolist(), strict=True)]


def _apply(base: Sequence[Any], n: int, edits: Edits) -> list[Any]:
    out = list(base[:n])
    out.extend([None] * (n - len(out)))
    for pos, values in edits:
        out[pos:pos + len(values)] = values
    if len(out) != n or any(v is None for v in out):
        raise ValueError(f"the plan rows' edits leave {len(out)} values where {n} are planned")
    return out


def _apply_str(base: str, n: int, edits: Edits) -> str:
    return "".join(_apply(base, n, [[pos, list(s)] for pos, s in edits]))
