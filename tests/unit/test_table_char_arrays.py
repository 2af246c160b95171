"""``TurnTable`` keeps its character columns as float64 arrays beside the lists (issue 37: a receipt's new
tokens-per-char value derived every row's tokens from lists converted each time): the token columns it derives
from them are the ones the lists give, whatever rows were appended, changed in place or lent to a plan."""

from __future__ import annotations

import random

from vak_context.context.planner.sizes import VECTOR_ROWS, TokenColumns, TurnSize, TurnTable


def test_kept_arrays_give_the_columns_the_lists_give() -> None:
    rng = random.Random(5)
    table = TurnTable()
    for step in range(600):
        position = len(table.ids) if rng.random() < 0.6 or not table.ids else rng.randrange(len(table.ids))
        size = TurnSize(rng.randrange(0, 90_000), rng.randrange(0, 3_000), rng.randrange(0, 500), rng.randrange(0, 9))
        turn_id = table.ids[position] if position < len(table.ids) else f"t{position}"
        table.set(position, turn_id, size)
        if rng.random() < 0.1:
            table.lend()
        if step % 7 == 0 and len(table.ids) >= VECTOR_ROWS:
            tpc = rng.uniform(0.1, 0.5)
            kept = table.whole_tokens(tpc)
            fresh = TokenColumns.of(tpc, list(table.full_chars), list(table.card_chars))
            assert (kept.full, kept.card, kept.cheap, kept.cheap_sums, kept.card_sums) == (
                fresh.full, fresh.card, fresh.cheap, fresh.cheap_sums, fresh.card_sums), step
    assert len(table.ids) > 300  # the arrays grew past their first room several times
