"""The ``<work_contract>``'s names for what its room left out cost room too (issue 34 item 2): at a small room
the rules come first and the rest are named by as many ``recall`` calls as fit, then counted with the tool
that lists them; never a list of every id in place of the items."""

from __future__ import annotations

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
    lines = _lines(text)
    shown = [line for line in lines if not line.startswith("- not shown for room")]
    # Budget order, whole items: the shown ones in the order's sequence, each line whole (an item that does
    # not fit is passed over for a later, shorter one).
    every = [f"- {it.category}: {' '.join(it.text.split())} (turn {it.turn})" for it in items]
    at = iter(every)
    assert all(line in at for line in shown)
    if len(shown) < n:
        named = lines[-1]
        assert named.startswith(f"- not shown for room ({n - len(shown)}): ")
        assert "commitments() lists them" in named or named.count("recall(") == n - len(shown)
    # Within the room wherever anything at all is shown (a room too small for the header and one count is
    # the planner's to avoid: the contract never grows with the number of items left out).
    if shown:
        assert estimate_tokens(len(text), TPC) <= room


def test_a_small_room_shows_the_rules_not_a_list_of_every_id() -> None:
    items = sorted(_items(24), key=lambda it: CATEGORIES.index(it.category))
    text = render_contract(items, (), 120, TPC)
    assert text.count("recall(") < 5 and "- rule: Item number 0 " in text
    assert abs(len(render_contract(_items(400), (), 120, TPC)) - len(render_contract(_items(20), (), 120, TPC))) <= 8
