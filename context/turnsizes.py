"""What the planner reads about each turn, besides the TurnIndex: its sizes and its relevance. Pure.

* Sizes (``TurnSize``): the characters a closed turn adds to a request as its full record (evidence
  digested, ``context.render``), as its card (``context.turncard.render_card``), and as its lines in
  a packet's evidence list, counted exactly as ``context.capacity.request_chars`` counts a request.
  ``measure_turn`` needs the evidence digests; ``estimate_size`` reads the stored card's own count.
  ``TurnTable`` keeps them as columns in turn order, so a plan slices instead of looking up.
* Relevance (``Bm25Index``): BM25 over one document per turn (the card's index text, spec §10),
  kept incrementally; scoring walks only the postings of the query's terms.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from context.capacity import request_chars
from context.messages import ChatRequest
from context.packets import CoveredItem, describe_evidence, item_line
from context.render import EvidenceInfo, render_turn
from context.turncard import build_card, index_text, render_card
from context.turns import Turn, TurnIndex
from vak.errors import InvalidInput

# ------------------------------------------------------------------ sizes

@dataclass(frozen=True)
class TurnSize:
    """Characters a closed turn adds to a request: as its full record, and as its card.

    Counted exactly as ``context.capacity.request_chars`` counts a request, so the plan's sums are
    what the assembled request measures.
    """

    full_chars: int
    card_chars: int
    evidence_chars: int = 0  # the turn's evidence lines in a packet (``context.packets.item_line``)
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
    """The exact size of a closed turn at Full (digested evidence), as a card, and in a packet's list."""
    return TurnSize(
        messages_chars(render_turn(turn, infos)), len(card_text(index, turn, infos)), *evidence_lines(index, turn)
    )


def estimate_size(index: TurnIndex, turn: Turn) -> TurnSize:
    """A size without the evidence bodies: the stored card's own measurement of its full record."""
    lines = evidence_lines(index, turn)
    if turn.card is None:
        return TurnSize(turn.chars, turn.chars, *lines)
    full = math.ceil(turn.card.tokens_full / index.tokens_per_char) if turn.card.tokens_full else turn.chars
    return TurnSize(full, len(render_card(turn.card, turn.ordinal)), *lines)


# ------------------------------------------------------------------ relevance (BM25, pure)

_TERM = re.compile(r"[a-z0-9][a-z0-9_]*")
_STOP = frozenset(
    "a an and are as at be by can could did do does for from had has have how i if in is it its me my no not of "
    "on or our please so than that the their them then there these they this to was we were what when where "
    "which who will with would you your".split()
)


def terms(text: str) -> list[str]:
    return [t for t in _TERM.findall(text.lower()) if len(t) > 1 and t not in _STOP]


class Bm25Index:
    """BM25 (k1 1.2, b 0.75) over one document per turn, kept incrementally; scoring touches only the
    postings of the query's terms, so it does not grow with the session."""

    K1 = 1.2
    B = 0.75

    def __init__(self) -> None:
        self.postings: dict[str, dict[str, int]] = {}
        self.lengths: dict[str, int] = {}
        self.total = 0

    def add(self, doc_id: str, text: str) -> None:
        """Index (or re-index) one document."""
        if doc_id in self.lengths:
            self.remove(doc_id)
        counts: dict[str, int] = {}
        for t in terms(text):
            counts[t] = counts.get(t, 0) + 1
        for t, n in counts.items():
            self.postings.setdefault(t, {})[doc_id] = n
        self.lengths[doc_id] = sum(counts.values())
        self.total += self.lengths[doc_id]

    def remove(self, doc_id: str) -> None:
        self.total -= self.lengths.pop(doc_id, 0)
        for t in [t for t, docs in self.postings.items() if doc_id in docs]:
            del self.postings[t][doc_id]
            if not self.postings[t]:
                del self.postings[t]

    def scores(self, query: str) -> dict[str, float]:
        n = len(self.lengths)
        if not n:
            return {}
        avg = self.total / n or 1.0
        out: dict[str, float] = {}
        for t in sorted(set(terms(query))):
            docs = self.postings.get(t)
            # A term in more than half the documents tells them apart by almost nothing (its idf is
            # below ln 2) and would make scoring walk the whole session: it is skipped.
            if not docs or (n > 8 and len(docs) * 2 > n):
                continue
            idf = math.log(1.0 + (n - len(docs) + 0.5) / (len(docs) + 0.5))
            for doc, tf in docs.items():
                norm = tf + self.K1 * (1 - self.B + self.B * self.lengths[doc] / avg)
                out[doc] = out.get(doc, 0.0) + idf * tf * (self.K1 + 1) / norm
        return out


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

    # Token columns (and their digest) for a given tokens-per-char, memoised between plans: the
    # table changes only when a turn does, and then the memo is dropped. Never mutate what it returns.
    _memo: dict[tuple[Any, ...], Any] = field(default_factory=dict, repr=False, compare=False)

    def tokens(self, tpc: float, start: int, stop: int) -> tuple[list[int], list[int], list[int]]:
        """(full, card, cheapest) tokens of rows ``start..stop`` at ``tpc`` tokens per character."""
        key = ("tokens", tpc, start, stop)
        hit = self._memo.get(key)
        if hit is None:
            ceil = math.ceil
            full = [ceil(c * tpc) for c in self.full_chars[start:stop]]
            card = [ceil(c * tpc) for c in self.card_chars[start:stop]]
            hit = self._memo[key] = (full, card, list(map(min, full, card)))
        return hit

    def memo(self, key: tuple[Any, ...], make: Any) -> Any:
        """A value derived from the table, computed once until the table changes."""
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]

    def set(self, position: int, turn_id: str, size: TurnSize) -> None:
        self._memo.clear()
        if position == len(self.ids):
            for column, value in zip(self._columns(), (turn_id, *size_values(size)), strict=True):
                column.append(value)
        elif position < len(self.ids):
            for column, value in zip(self._columns(), (turn_id, *size_values(size)), strict=True):
                column[position] = value
        else:
            raise InvalidInput(f"turn table has {len(self.ids)} rows; set row {len(self.ids)} before row {position}")

    def _columns(self) -> tuple[list[Any], ...]:
        return self.ids, self.full_chars, self.card_chars, self.evidence_chars, self.evidence_items


def size_values(size: TurnSize) -> tuple[int, int, int, int]:
    return size.full_chars, size.card_chars, size.evidence_chars, size.evidence_items
