"""Stated items and their fold (docs/STATE.md). Pure.

A stated item is a ``work_contract`` entry with a category (``rule``, ``constraint``, ``goal``, ``fact``,
``preference``) and a key: a later item of the same key supersedes it, and an inactive one takes the key out.
:class:`StatedState` folds the items of a chain in order; :meth:`StatedState.current` is what is in force as
of a turn (items appended before that turn's directive: one pinned or extracted while a turn runs applies from
the next turn, so a turn's ``<work_contract>`` never changes between its steps).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from vak_context.events.payloads import WorkContract

# Budget order when the contract cannot all fit: safety rules and hard constraints, then goal state, facts,
# preferences.
CATEGORIES = ("rule", "constraint", "goal", "fact", "preference")
VIAS = ("directive", "model", "api", "serve", "tool")  # "model": the model pass at turn close

_LABEL = re.compile(r"^\W*(?:[A-Z][A-Z ]{1,24}|[A-Za-z]+):\s+")  # "FACT: ", "Safety rule: ": not what it is about
_TOKEN = re.compile(r"\w[\w'./:-]*")  # a value ("eu-west-1", "3f9c2ab") is one token
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]*|\d[\w.:/-]*")
# Words a statement's subject is not told by: function words and the modal verbs of a rule.
_STOP = frozenset("""a an the and or but if then than so to of in on at by for with from into onto about as is are was
were be been being it its this that these those there here we you i me my our your their they he she him her us
do does did not no never always must should shall may might can could will would please also just only now still
new current currently any all every each some per via user users user's set ever without times time week does did has have""".split())


def norm_key(text: str) -> str:
    """A key as written by anyone: lower case, words only, one space between them."""
    return " ".join(w.lower().rstrip(".:/-") for w in _WORD.findall(text))[:120]


def subject_words(text: str) -> frozenset[str]:
    """What a statement is about, without its values: words of three letters or more that are neither
    function words nor values (numbers, codes, capitalised names after the first word)."""
    out = set()
    for i, w in enumerate(_TOKEN.findall(_LABEL.sub("", text))):
        if any(c.isdigit() for c in w) or (i > 0 and w[:1].isupper()) or len(w) < 3:
            continue
        lw = w.lower().rstrip(".:/-")
        if lw.endswith("'s"):
            lw = lw[:-2]
        elif lw.endswith("s") and len(lw) > 4 and not lw.endswith(("ss", "us", "is")):
            lw = lw[:-1]  # a plural: "examples" and "example" are one subject
        if lw not in _STOP and len(lw) >= 3:
            out.add(lw)
    return frozenset(out)


@dataclass(frozen=True)
class StatedItem:
    """One item in the ledger: its entry ``id``; ``turn``, the ordinal of the turn it was stated in (None:
    outside a turn); ``appended_in``, the turn whose span the entry was appended in (0: before the first)."""

    id: str
    category: str
    text: str
    key: str
    active: bool = True
    turn: int | None = None
    turn_id: str | None = None
    entry_id: str | None = None
    via: str = ""
    appended_in: int = 0

    @property
    def rank(self) -> int:
        return CATEGORIES.index(self.category)


def item_of(entry_id: str, payload: WorkContract, turn: int | None, appended_in: int) -> StatedItem | None:
    """The stated item a ``work_contract`` entry holds; None for a contract text without a category."""
    if not payload.category:
        return None
    key = payload.key or norm_key(payload.text)
    return StatedItem(entry_id, payload.category, payload.text, key, payload.active, turn, payload.turn_id,
                      payload.entry_id, payload.via, appended_in)


@dataclass
class StatedState:
    """Every stated item of a chain, in the order appended (superseded and inactive ones too)."""

    items: list[StatedItem] = field(default_factory=list)

    def add(self, item: StatedItem) -> None:
        self.items.append(item)

    def current(self, before: int | None = None) -> tuple[StatedItem, ...]:
        """The items in force, as of the turn ``before`` (those appended before its directive; None: all),
        in budget order: by category, then in the order stated."""
        live: dict[str, StatedItem] = {}
        for item in self.items:
            if before is not None and item.appended_in >= before:
                continue
            if item.active:
                live.pop(item.key, None)  # a restatement moves to where it was stated last
                live[item.key] = item
            else:
                live.pop(item.key, None)
        order = {item.id: i for i, item in enumerate(self.items)}
        return tuple(sorted(live.values(), key=lambda it: (it.rank, order[it.id])))

    def find(self, ident: str) -> StatedItem | None:
        """An item by its entry id or a unique prefix of six or more hex digits of it."""
        ident = ident.strip().lower()
        hits = [it for it in self.items if it.id == ident or (len(ident) >= 6 and it.id.startswith(ident))]
        return hits[0] if len(hits) == 1 else None


def superseded_key(text: str, category: str, current: tuple[StatedItem, ...]) -> str | None:
    """The key of the item in force that a new statement restates about the same subject (a paraphrase with a
    new value): the same category, and of the smaller statement's subject words at least 0.6 shared, two at
    least (three for a rule: a rule lost to a wrong match is worse than an old one shown beside the new)."""
    words = subject_words(text)
    best, best_score = None, 0.0
    for item in current:
        if item.category != category:
            continue
        other = subject_words(item.text)
        shared = len(words & other)
        score = shared / max(1, min(len(words), len(other)))
        if shared >= (3 if category == "rule" else 2) and score >= 0.6 and score > best_score:
            best, best_score = item.key, score
    return best
