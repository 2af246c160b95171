"""The tail's ``<work_contract>``: the stated items in force, as a request carries them (docs/STATE.md). Pure.

One source per fact: an item extracted from a directive whose turn the plan carries whole is left out (its
words are in the request already); an item pinned outside a directive (the API, ``vak serve``, the
``commitments`` tool) is always carried. The rest go in budget order (safety rules and hard constraints,
then goal state, facts, preferences), whole items only, within the contract's room (:func:`contract_room`);
each one that does not fit is named with the ``recall`` call that returns it. The bytes are a function of
the items, the set of turns carried whole and the room alone, so they stay the same while those do.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Sequence

from vak_context.context.capacity.tokens import estimate_tokens
from vak_context.context.stated.items import CATEGORIES, StatedItem

# The engine tool that lists every item in force (agent/tools/commitments.py; named here, the pure core
# imports nothing of the agent's).
COMMITMENTS_NAME = "commitments"

# The contract's share of what a request's prompt may carry beside the stable prefix: it is what the user
# said must bind, worth more per token than an older turn's card, yet never the whole request.
CONTRACT_SHARE = 0.25
HEADER = "In force, as the user stated (a later statement replaces one):"
_LABELLED = tuple(c.upper() for c in ("safety rule", "hard constraint", "fact", "goal state", "user preference"))


def contract_block(body: str) -> str:
    """The tail's line for a contract body (empty when there is none)."""
    return f"<work_contract>{body.strip()}</work_contract>" if body.strip() else ""


def contract_room(prompt_tokens: int) -> int:
    """The contract's room in tokens, of the ``prompt_tokens`` a request may carry beside its prefix."""
    return max(0, int(prompt_tokens * CONTRACT_SHARE))


def item_line(item: StatedItem) -> str:
    where = f" (turn {item.turn})" if item.turn is not None else ""
    text = " ".join(item.text.split())
    return f"- {text}{where}" if text.upper().startswith(_LABELLED) else f"- {item.category}: {text}{where}"


def recall_of(item: StatedItem) -> str:
    return f'recall({{"id": "{item.id[:12]}"}})'


def carried(items: Iterable[StatedItem], whole: Collection[int]) -> list[StatedItem]:
    """The items the contract must carry: all but those said in a directive whose turn is carried whole."""
    return [it for it in items if not (it.via == "directive" and it.turn is not None and it.turn in whole)]


def render_contract(items: Iterable[StatedItem], whole: Collection[int], room: int, tokens_per_char: float) -> str:
    """The ``<work_contract>`` line (with its newline), or "" when nothing is to be carried. ``items``: in
    force, in budget order; ``whole``: the ordinals of the turns the request carries whole; ``room``: tokens."""
    todo = sorted(carried(items, whole), key=lambda it: CATEGORIES.index(it.category))
    if not todo:
        return ""

    def cost(text: str) -> int:
        return estimate_tokens(len(text), tokens_per_char)

    lines_of = [item_line(it) for it in todo]
    every = list(range(len(todo)))
    if cost(_render(todo, lines_of, every, ())) <= room:  # all of it fits
        return _render(todo, lines_of, every, ())
    # Whole items in budget order, each kept when the contract with it (and the rest counted) still fits;
    # then the left-out items' recall calls, as many as fit, the rest counted with the tool that lists them
    # (the names cost room too: a list of every id could take it all and leave no item shown).
    shown: list[int] = []
    for i in range(len(todo)):
        if cost(_render(todo, lines_of, [*shown, i], ())) <= room:
            shown.append(i)
    left_out = [it for i, it in enumerate(todo) if i not in shown]
    named: list[StatedItem] = []
    for it in left_out:
        if cost(_render(todo, lines_of, shown, [*named, it])) <= room:
            named.append(it)
        else:
            break
    return _render(todo, lines_of, shown, named)


def _render(todo: list[StatedItem], lines_of: list[str], shown: list[int], named: Sequence[StatedItem]) -> str:
    left_out = [it for i, it in enumerate(todo) if i not in shown]
    lines = [HEADER, *(lines_of[i] for i in shown)]
    if left_out:
        lines.append(_not_shown(left_out, named))
    return contract_block("\n".join(lines)) + "\n"


def _not_shown(left_out: list[StatedItem], named: Sequence[StatedItem]) -> str:
    """The line that names what the room left out: each item's ``recall`` where it fits, the rest counted by
    category with the ``commitments`` tool, which lists every item in force with its id."""
    counts = Counter(it.category for it in left_out if it not in named)
    rest = ", ".join(f"{n} {c}" for c, n in sorted(counts.items(), key=lambda kv: CATEGORIES.index(kv[0])))
    parts = [recall_of(it) for it in named]
    if rest:
        parts.append(f"{'and ' if named else ''}{sum(counts.values())} more ({rest}): {COMMITMENTS_NAME}() lists them")
    return f"- not shown for room ({len(left_out)}): " + ", ".join(parts)


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
