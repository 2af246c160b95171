"""The one tokeniser and the one BM25 every ranking in the project uses. Pure, standard library only.

Who ranks with it, over what:

* the planner's relevance: each turn's document (its card's index text, or its directive), by turn
  position (``vak_context.context.planner.relevance.PositionBm25``, which adds numpy columns for many postings and gives
  the same floats);
* ``find_tools``: the deferred tools by name and description (``vak_context.context.request.surface.Surface.find``);
* the card index: each closed turn's index text, kept in whoosh with a weighting model that computes
  this module's score from its functions (``idf``, ``gain``, ``is_common``; ``vak_context.storage.cardwhoosh``).

It lives in ``vak/`` because ``storage`` and ``context`` both rank and neither may import the other.

The definition:

* **Tokeniser** (``terms``): lowercase, then runs of ASCII letters, digits and underscores that start
  with a letter or digit; English stop words are dropped; no stemming. A one-character run is a term
  (``topic 1`` and ``topic 2`` differ; ``x``, ``n`` are variables), except ``a``, ``i`` and
  the ``s`` and ``t`` of ``user's``, ``don't``. A code
  identifier stays one term (``parse_args``, ``x86_64``), punctuation separates (``foo.bar()`` gives
  foo, bar), a camelCase name is one term (``ExitPlanMode`` gives exitplanmode). A non-ASCII letter
  separates terms (``Zürich`` gives z and rich; text with no ASCII letter or digit has no terms). That is
  kept because the planner's plans depend on these exact terms: a Unicode-aware tokeniser (equal on
  ASCII) changes the relevance, hence the plans, of any session with such letters.
* **Scoring**: Okapi BM25 with k1 = 1.2 and b = 0.75; idf = ln(1 + (N − df + 0.5) / (df + 0.5)), which
  is never negative; a term adds idf · tf · (k1 + 1) / (tf + k1 · (1 − b + b · length / average length));
  the query's distinct terms are added in sorted order, so the floats do not depend on how it is worded.
* **Common terms**: in an index of more than 8 documents, a query term found in more than half of
  them is skipped (``scores``): its idf is below ln 2, so it barely tells documents apart, and walking
  its postings would cost a pass over most of the session on every plan. A search (``search``: the
  card index and ``find_tools``) that finds nothing that way scores the common terms too, so a query
  of common words still finds their documents; whenever ``scores`` finds anything, ``search`` gives
  the same scores, so the search tools and the planner rank the same turns the same way.
* **Ranking** (``best_first``): highest score first, ties by document key (a turn id, a position).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from itertools import filterfalse, repeat
from operator import add, truediv
from typing import Generic, TypeVar

Doc = TypeVar("Doc", str, int)  # a document key: a turn id, or a position (a turn's, a tool's)

# One character or more: a digit or a one-letter name tells documents apart ("topic 1 vector databases").
_TERM = re.compile(r"[a-z0-9][a-z0-9_]*")
_STOP = frozenset(
    "a an and are as at be by can could did do does for from had has have how i if in is it its me my no not of "
    "on or our please so than that the their them then there these they this to was we were what when where "
    "which who will with would you your".split()
) | {"s", "t"}  # what is left of "user's", "don't" once the apostrophe separates: noise, not a term

K1 = 1.2
B = 0.75
COMMON_ABOVE = 8  # documents an index holds before a term in more than half of them is skipped


def terms(text: str) -> list[str]:
    """The text's terms, in order, repeats kept (see the module docstring)."""
    return list(filterfalse(_STOP.__contains__, _TERM.findall(text.lower())))


def query_terms(query: str) -> list[str]:
    """A query's distinct terms, sorted: the order their gains are added in."""
    return sorted(set(terms(query)))


def idf(documents: int, containing: int) -> float:
    """ln(1 + (N − df + 0.5) / (df + 0.5)): above 0 for any df."""
    return math.log(1.0 + (documents - containing + 0.5) / (containing + 0.5))


def gain(weight: float, tf: float, length: float, average: float, k1: float = K1, b: float = B) -> float:
    """One term's share of a document's score: the operations of ``Bm25Index.term_scores``, in its order,
    so the same floats (the whoosh card index scores with it, ``vak_context.storage.cardwhoosh``)."""
    return weight * tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / average))


def is_common(documents: int, containing: int) -> bool:
    """Whether a term found in ``containing`` of ``documents`` is skipped by ``Bm25Index.scores``."""
    return documents > COMMON_ABOVE and containing * 2 > documents


def best_first(scores: Mapping[Doc, float]) -> list[tuple[Doc, float]]:
    """The scored documents, highest first, ties by key."""
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))


class Bm25Index(Generic[Doc]):
    """BM25 over one document per key, kept incrementally; scoring touches only the postings of the
    query's terms: it grows with the documents that share a term with the query (at most half of
    them, as a term in more is skipped), not with every document."""

    K1 = K1
    B = B

    def __init__(self) -> None:
        self.postings: dict[str, dict[Doc, int]] = {}
        self.lengths: dict[Doc, int] = {}
        self.total = 0
        self._terms: dict[Doc, tuple[str, ...]] = {}  # each document's distinct terms, to re-index it

    def add(self, doc_id: Doc, text: str) -> None:
        """Index (or re-index) one document."""
        if doc_id in self.lengths:
            self.remove(doc_id)
        found = terms(text)
        counts = Counter(found)  # terms in first-seen order, as the postings are filled
        for t, n in counts.items():
            self.postings.setdefault(t, {})[doc_id] = n
        self.lengths[doc_id] = len(found)
        self.total += self.lengths[doc_id]
        self._terms[doc_id] = tuple(counts)

    def remove(self, doc_id: Doc) -> None:
        self.total -= self.lengths.pop(doc_id, 0)
        for t in self._terms.pop(doc_id, ()):
            del self.postings[t][doc_id]
            if not self.postings[t]:
                del self.postings[t]

    def scores(self, query: str) -> dict[Doc, float]:
        """Each document that shares a term with ``query`` (common terms skipped), with its score."""
        return self.term_scores(query_terms(query))

    def search(self, query: str) -> dict[Doc, float]:
        """``scores``, or when they find nothing, the scores with the common terms counted too."""
        wanted = query_terms(query)
        return self.term_scores(wanted) or self.term_scores(wanted, common=True)

    def weighted_terms(self, wanted: Sequence[str], *, common: bool = False) -> Iterator[tuple[str, float]]:
        """The query terms that score, in order, each with its idf; common ones only when asked."""
        n = len(self.lengths)
        for t in wanted:
            docs = self.postings.get(t)
            if docs and (common or not is_common(n, len(docs))):
                yield t, idf(n, len(docs))

    def average_length(self) -> float:
        return self.total / len(self.lengths) or 1.0

    def term_scores(self, wanted: Sequence[str], *, common: bool = False) -> dict[Doc, float]:
        """``scores`` of a query already split into its distinct terms, sorted."""
        if not self.lengths:
            return {}
        avg, k1, b = self.average_length(), self.K1, self.B
        out: dict[Doc, float] = {}
        damping: dict[int, float] = {}  # k1 * (1 - b + b * length / avg), by document length
        for t, weight in self.weighted_terms(wanted, common=common):
            docs = self.postings[t]
            # A frequent term has thousands of postings but few distinct lengths and counts: those parts
            # are computed once each (operation for operation, so the same floats), the rest as C-level maps.
            ids, counts = list(docs), list(docs.values())
            lengths = list(map(self.lengths.__getitem__, ids))
            for length in set(lengths).difference(damping):
                damping[length] = k1 * (1 - b + b * length / avg)
            boost = {tf: weight * tf * (k1 + 1) for tf in set(counts)}
            gain = map(truediv, map(boost.__getitem__, counts), map(add, counts, map(damping.__getitem__, lengths)))
            if out:  # out.get(doc, 0.0) + gain: each doc occurs once per term, read before written
                out.update(zip(ids, map(add, map(out.get, ids, repeat(0.0)), gain), strict=True))
            else:
                out = dict(zip(ids, gain, strict=True))
        return out
