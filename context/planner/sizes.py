"""What the planner reads about each turn, besides the TurnIndex: its sizes and its relevance. Pure.

* Sizes (``TurnSize``): the characters a closed turn adds to a request as its full record (evidence
  digested, ``vak_context.context.history.render``), as its card (``vak_context.context.history.turncard.render_card``), and as its lines in
  a packet's evidence list, counted exactly as ``vak_context.context.capacity.profile.request_chars`` counts a request.
  ``measure_turn`` needs the evidence digests; ``estimate_size`` reads the stored card's own count.
  ``TurnTable`` keeps them as columns in turn order, so a plan slices instead of looking up.
* Relevance: each turn's document (``turn_document``: the card's index text, spec §10), which the
  project's one BM25 (``vak_context.bm25``) ranks; ``vak_context.context.planner.relevance`` keeps that index by turn position
  with numpy columns (``SessionView``'s).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate, islice
from typing import Any, TypeVar, overload

import blake3
import numpy as np
import numpy.typing as npt

from vak_context.context.capacity.profile import request_chars
from vak_context.context.capacity.tokens import estimate_tokens
from vak_context.context.history.packets import CoveredItem, describe_evidence, item_line
from vak_context.context.history.render import EvidenceInfo, render_turn
from vak_context.context.history.turncard import build_card, index_text, render_card
from vak_context.context.history.turns import Turn, TurnIndex
from vak_context.context.request.messages import ChatRequest
from vak_context.errors import InvalidInput

# ------------------------------------------------------------------ sizes

@dataclass(frozen=True)
class TurnSize:
    """Characters a closed turn adds to a request: as its full record, and as its card.

    Counted exactly as ``vak_context.context.capacity.profile.request_chars`` counts a request, so the plan's sums are
    what the assembled request measures.
    """

    full_chars: int
    card_chars: int
    evidence_chars: int = 0  # the turn's evidence lines in a packet (``vak_context.context.history.packets.item_line``)
    evidence_items: int = 0


def card_text(index: TurnIndex, turn: Turn, infos: Mapping[str, EvidenceInfo] | None = None) -> str:
    """The card the model reads for ``turn``: its stored TurnCard, or one built now when it has none."""
    card = turn.card if turn.card is not None else build_card(index, turn, infos or {})
    return render_card(card, turn.ordinal)


def messages_chars(messages: Sequence[Any]) -> int:
    return request_chars(ChatRequest(model="", messages=tuple(messages)))


def evidence_lines(index: TurnIndex, turn: Turn) -> tuple[int, int]:
    """Characters and count of the turn's evidence lines, as a packet lists them."""
    lines = [len(item_line(CoveredItem(e, describe_evidence(index.evidence.get(e))))) for e in turn.evidence]
    return sum(lines), len(lines)


def measure_turn(index: TurnIndex, turn: Turn, infos: Mapping[str, EvidenceInfo]) -> TurnSize:
    """The exact size of a closed turn at Full (digested evidence), as a card, and in a packet's list.

    A card never costs more than its turn's full record: where the card would be longer (a short
    turn, whose record is a sentence each way), its size is the record's, and the fill carries the
    turn Full (``vak_context.context.planner.fill``: a kept turn no larger in full than as a card is Full)."""
    full = messages_chars(render_turn(turn, infos))
    return TurnSize(full, min(full, len(card_text(index, turn, infos))), *evidence_lines(index, turn))


def estimate_size(index: TurnIndex, turn: Turn) -> TurnSize:
    """A size without the evidence bodies: the stored card's own measurement of its full record."""
    lines = evidence_lines(index, turn)
    if turn.card is None:
        return TurnSize(turn.chars, turn.chars, *lines)
    full = math.ceil(turn.card.tokens_full / index.tokens_per_char) if turn.card.tokens_full else turn.chars
    return TurnSize(full, min(full, len(render_card(turn.card, turn.ordinal))), *lines)  # as ``measure_turn``


# ------------------------------------------------------------------ relevance


def turn_document(turn: Turn) -> str:
    """What relevance searches for a turn: its card's index text (spec §10), or its directive."""
    if turn.card is None:
        return turn.directive.text
    payloads = {pid: p.payload for pid, p in turn.presentation_payloads.items()}
    return index_text(turn.card, payloads)


@dataclass
class TurnTable:
    """Per-turn sizes as parallel columns in turn order (position = ordinal − 1).

    ``SessionView`` keeps one current as entries arrive, so a plan slices columns instead of looking
    every turn up: the per-request cost stays a few list operations per turn.
    """

    ids: list[str] = field(default_factory=list)
    full_chars: list[int] = field(default_factory=list)
    card_chars: list[int] = field(default_factory=list)
    evidence_chars: list[int] = field(default_factory=list)
    evidence_items: list[int] = field(default_factory=list)

    # Token columns per tokens-per-char value, and running totals, kept row by row as the table
    # changes: a plan then neither converts nor sums every turn again. Values derived from the table
    # (a plan's slices, their digest) are memoised until it changes. Never mutate what these return.
    _tokens: dict[float, TokenColumns] = field(default_factory=dict, repr=False, compare=False)
    _evidence_sums: tuple[list[int], list[int]] | None = field(default=None, repr=False, compare=False)
    _memo: dict[tuple[Any, ...], Any] = field(default_factory=dict, repr=False, compare=False)
    # Characters of each stored packet's rendering, by its id: it never changes once written.
    packet_chars: dict[str, int] = field(default_factory=dict, repr=False, compare=False)
    # ``chunk_digest`` of each whole chunk of rows, in order: a new row extends the table, so the
    # sizes digest of a plan hashes only the rows since the last whole chunk (``sizes_digest``).
    _chunk_digests: list[bytes] = field(default_factory=list, repr=False, compare=False)
    # How many leading ids and token rows a plan holds (``lend``): a row among them changed in place
    # replaces the columns with copies first (copy on write), so a plan never sees a later row.
    _lent_ids: int = field(default=0, repr=False, compare=False)
    _lent_tokens: int = field(default=0, repr=False, compare=False)
    # ``full_chars`` and ``card_chars`` as float64, with room to grow, kept in step by ``set``: a new
    # tokens-per-char value (a receipt's) derives its columns from them without converting the lists.
    _chars_f: tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]] | None = field(
        default=None, repr=False, compare=False)

    # The token columns of this many tokens-per-char values are kept (a session plans for a few models).
    KEPT_RATIOS = 8

    def tokens(self, tpc: float, start: int, stop: int) -> tuple[list[int], list[int], list[int]]:
        """(full, card, cheapest) tokens of rows ``start..stop`` at ``tpc`` tokens per character."""
        columns = self._columns_at(tpc)
        if start == 0 and stop == len(self.ids):  # the whole table, the usual plan: no copy
            return columns.full, columns.card, columns.cheap
        key = ("tokens", tpc, start, stop)
        hit = self._memo.get(key)
        if hit is None:
            hit = self._memo[key] = (columns.full[start:stop], columns.card[start:stop], columns.cheap[start:stop])
        return hit

    def sums(self, tpc: float) -> tuple[list[int], list[int], list[int], list[int]]:
        """Running totals (``totals[i]`` is the sum of rows ``0..i``, so ``len(ids) + 1`` of them) of
        the cheapest and card tokens at ``tpc``, the evidence line characters and the evidence items."""
        columns = self._columns_at(tpc)
        if self._evidence_sums is None:
            self._evidence_sums = (running_totals(self.evidence_chars), running_totals(self.evidence_items))
        return (columns.cheap_sums, columns.card_sums, *self._evidence_sums)

    def _columns_at(self, tpc: float) -> TokenColumns:
        columns = self._tokens.get(tpc)
        if columns is None:
            if len(self._tokens) >= self.KEPT_RATIOS:
                del self._tokens[next(iter(self._tokens))]  # the first kept goes
            arrays = self._char_arrays() if len(self.ids) >= VECTOR_ROWS else None
            columns = self._tokens[tpc] = TokenColumns.of(tpc, self.full_chars, self.card_chars, arrays)
        return columns

    def _char_arrays(self) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        n = len(self.full_chars)
        if self._chars_f is None:
            full, card = np.zeros(max(16, 2 * n)), np.zeros(max(16, 2 * n))
            full[:n], card[:n] = self.full_chars, self.card_chars
            self._chars_f = (full, card)
        return self._chars_f[0][:n], self._chars_f[1][:n]

    def lend(self, ids: int | None = None, tokens: int | None = None) -> None:
        """A plan keeps the first ``ids`` ids and ``tokens`` token rows as they are now (default: every
        row; ``vak_context.context.planner.plan.Rows``): appending rows is safe for it (it reads only its
        own), changing one of its rows in place copies first."""
        self._lent_ids = max(self._lent_ids, len(self.ids) if ids is None else ids)
        self._lent_tokens = max(self._lent_tokens, len(self.ids) if tokens is None else tokens)

    def lent_rows(self, tpc: float, ids: int, tokens: int) -> tuple[Prefix[str], Prefix[int], Prefix[int],
                                                                   Prefix[int], Prefix[int]]:
        """The first ``ids`` ids, the first ``tokens`` full and card tokens at ``tpc`` and the characters they
        were derived from, lent (``lend``): a plan's rows without a copy of the session's columns."""
        columns = self._columns_at(tpc)
        self.lend(ids, tokens)
        return (Prefix(self.ids, ids), Prefix(columns.full, tokens, tpc), Prefix(columns.card, tokens, tpc),
                Prefix(self.full_chars, tokens), Prefix(self.card_chars, tokens))

    def whole_tokens(self, tpc: float) -> TokenColumns:
        """Every row's tokens at ``tpc`` (read only): a plan over the first rows reads them in place."""
        return self._columns_at(tpc)

    def _unlend(self) -> None:
        self.ids = list(self.ids)
        self.full_chars, self.card_chars = list(self.full_chars), list(self.card_chars)
        for tokens in self._tokens.values():
            tokens.full, tokens.card = list(tokens.full), list(tokens.card)
        self._lent_ids = self._lent_tokens = 0

    def memo(self, key: tuple[Any, ...], make: Any) -> Any:
        """A value derived from the table, computed once until the table changes."""
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]

    def digest(self, stop: int) -> str:
        """``sizes_digest`` of rows ``0..stop``: kept chunks, and the rows after the last whole one."""
        whole = stop // SIZES_CHUNK
        while len(self._chunk_digests) < whole:
            a = len(self._chunk_digests) * SIZES_CHUNK
            self._chunk_digests.append(chunk_digest(self._columns(), a, a + SIZES_CHUNK))
        return str(self.memo(("digest", stop), lambda: chunks_digest(
            self._chunk_digests[:whole], chunk_digest(self._columns(), whole * SIZES_CHUNK, stop), stop)))

    def set(self, position: int, turn_id: str, size: TurnSize) -> None:
        row = (turn_id, *size_values(size))
        columns = self._columns()
        if position == len(self.ids):
            for column, value in zip(columns, row, strict=True):
                column.append(value)
        elif position < len(self.ids):
            if all(column[position] == value for column, value in zip(columns, row, strict=True)):
                return  # the open turn measured again, unchanged: every derived value still holds
            # the open turn measured again past what a plan holds (its id unchanged): no copy
            if position < self._lent_tokens or (position < self._lent_ids and self.ids[position] != turn_id):
                self._unlend()
                columns = self._columns()
            for column, value in zip(columns, row, strict=True):
                column[position] = value
        else:
            raise InvalidInput(f"turn table has {len(self.ids)} rows; set row {len(self.ids)} before row {position}")
        self._memo.clear()
        del self._chunk_digests[position // SIZES_CHUNK :]  # the chunks from the changed row on
        if self._chars_f is not None:
            full_f, card_f = self._chars_f
            if position >= len(full_f):  # doubled
                full_f, card_f = self._chars_f = (np.concatenate([full_f, np.zeros(len(full_f))]),
                                                  np.concatenate([card_f, np.zeros(len(card_f))]))
            full_f[position], card_f[position] = size.full_chars, size.card_chars
        for tokens in self._tokens.values():
            tokens.set(position, size.full_chars, size.card_chars)
        if self._evidence_sums is not None:
            resum(self._evidence_sums[0], self.evidence_chars, position)
            resum(self._evidence_sums[1], self.evidence_items, position)

    def _columns(self) -> tuple[list[Any], ...]:
        return self.ids, self.full_chars, self.card_chars, self.evidence_chars, self.evidence_items


# Rows per kept chunk of the sizes digest: a plan hashes fewer than this many rows of its own.
SIZES_CHUNK = 64


def chunk_digest(columns: Sequence[list[Any]], start: int, stop: int) -> bytes:
    """blake3 of rows ``start..stop``: their ids (newline-joined), then each size column as int64."""
    ids, *sizes = columns
    h = blake3.blake3("\n".join(ids[start:stop]).encode())
    for column in sizes:
        h.update(array("q", column[start:stop]).tobytes())
    return h.digest()


def chunks_digest(whole: list[bytes], partial: bytes, stop: int) -> str:
    """The sizes digest of rows ``0..stop``: the row count, then the digests of the whole chunks of
    ``SIZES_CHUNK`` rows and of the rows after them (``chunk_digest``)."""
    h = blake3.blake3(f"{stop}\n".encode())
    h.update(b"".join(whole))
    h.update(partial)
    return h.hexdigest()


def sizes_digest(ids: list[str], full_chars: list[int], card_chars: list[int], evidence_chars: list[int],
                 evidence_items: list[int]) -> str:
    """The digest of a table's size columns in characters, computed from scratch (``TurnTable.digest``
    keeps the same value chunk by chunk)."""
    columns, stop = (ids, full_chars, card_chars, evidence_chars, evidence_items), len(ids)
    whole = stop // SIZES_CHUNK * SIZES_CHUNK
    return chunks_digest([chunk_digest(columns, a, a + SIZES_CHUNK) for a in range(0, whole, SIZES_CHUNK)],
                         chunk_digest(columns, whole, stop), stop)


def size_values(size: TurnSize) -> tuple[int, int, int, int]:
    return size.full_chars, size.card_chars, size.evidence_chars, size.evidence_items


@dataclass
class TokenColumns:
    """A table's sizes in tokens at one tokens-per-char ratio (rounded up, as a plan charges them),
    with running totals of the cheapest and card tokens."""

    tpc: float
    full: list[int]
    card: list[int]
    cheap: list[int]
    cheap_sums: list[int]
    card_sums: list[int]
    # ``full`` as an int64 numpy column with room to grow (doubling), built on first use and then kept in
    # step: the planner gathers the records of many packeted relevant turns from it in C.
    _full_array: npt.NDArray[np.int64] | None = field(default=None, repr=False, compare=False)

    def full_array(self) -> npt.NDArray[np.int64]:
        """``full`` as int64 (read only; a view that later rows do not reach)."""
        if self._full_array is None:
            self._full_array = np.array(self.full, dtype=np.int64)
        return self._full_array[: len(self.full)]

    @classmethod
    def of(cls, tpc: float, full_chars: list[int], card_chars: list[int],
           arrays: tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]] | None = None) -> TokenColumns:
        # ``estimate_tokens`` (math.ceil of chars x tpc) as vector operations: each reply's receipt measures a new
        # rate, which re-derives every row, so this runs once a turn over the whole session. The same ints: a
        # float64 product is the one Python's ``c * tpc`` makes (chars are exact below 2**53), and its ceiling
        # is exact in float64 as an int64. Below ``VECTOR_ROWS`` rows numpy's per-call overhead outweighs it.
        if len(full_chars) < VECTOR_ROWS:
            ceil = math.ceil
            full = [ceil(c * tpc) for c in full_chars]
            card = [ceil(c * tpc) for c in card_chars]
            cheap = list(map(min, full, card))
            return cls(tpc, full, card, cheap, running_totals(cheap), running_totals(card))
        # ``arrays``: the same characters as float64 already (``TurnTable`` keeps them)
        full_f, card_f = arrays or (np.array(full_chars, dtype=np.float64), np.array(card_chars, dtype=np.float64))
        full_a = np.ceil(full_f * tpc).astype(np.int64)
        card_a = np.ceil(card_f * tpc).astype(np.int64)
        cheap_a = np.minimum(full_a, card_a)
        columns = cls(tpc, full_a.tolist(), card_a.tolist(), cheap_a.tolist(), _totals(cheap_a), _totals(card_a))
        columns._full_array = full_a
        return columns

    def set(self, position: int, full_chars: int, card_chars: int) -> None:
        full, card = estimate_tokens(full_chars, self.tpc), estimate_tokens(card_chars, self.tpc)
        if position == len(self.full):
            self.full.append(full)
            self.card.append(card)
            self.cheap.append(min(full, card))
        else:
            self.full[position], self.card[position], self.cheap[position] = full, card, min(full, card)
        if self._full_array is not None:
            if position >= len(self._full_array):
                grown = np.empty(max(2 * len(self._full_array), position + 1, 16), dtype=np.int64)
                grown[: len(self._full_array)] = self._full_array
                self._full_array = grown
            self._full_array[position] = full
        resum(self.cheap_sums, self.cheap, position)
        resum(self.card_sums, self.card, position)


T = TypeVar("T")


class Prefix(Sequence[T]):
    """The first ``stop`` items of a list, read in place: a plan's rows lent by its ``TurnTable`` (which
    copies the list before changing any of these items, and otherwise only appends). Slices are lists;
    pickled, it is a tuple of its items."""

    __slots__ = ("_items", "_stop", "rate")

    def __init__(self, items: list[T], stop: int, rate: float | None = None) -> None:
        if not 0 <= stop <= len(items):
            raise InvalidInput(f"a prefix of {stop} items of a list of {len(items)}")
        self._items, self._stop = items, stop
        # token rows lent at this tokens-per-char: each is ``ceil(chars x rate)`` of its row's characters, lent
        # beside them (``TurnTable.lent_rows``), so a plan entry need not check them (``delta``). None: other rows
        self.rate = rate

    def __len__(self) -> int:
        return self._stop

    @property
    def items(self) -> list[T]:
        """The list it is a prefix of, to index in C: read only, and only below ``len(self)``."""
        return self._items

    @overload
    def __getitem__(self, i: int) -> T: ...

    @overload
    def __getitem__(self, i: slice) -> list[T]: ...

    def __getitem__(self, i: int | slice) -> T | list[T]:
        if isinstance(i, slice):
            a, b, step = i.indices(self._stop)
            return self._items[a:b:step]
        if i < 0:
            i += self._stop
        if not 0 <= i < self._stop:
            raise IndexError(f"row {i} of {self._stop}")
        return self._items[i]

    def __iter__(self) -> Iterator[T]:
        return islice(self._items, self._stop)

    def __reduce__(self) -> tuple[Any, ...]:
        return tuple, (tuple(self),)

    def __repr__(self) -> str:
        return f"Prefix({self._items[: self._stop]!r})"


VECTOR_ROWS = 64  # from this many rows a token column is derived as numpy vectors (``TokenColumns.of``)


def _totals(column: npt.NDArray[np.int64]) -> list[int]:
    """``running_totals`` of an int64 column."""
    totals = np.zeros(len(column) + 1, dtype=np.int64)
    np.cumsum(column, out=totals[1:])
    out: list[int] = totals.tolist()
    return out


def running_totals(column: list[int]) -> list[int]:
    """``totals[i]`` = ``sum(column[:i])``, for ``i`` in ``0..len(column)``."""
    return list(accumulate(column, initial=0))


def resum(totals: list[int], column: list[int], position: int) -> None:
    """Bring ``running_totals`` up to date after ``column[position]`` was set (or appended): only the
    totals from there on change, and a table changes at its end."""
    del totals[position + 1 :]
    totals.extend(accumulate(column[position:], initial=totals[position]))
    del totals[position + 1]  # accumulate repeats its initial value first
