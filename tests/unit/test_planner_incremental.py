"""A kept ``SessionView`` plans every step exactly as a view built from scratch over the same entries.

The kept view is what a PlannerActor holds: its size table lends the plan its columns, its BM25 index
scores in place, its caches carry from one plan to the next (``docs/PLANNER.md``, Cost). Over a seeded
random session of a few hundred turns, planned at several budgets after each turn's steps (the open turn
current, its row measured again) and for the next directive, every few steps the same plans are made by
a view built from the entries alone: equal digests, rows, packets and budgets. Plans made earlier keep
their rows while the table grows and changes under them (copy on write). A placement (a turn's close plans
the next request without its record, nor the Full promotion) gives the plan's packet, rescue and current turn.
"""

from __future__ import annotations

import random

from tests.fakes.sessions import WORDS, SessionBuilder, profile
from vak_context.context.history.packets import compaction_payload
from vak_context.context.history.turncard import build_card
from vak_context.context.planner.plan import Fidelity, Plan
from vak_context.context.planner.view import SessionView

PROFILES = [profile(1_500), profile(4_000), profile(12_000, out=1_024), profile(60_000, out=2_048)]
TURNS, CHECK_EVERY = 200, 9
PREFIX, TAIL = 180, 24
TOOLS = ("web_search", "read_file", "get_record")


def _same(a: Plan, b: Plan) -> None:
    assert (a.digest, a.inputs_digest) == (b.digest, b.inputs_digest)
    assert a.rows == b.rows and a.fidelities == b.fidelities
    assert (a.packet, a.budget, a.current_turn, a.state) == (b.packet, b.budget, b.current_turn, b.state)


def _placed(p: Plan) -> tuple[object, ...]:
    """What ``SessionView.placement`` reads of a plan: its packet, whether a rescue, the current turn's tokens."""
    return p.packet, p.rescue, p.budget.current


def _snapshot(p: Plan) -> tuple[object, ...]:
    r = p.rows
    return tuple(r.ids), r.codes, tuple(r.full), tuple(r.card), dict(r.relevance), r.retrieved


def test_a_kept_view_plans_every_step_as_a_view_built_from_scratch() -> None:
    rng = random.Random(37)
    b = SessionBuilder()
    kept: list[tuple[Plan, tuple[object, ...]]] = []
    checked = 0
    for i in range(TURNS):
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 7)))
        tools = [(rng.choice(TOOLS), {"q": words, "k": k}, f"{words} result {i}.{k}\n" * rng.randint(1, 30), False)
                 for k in range(rng.choice((0, 1, 1, 2, 3)))]
        b.turn(f"Turn {i}: {words}?", tools, f"Answer {i} about {words}.", close=False)
        current = len(b.view.index.turns)
        query = " ".join(rng.choice(WORDS) for _ in range(3)) + (" again" if rng.random() < 0.2 else "")
        mid = [b.view.plan(prof, "", prefix_tokens=PREFIX, tail_tokens=TAIL, current=current) for prof in PROFILES]
        turn = b.view.index.current
        assert turn is not None
        open_until = len(b.entries)  # the entries the mid-turn plans were made over
        b.add(build_card(b.view.index, turn, b.view.turn_infos(turn)))
        ahead = [b.view.plan(prof, query, prefix_tokens=PREFIX, tail_tokens=TAIL) for prof in PROFILES]
        for prof, p in zip(PROFILES, ahead, strict=True):  # a turn's close places the next plan without its record
            assert b.view.placement(prof, query, prefix_tokens=PREFIX, tail_tokens=TAIL) == _placed(p)
            assert p.shown() == [t for t in p.turns if t.fidelity in (Fidelity.FULL, Fidelity.CARD)]
        if i % 7 == 0:  # and as a later step, grown as far as recent turns grew, places it
            grown = [b.view.plan(prof, query, prefix_tokens=PREFIX, tail_tokens=TAIL, grown=400 + 40 * (i % 5))
                     for prof in PROFILES]
            assert [b.view.placement(prof, query, prefix_tokens=PREFIX, tail_tokens=TAIL, grown=400 + 40 * (i % 5))
                    for prof in PROFILES] == [_placed(p) for p in grown]
        if i % 25 == 0:
            kept += [(p, _snapshot(p)) for p in (*mid, *ahead)]
        summary = next((p for p in ahead if p.packet is not None and p.packet.needs_summary), None)
        if summary is not None and summary.packet is not None and rng.random() < 0.5:  # as a summariser leaves it
            b.add(compaction_payload(b.view.index, summary.packet.first_ordinal, summary.packet.last_ordinal,
                                     f"summary of {words}", model=summary.model))
            ahead = [b.view.plan(prof, query, prefix_tokens=PREFIX, tail_tokens=TAIL) for prof in PROFILES]
        if i % CHECK_EVERY == CHECK_EVERY - 1 or i == TURNS - 1:
            fresh = SessionView.build(b.entries)
            for prof, p in zip(PROFILES, ahead, strict=True):
                _same(p, fresh.plan(prof, query, prefix_tokens=PREFIX, tail_tokens=TAIL))
            open_turn = SessionView.build(b.entries[:open_until])
            for prof, p in zip(PROFILES, mid, strict=True):
                _same(p, open_turn.plan(prof, "", prefix_tokens=PREFIX, tail_tokens=TAIL, current=current))
            checked += 1
    assert checked == TURNS // CHECK_EVERY + 1
    for p, snapshot in kept:  # the rows a plan was made with, whatever the table did since
        assert _snapshot(p) == snapshot
    assert any(p.packet is not None for p, _ in kept) and any(p.packet is None for p, _ in kept)
