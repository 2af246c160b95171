"""Does a text contradict a stated rule or hard constraint? The check behind the ``contradiction`` rule
(docs/DRIFT.md "Stated rules"). Pure, and deliberately narrow: it reads words, not meaning.

* a prohibition (``never X``, ``do not X``, ``no X``, ``X is forbidden``): a sentence of the text names every
  content word of X (up to four, two at least) and carries no negation of its own;
* a cap with a number (a budget, ``at most N <unit>``): a sentence names a larger amount in the same
  currency or unit, with no negation.

Anything else (``always X``, a deadline, a goal) is never judged: its absence from a text says nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from vak_context.context.stated.items import StatedItem

_CUE = re.compile(r"\b(?:never(?:\s+ever)?|do\s+not|don'?t|must\s+not|mustn'?t|should\s+not|shouldn'?t|shall\s+not|"
                  r"may\s+not|cannot|can'?t|avoid|refrain\s+from|no)\s+(?P<action>[^,;:.!?]+)|"
                  r"(?P<subject>[^,;:.!?]+?)\s+(?:is|are)\s+(?:strictly\s+)?(?:forbidden|prohibited|not allowed|"
                  r"not permitted|banned|off[- ]limits)", re.IGNORECASE)
_UNTIL = re.compile(r"\b(?:without|unless|until|except|even|before|if|when)\b.*$", re.IGNORECASE)
_NEGATION = re.compile(r"\b(?:not|never|no|n't|don'?t|won'?t|cannot|can'?t|refuse[sd]?|forbidden|prohibited|"
                       r"avoid|without|shouldn'?t|mustn'?t|isn'?t|aren'?t|wouldn'?t|didn'?t|rule|policy)\b|n't\b",
                       re.IGNORECASE)
_WORDS = re.compile(r"[a-z][a-z0-9_./-]*", re.IGNORECASE)
_SKIP = frozenset("""a an the to of in on at by for with from into any all ever your my our their this that these
those it its and or be is are was were you we i me them us please anything something""".split())
_SENTENCES = re.compile(r"(?<=[.!?;\n])\s+")
_MONEY = re.compile(r"[$€£]\s?(\d[\d,]*(?:\.\d+)?)\s?([kKmM]\b)?")
_COUNT = re.compile(r"\b(\d[\d,]*(?:\.\d+)?)\s*([a-z]+)", re.IGNORECASE)


def _terms(phrase: str) -> list[str]:
    return [w.lower() for w in _WORDS.findall(phrase) if w.lower() not in _SKIP][:4]


def _stem(word: str) -> str:
    return word[: max(4, len(word) - 3)] if len(word) > 5 else word


def prohibited(item: StatedItem) -> list[list[str]]:
    """The content words of each action a prohibition forbids (``never reveal keys or passwords``: reveal
    keys, reveal passwords); empty when the item forbids nothing."""
    for m in _CUE.finditer(item.text):
        phrase = _UNTIL.sub("", m["action"] if m["action"] is not None else m["subject"])
        first, *others = re.split(r"\s+(?:or|nor)\s+", phrase)
        base = _terms(first)
        if len(base) < 2:
            continue
        return [base] + [[base[0], *t][:4] for t in map(_terms, others) if t]
    return []


def _amount(value: str, scale: str | None) -> float:
    n = float(value.replace(",", ""))
    return n * {"k": 1e3, "m": 1e6}.get((scale or "").lower(), 1)


def _cap(item: StatedItem) -> tuple[str, float] | None:
    """(unit, amount) of a numeric cap: ``$`` for a budget, else the limit's unit."""
    if item.key == "budget":
        m = _MONEY.search(item.text)
        return ("$", _amount(m[1], m[2])) if m else None
    if item.key.startswith("limit:"):
        unit = item.key.removeprefix("limit:")
        for m in _COUNT.finditer(item.text):
            if m[2].lower().startswith(unit[:4]):
                return unit, _amount(m[1], None)
    return None


def contradictions(items: Iterable[StatedItem], text: str) -> list[tuple[StatedItem, str]]:
    """The rules and hard constraints ``text`` contradicts, each with the sentence that does."""
    sentences = [s.strip() for s in _SENTENCES.split(text) if s.strip()]
    out: list[tuple[StatedItem, str]] = []
    for item in items:
        if item.category not in ("rule", "constraint"):
            continue
        hit = _prohibition_hit(item, sentences) or _cap_hit(item, sentences)
        if hit:
            out.append((item, hit))
    return out


def _prohibition_hit(item: StatedItem, sentences: list[str]) -> str | None:
    actions = prohibited(item)
    for sentence in sentences:
        words = [w.lower() for w in _WORDS.findall(sentence)]
        if any(all(any(w.startswith(_stem(t)) for w in words) for t in terms) for terms in actions) \
                and not _NEGATION.search(sentence):
            return sentence[:300]
    return None


def _cap_hit(item: StatedItem, sentences: list[str]) -> str | None:
    cap = _cap(item)
    if cap is None:
        return None
    unit, limit = cap
    for sentence in sentences:
        if _NEGATION.search(sentence):
            continue
        if unit == "$":
            amounts = [_amount(m[1], m[2]) for m in _MONEY.finditer(sentence)]
        else:
            amounts = [_amount(m[1], None) for m in _COUNT.finditer(sentence) if m[2].lower().startswith(unit[:4])]
        if any(a > limit for a in amounts):
            return sentence[:300]
    return None
