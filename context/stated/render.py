"""The tail's ``<work_contract>``: the stated items in force, as a request carries them (docs/STATE.md). Pure.

One source per fact: an item extracted from a directive whose turn the plan carries whole is left out (its
words are in the request already); an item pinned outside a directive (the API, ``vak serve``, the
``commitments`` tool) is always carried. The rest go in budget order (safety rules and hard constraints,
then goal state, facts, preferences), whole items only, within the contract's room (:func:`contract_room`);
each one that does not fit is named with the ``recall`` call that returns it. The bytes are a function of
the items, the set of turns carried whole and the room alone, so they stay the same while those do.

The room is the plan's (:func:`contract_room`, reserved by ``vak_context.context.planner.room.room_of`` before
the history and carried in ``Budget.contract``): what the whole contract needs, where the request can hold it
beside the current turn at its most compact; else all of that, and the items in budget order within it, each
line then without its ``(turn N)`` (the ``commitments`` tool and ``recall`` still say where it was stated).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Sequence

from vak_context.context.capacity.tokens import estimate_tokens
from vak_context.context.stated.items import CATEGORIES, StatedItem

# The engine tool that lists every item in force (agent/tools/commitments.py; named here, the pure core
# imports nothing of the agent's).
COMMITMENTS_NAME = "commitments"

HEADER = "In force, as the user stated (a later statement replaces one):"
TIGHT_HEADER = "In force, as the user stated (the latest wins):"  # where the room is tight, the same in fewer words
# The labels the kit's and many users' statements lead with, by the category each says.
_LABEL_OF = {"rule": "SAFETY RULE", "constraint": "HARD CONSTRAINT", "fact": "FACT", "goal": "GOAL STATE",
             "preference": "USER PREFERENCE"}
_LABELLED = tuple(_LABEL_OF.values())


def contract_block(body: str) -> str:
    """The tail's line for a contract body (empty when there is none)."""
    return f"<work_contract>{body.strip()}</work_contract>" if body.strip() else ""


def contract_room(items: Sequence[StatedItem], cap: int, tokens_per_char: float) -> int:
    """The contract's room in tokens: what the whole contract needs (every item in force, as if no turn
    were carried whole), or ``cap`` when it needs more (the items then go in budget order within it); 0 when
    nothing is stated or ``cap`` cannot hold even the header and the count of what is left out. A function of
    the items and ``cap`` alone, so it stays the same while they do (and while the whole contract fits, of
    the items alone)."""
    if not items or cap <= 0:
        return 0
    need = estimate_tokens(len(render_contract(items, (), _UNBOUNDED, tokens_per_char)), tokens_per_char)
    if need <= cap:
        return need
    return cap if render_contract(items, (), cap, tokens_per_char) else 0


_UNBOUNDED = 1 << 40


def item_line(item: StatedItem) -> str:
    """An item's line where the whole contract fits: its words, with its category unless their label says
    it, and the turn it was stated in."""
    turn = f" (turn {item.turn})" if item.turn is not None else ""
    text = " ".join(item.text.split())
    return f"- {text}{turn}" if text.upper().startswith(_LABELLED) else f"- {item.category}: {text}{turn}"


def tight_line(item: StatedItem) -> str:
    """An item's line where the room is tight, under its category's heading: its words without the label
    that heading says (``SAFETY RULE:`` under ``rule:``), without its turn (``recall`` and the ``commitments``
    tool say where it was stated)."""
    text = " ".join(item.text.split())
    label = _LABEL_OF.get(item.category, "")
    if label and text.upper().startswith(label + ":"):
        text = text[len(label) + 1:].lstrip() or text
    return f"- {text}"


def recall_of(item: StatedItem) -> str:
    return f'recall({{"id": "{item.id[:12]}"}})'


_SAID = ("directive", "model")  # the ways in whose words are the directive's own


def carried(items: Iterable[StatedItem], whole: Collection[int]) -> list[StatedItem]:
    """The items the contract must carry: all but those said in a directive whose turn is carried whole (found
    there by the deterministic pass or the model pass: their words are in the request)."""
    return [it for it in items if not (it.via in _SAID and it.turn is not None and it.turn in whole)]


def render_contract(items: Iterable[StatedItem], whole: Collection[int], room: int, tokens_per_char: float) -> str:
    """The ``<work_contract>`` line (with its newline), or "" when nothing is to be carried (or ``room`` holds
    not even the header and the count of what is left out). ``items``: in force, in budget order; ``whole``:
    the ordinals of the turns the request carries whole; ``room``: tokens."""
    todo = sorted(carried(items, whole), key=lambda it: CATEGORIES.index(it.category))
    if not todo:
        return ""
    full = _Form(todo, [item_line(it) for it in todo], grouped=False)
    every = list(range(len(todo)))
    if estimate_tokens(full.size(every, ()), tokens_per_char) <= room:  # all of it fits
        return full.render(every, ())
    # Tight: under a heading per category, each item's words only. Whole items in budget order, each kept
    # when the contract with it (and the rest counted) still fits; then the left-out items' recall calls, as
    # many as fit, the rest counted with the tool that lists them (the names cost room too: a list of every
    # id could take it all and leave no item shown).
    form = _Form(todo, [tight_line(it) for it in todo], grouped=True)

    def fits(shown: Sequence[int], named: Sequence[StatedItem]) -> bool:
        return estimate_tokens(form.size(shown, named), tokens_per_char) <= room

    if not fits([], ()):
        return ""
    shown: list[int] = []
    for i in range(len(todo)):
        if fits([*shown, i], ()):
            shown.append(i)
    left_out = [it for i, it in enumerate(todo) if i not in shown]
    named: list[StatedItem] = []
    for it in left_out:
        if not fits(shown, [*named, it]):
            break
        named.append(it)
    return form.render(shown, named)


class _Form:
    """The contract's lines in one form, sized without rendering (the greedy fit sizes it once per item)."""

    def __init__(self, todo: list[StatedItem], lines: list[str], *, grouped: bool) -> None:
        self.todo, self.lines, self.grouped = todo, lines, grouped

    def _lines(self, shown: Sequence[int], named: Sequence[StatedItem]) -> list[str]:
        out, heading = [TIGHT_HEADER if self.grouped else HEADER], None
        for i in sorted(shown):
            category = self.todo[i].category
            if self.grouped and category != heading:
                out.append(f"{category}:")
                heading = category
            out.append(self.lines[i])
        if len(shown) < len(self.todo):
            taken = set(shown)
            out.append(_not_shown([it for i, it in enumerate(self.todo) if i not in taken], named))
        return out

    def size(self, shown: Sequence[int], named: Sequence[StatedItem]) -> int:
        lines = self._lines(shown, named)
        return _WRAP + sum(map(len, lines)) + len(lines)  # the lines, a newline between each and at the end

    def render(self, shown: Sequence[int], named: Sequence[StatedItem]) -> str:
        return contract_block("\n".join(self._lines(shown, named))) + "\n"


_WRAP = len("<work_contract></work_contract>")


def _not_shown(left_out: list[StatedItem], named: Sequence[StatedItem]) -> str:
    """The line that names what the room left out: each item's ``recall`` where it fits, the rest counted by
    category with the ``commitments`` tool, which lists every item in force with its id."""
    counts = Counter(it.category for it in left_out if it not in named)
    rest = ", ".join(f"{n} {c}" for c, n in sorted(counts.items(), key=lambda kv: CATEGORIES.index(kv[0])))
    parts = [recall_of(it) for it in named]
    if rest:
        many = f"and {sum(counts.values())} more" if named else str(sum(counts.values()))
        parts.append(f"{many} ({rest}): {COMMITMENTS_NAME}() lists them")
    return "- not shown for room: " + ", ".join(parts)


def listing(items: Iterable[StatedItem]) -> str:
    """Every item in force with its id and where it was stated: the ``commitments`` tool's answer."""
    lines = []
    for it in items:
        where = [f"turn {it.turn}"] if it.turn is not None else []
        where.append(f"via {it.via or 'directive'}")
        lines.append(f"[{it.id[:12]}] {it.category} ({', '.join(where)}; key {it.key!r}): {' '.join(it.text.split())}")
    return "\n".join(lines) if lines else "Nothing is stated yet."


def stated_text(item: StatedItem) -> str:
    """One item as ``recall`` returns it: what was stated, where and how, and whether it is still in force."""
    where = f"turn {item.turn}" if item.turn is not None else "outside a turn"
    return (f"stated {item.category} (key {item.key!r}; {where}, via {item.via or 'directive'}; "
            f"entry {item.id[:12]}): {item.text}")


SAID_HEADER = "Stated in these turns, in the user's words:"


def said_in(items: Iterable[StatedItem], first: int, last: int) -> list[StatedItem]:
    """The items said in turns ``first..=last`` (a directive, or a step's ``commitments`` call), budget order."""
    return sorted((it for it in items if it.turn is not None and first <= it.turn <= last),
                  key=lambda it: CATEGORIES.index(it.category))


def said_block(items: Sequence[StatedItem], max_chars: int) -> str:
    """What a packet's summary keeps of the stated items its turns said (issue 34 item 3): each verbatim (its
    category, its words and its turn), whole items in budget order while they fit ``max_chars``; each left out
    named with the ``recall`` that returns it, as many as fit, the rest counted with the ``commitments`` tool.
    "" when there are none, or ``max_chars`` holds not even the header and that count. Deterministic."""
    if not items:
        return ""
    lines = [item_line(it) for it in items]

    def size(shown: Sequence[int], named: Sequence[StatedItem]) -> int:
        out = [SAID_HEADER, *(lines[i] for i in shown)]
        if len(shown) < len(items):
            taken = set(shown)
            out.append(_not_shown([it for i, it in enumerate(items) if i not in taken], named))
        return sum(map(len, out)) + len(out) - 1

    if size([], ()) > max_chars and size(range(len(items)), ()) > max_chars:
        return ""
    shown: list[int] = []
    for i in range(len(items)):
        if size([*shown, i], ()) <= max_chars:
            shown.append(i)
    left_out = [it for i, it in enumerate(items) if i not in shown]
    named: list[StatedItem] = []
    for it in left_out:
        if size(shown, [*named, it]) > max_chars:
            break
        named.append(it)
    out = [SAID_HEADER, *(lines[i] for i in shown)]
    if left_out:
        out.append(_not_shown(left_out, named))
    return "\n".join(out)


def without_said(summary: str) -> str:
    """A stored summary without the stated items' block it opens with (``said_block``, then a blank line): what a
    summariser growing it is given, since the grown packet's block is written anew for its whole range."""
    if not summary.startswith(SAID_HEADER):
        return summary
    _, sep, rest = summary.partition("\n\n")
    return rest.strip() if sep else ""
