"""A packet's batch never takes the turns the budget keeps (issue 34 item 3): batches of 8 from the first planned
turn stay, but the rounding never takes the newest batch, and what a batch cut short frees of the packet's share
goes to its summary. Planned over the in-memory sessions the planner's own tests use (pure)."""

from __future__ import annotations

import math

import pytest

from tests.fakes.sessions import build_session, profile
from vak_context.context.history.packets import PACKET_SHARE, covered_evidence, item_line, packet_room
from vak_context.context.planner.fill import batch_end
from vak_context.context.planner.records import Fidelity

NO_TERMS = "Continue with the plan."  # shares no term with any turn: nothing in the packet is retrieved


def test_a_batch_is_rounded_up_to_8_but_never_to_the_sessions_end() -> None:
    """Batches of 8 from the first planned turn; a batch that would reach the end stops short of the newest 4,
    2 or 1 turns, the most that fit (``need``: how many of the oldest turns do not fit)."""
    assert [batch_end(need, 63) for need in (1, 8, 9, 50, 56, 57, 59, 60, 61, 62, 63)] == \
           [8, 8, 16, 56, 56, 59, 59, 61, 61, 62, 63]
    assert [batch_end(need, 100) for need in (3, 17, 90, 96, 97, 99)] == [8, 24, 96, 96, 98, 99]
    assert [batch_end(need, 64) for need in (56, 57, 60, 61)] == [56, 60, 60, 62]


@pytest.mark.parametrize("turns", [20, 31, 40, 63])
def test_the_packet_never_swallows_every_turn_where_the_newest_fit_beside_it(turns: int) -> None:
    """The kit's case: rounded up to a whole batch, the packet took all 63 turns with most of the budget unused.
    At every budget from 500 to 4,000 tokens, where the newest turn fits beside the packet it is kept, and
    where the packet reaches into the newest batch, what the plan leaves unused is less than two of its turns."""
    b = build_session(turns, tools_per_turn=1, answer_words=30)
    packets = 0
    for horizon in range(500, 4_100, 250):
        p = b.view.plan(profile(horizon), NO_TERMS, prefix_tokens=0, tail_tokens=0)
        assert p.budget.history <= p.budget.budget
        if p.packet is None:
            continue
        packets += 1
        _, last = p.packet_range  # type: ignore[misc]
        left = p.budget.budget - p.budget.history
        newest = min(p.rows.full[turns - 1], p.rows.card[turns - 1])
        if newest <= p.budget.budget - p.packet.tokens:
            assert last < turns, (horizon, p.rows.codes)  # the newest turn fits beside the packet: it is kept
        if last > turns - 4 and p.turns[last - 1].fidelity == Fidelity.PACKET:  # a batch cut short at the end
            assert left < 2 * min(p.rows.full[last - 1], p.rows.card[last - 1]), (horizon, left, p.rows.codes)
    assert packets >= 5


def test_a_batch_cut_short_keeps_the_turns_that_fit_and_spends_its_room_on_the_summary() -> None:
    """583 tokens of history over 63 turns: rounded up, the packet took all 63 and left 438 tokens unused; cut
    short, it covers turns 1-59 and turns 60-63 stay (as cards or whole), and the packet's share holds a summary
    of the 59 (its room at least what the 63 would have had)."""
    b = build_session(63, tools_per_turn=1, answer_words=30)
    p = b.view.plan(profile(1_000), NO_TERMS, prefix_tokens=0, tail_tokens=0)
    assert p.packet is not None and p.packet_range == (1, 59) and p.packet.level in ("summary", "brief")
    assert all(t.fidelity in (Fidelity.FULL, Fidelity.CARD) for t in p.turns if t.ordinal > 59)
    assert p.budget.history <= p.budget.budget and p.budget.budget - p.budget.history < 100

    def room(last: int) -> int:
        items = covered_evidence(b.view.index, 1, last)
        got = packet_room(1, last, share=math.floor(p.budget.budget * PACKET_SHARE), budget=p.budget.budget,
                          tokens_per_char=0.25, card_tokens=10**6, item_chars=sum(len(item_line(c)) for c in items),
                          items=len(items))
        assert got is not None
        return got.summary_tokens

    assert room(59) >= room(63) and p.packet.summary_tokens > 0
