"""The ``<work_contract>``'s names for what its room left out cost room too (issue 34 item 2): at a small room
the rules come first and the rest are named by as many ``recall`` calls as fit, then counted with the tool
that lists them; never a list of every id in place of the items."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from vak_context.context.capacity.tokens import estimate_tokens
from vak_context.context.stated.items import CATEGORIES, StatedItem
from vak_context.context.stated.render import render_contract

TPC = 0.25


def _items(n: int) -> list[StatedItem]:
    return [StatedItem(id=f"{k:012x}{'0' * 52}", category=CATEGORIES[k % len(CATEGORIES)], key=f"k{k}",
                       text=f"Item number {k} says something the user stated about the task, word {k}.",
                       turn=k + 1, via="directive")
            for k in range(n)]


def _lines(text: str) -> list[str]:
    return text.removeprefix("<work_contract>").removesuffix("</work_contract>\n").splitlines()[1:]


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 40), room=st.integers(0, 400))
def test_whole_items_in_budget_order_and_the_rest_named_within_the_room(n: int, room: int) -> None:
    items = sorted(_items(n), key=lambda it: CATEGORIES.index(it.category))
    text = render_contract(items, (), room, TPC)
    tight = estimate_tokens(len(render_contract(items, (), 10**6, TPC)), TPC) > room
    if not text:  # a room too small for the header and the count of what is left out: nothing at all
        assert tight
        return
    lines = _lines(text)
    shown = [line for line in lines if line.startswith("- ") and not line.startswith("- not shown for room")]
    # Budget order, whole items: the shown ones in the order's sequence, each line whole (an item that does
    # not fit is passed over for a later, shorter one). Where the whole contract fits, each with its category
    # and turn; where it does not, each under its category's heading, its words only.
    if tight:
        every = [f"- {' '.join(it.text.split())}" for it in items]
        headings = [line for line in lines if not line.startswith("- ")]
        assert headings == sorted(set(headings), key=lambda h: CATEGORIES.index(h[:-1]))
    else:
        every = [f"- {it.category}: {' '.join(it.text.split())} (turn {it.turn})" for it in items]
    at = iter(every)
    assert all(line in at for line in shown)
    if len(shown) < n:
        named = lines[-1]
        assert named.startswith("- not shown for room: ")
        counted = re.search(r"(?:: |and )(\d+) (?:more )?\(", named)
        assert named.count("recall(") + (int(counted[1]) if counted else 0) == n - len(shown)
        assert counted is None or "commitments() lists them" in named
    # Within the room, always (the contract never grows with the number of items left out).
    assert estimate_tokens(len(text), TPC) <= room


def test_a_small_room_shows_the_rules_not_a_list_of_every_id() -> None:
    items = sorted(_items(24), key=lambda it: CATEGORIES.index(it.category))
    text = render_contract(items, (), 120, TPC)
    assert text.count("recall(") < 5 and "rule:\n- Item number 0 " in text
    for n in (20, 400):  # the names of what is left out never take the room of the items shown
        text = render_contract(_items(n), (), 120, TPC)
        assert estimate_tokens(len(text), TPC) <= 120 and "rule:\n- Item number 0 " in text
