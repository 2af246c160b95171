"""The WorkingSetPlanner (spec §4): budget, value, fill order, packets, resets and rescue. Pure code."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from tests.fakes.sessions import SessionBuilder, Tool, body_for, build_session, profile
from vak_context.bm25 import Bm25Index
from vak_context.context.history.packets import PACKET_BATCH_TURNS
from vak_context.context.history.render import api_problems
from vak_context.context.planner.plan import Plan, PlannerState, plan, refers_back
from vak_context.context.planner.records import Fidelity
from vak_context.context.request.assemble import prefix_tokens, project, request_tokens
from vak_context.errors import InvalidInput
from vak_context.events.payloads import (
    Compaction,
    ResetWithHandoff,
)


def fidelities(p: Plan) -> str:
    marks = {Fidelity.FULL: "F", Fidelity.CARD: "c", Fidelity.PACKET: "p", Fidelity.BEHIND_RESET: "x",
             Fidelity.CURRENT: "*"}
    return "".join(marks[t.fidelity] for t in p.turns)


# ------------------------------------------------------------------ budget and values


def test_budget_is_horizon_less_prefix_tail_output_and_current_turn_reserve() -> None:
    b = build_session(3)
    prof = profile(20_000, out=700)
    p = b.view.plan(prof, "Next question, unrelated to anything.", prefix_tokens=1234, tail_tokens=56)
    reserve = p.budget.current_turn_reserve
    assert p.budget.budget == 20_000 - 1234 - 56 - 700 - reserve
    # the reserve is the EWMA (α 0.3) of the three closed turns' sizes, or the directive when larger
    sizes = [math.ceil(t.chars * 0.25) for t in b.view.index.turns]
    ewma = float(sizes[0])
    for s in sizes[1:]:
        ewma = 0.3 * s + 0.7 * ewma
    assert reserve == max(math.ceil(ewma), math.ceil(len(p.directive) * 0.25))
    assert p.state == PlannerState(pytest.approx(ewma), 3, 3)  # type: ignore[arg-type]
    assert fidelities(p) == "FFF" and p.packet is None


def test_state_goes_in_and_comes_back_out_each_turn_counted_once() -> None:
    b = build_session(4)
    prof = profile(50_000)
    first = b.view.plan(prof, "x", prefix_tokens=0, tail_tokens=0, state=PlannerState())
    again = b.view.plan(prof, "x", prefix_tokens=0, tail_tokens=0, state=first.state)
    assert again.state == first.state  # nothing new to fold in
    b.turn("One more turn with a much longer directive " + "word " * 300, answer="ok")
    later = b.view.plan(prof, "x", prefix_tokens=0, tail_tokens=0, state=first.state)
    assert later.state.samples == first.state.samples + 1 and later.state.observed_through == 5
    assert later.state.current_turn_reserve > first.state.current_turn_reserve
    with pytest.raises(InvalidInput, match="planner state"):
        PlannerState.from_json({"current_turn_reserve": "lots"})


def test_recency_relevance_and_anaphora() -> None:
    b = build_session(5)
    p = b.view.plan(profile(50_000), "What is the copper price now?", prefix_tokens=0, tail_tokens=0)
    by = {t.ordinal: t for t in p.turns}
    assert [round(by[o].recency, 3) for o in range(1, 6)] == [0.2, 0.25, 0.333, 0.5, 1.0]
    assert by[2].relevance == 1.0  # turn 2 is the copper search
    assert max(by[o].relevance for o in (1, 3, 4)) < 1.0
    assert by[2].value == 1.0 and all(t.anaphora == 0 for t in p.turns)
    back = b.view.plan(profile(50_000), "Do that again for the second one", prefix_tokens=0, tail_tokens=0)
    assert back.refers_back and [t.anaphora for t in back.turns] == [0, 0, 0, 0, 1.0]
    assert refers_back("same as before please") and not refers_back("Book a flight to Boston")


def test_bm25_scores_postings_only_and_reindexes() -> None:
    bm = Bm25Index()
    bm.add("a", "copper price trend copper")
    bm.add("b", "ledger group commit")
    s = bm.scores("copper trend")
    assert set(s) == {"a"} and s["a"] > 0
    bm.add("a", "nothing relevant")
    assert bm.scores("copper") == {}
    assert bm.total == sum(bm.lengths.values())


# ------------------------------------------------------------------ the fill


def _tight(b: SessionBuilder, extra: int, directive: str) -> Plan:
    """A plan whose budget holds every card plus ``extra`` tokens. Its state predicts no current turn,
    so the reserve is the directive itself (reuse ``plan.state`` to plan the same budget again)."""
    view = b.view
    cheap = sum(
        min(math.ceil(view.size(t).full_chars * 0.25), math.ceil(view.size(t).card_chars * 0.25))
        for t in view.index.planned_turns()
    )
    state = PlannerState(0.0, 1, len(view.index.turns))
    reserve = math.ceil(len(directive) * 0.25)
    p = view.plan(profile(cheap + extra + reserve + 256), directive, prefix_tokens=0, tail_tokens=0, state=state)
    assert p.budget.current_turn_reserve == reserve
    return p


def test_cards_cover_every_turn_and_full_goes_by_value_skipping_what_does_not_fit() -> None:
    b = build_session(10, tools_per_turn=2, answer_words=60)
    p = _tight(b, 700, "Tell me about the copper price trend again")
    assert p.packet is None
    full = [t for t in p.turns if t.fidelity == Fidelity.FULL]
    cards = [t for t in p.turns if t.fidelity == Fidelity.CARD]
    assert full and cards and len(full) + len(cards) == 10
    assert p.budget.history <= p.budget.budget
    ranked = sorted(p.turns, key=lambda t: (-t.value, -t.anaphora, -t.ordinal))
    assert ranked[0].fidelity == Fidelity.FULL  # the most valuable turn is Full
    left = p.budget.budget - p.budget.history
    for t in cards:  # raising happens in value order while it fits: every card left would not fit
        assert t.full_tokens - t.card_tokens > left


def test_a_turn_that_does_not_fit_at_full_is_skipped_for_a_cheaper_one_further_down() -> None:
    b = build_session(4)
    big = "\n".join(f"{k:5d} a long line of the log that the command printed, line {k}" for k in range(300))
    b.turn("Run the slow job and show me the log.", [("bash", {"command": "job"}, big, False)], "It ran.")
    p = _tight(b, 150, "unrelated new question")
    by = {t.ordinal: t for t in p.turns}
    assert by[5].value == 1.0 and by[5].fidelity == Fidelity.CARD  # the newest turn is too big to raise
    assert by[5].full_tokens - by[5].card_tokens > 150
    assert by[4].fidelity == Fidelity.FULL and by[4].value == 0.5  # the next one down is raised instead
    assert by[4].full_tokens > by[4].card_tokens  # raised, not merely cheaper whole


def test_everything_fits_at_full_on_a_large_profile() -> None:
    b = build_session(12)
    p = b.view.plan(profile(1_000_000), "anything", prefix_tokens=2000, tail_tokens=100)
    assert fidelities(p) == "F" * 12 and p.packet is None and p.budget.cards == 0


def test_overflow_collapses_into_one_packet_in_batches_of_eight_from_the_first_turn() -> None:
    b = build_session(20, tools_per_turn=2, answer_words=60)
    p = _tight(b, -800, "What is in the quarterly report?")
    assert p.packet is not None
    first, last = p.packet_range  # type: ignore[misc]
    # a whole batch, or one cut short where rounding up would take every turn (fill.batch_end)
    assert first == 1 and (last % PACKET_BATCH_TURNS == 0 or last > len(p.turns) - 1 - PACKET_BATCH_TURNS)
    for t in p.turns:
        if t.ordinal <= last:
            assert t.fidelity == Fidelity.PACKET or (t.fidelity == Fidelity.FULL and t.retrieved)
        else:
            assert t.fidelity in (Fidelity.FULL, Fidelity.CARD)
    assert p.budget.history <= p.budget.budget


def test_the_packet_boundary_holds_steady_as_turns_arrive() -> None:
    b = build_session(24, tools_per_turn=1, answer_words=40)
    prof = profile(3_000)
    ranges = []
    for current in range(12, 25):
        p = b.view.plan(prof, "", prefix_tokens=0, tail_tokens=0, current=current)
        assert not p.rescue
        ranges.append(p.packet_range[1] if p.packet_range else 0)
    assert ranges == sorted(ranges)  # the boundary never moves back
    assert all(r % PACKET_BATCH_TURNS == 0 for r in ranges)
    assert len(set(ranges)) < len(ranges) / 2  # it moves in batches, not every turn


def test_replaying_as_of_a_turn_ignores_the_turns_after_it() -> None:
    b = build_session(6)
    p = b.view.plan(profile(50_000), "", prefix_tokens=0, tail_tokens=0, current=4)
    assert [t.ordinal for t in p.turns] == [1, 2, 3, 4] and p.turns[-1].fidelity == Fidelity.CURRENT
    assert p.directive == b.view.index.turn(4).directive.text
    with pytest.raises(InvalidInput, match="differs"):
        b.view.plan(profile(50_000), "not the turn's text", prefix_tokens=0, tail_tokens=0, current=4)
    with pytest.raises(InvalidInput, match="no turn 9"):
        b.view.plan(profile(50_000), "", prefix_tokens=0, tail_tokens=0, current=9)


# ------------------------------------------------------------------ small models, resets and rescue


def test_13k_horizon_with_12k_prefix_keeps_the_previous_turn_beside_the_pointer_where_it_fits() -> None:
    """185 tokens of history: the pointer over turns 1-30 (67) and turn 31 whole (82). The packet's batch
    once swallowed turn 31 too (rounded up to all 31 turns), leaving 118 tokens of the budget unused."""
    b = build_session(31, tools_per_turn=1, answer_words=30)
    prof = profile(13_000, out=512)
    p = b.view.plan(prof, "Thanks. One more thing about the ledger module.", prefix_tokens=12_000, tail_tokens=120)
    assert not p.rescue, p.rescue_reason
    assert p.packet is not None and p.packet.level == "pointer" and p.packet_range == (1, 30)
    assert p.fidelity(31) in (Fidelity.FULL, Fidelity.CARD) and p.budget.history <= p.budget.budget


def test_13k_horizon_with_a_larger_prefix_keeps_only_the_current_turn_and_says_what_is_missing() -> None:
    """Spec §10: where nothing beside the pointer fits, the working set is the current turn only."""
    b = build_session(31, tools_per_turn=1, answer_words=30)
    prof = profile(13_000, out=512)
    directive = "Thanks. One more thing about the ledger module."
    p = b.view.plan(prof, directive, prefix_tokens=12_080, tail_tokens=120)
    assert not p.rescue, p.rescue_reason
    assert all(t.fidelity == Fidelity.PACKET for t in p.turns)  # the working set is the current turn only
    assert p.packet is not None and p.packet.level == "pointer" and p.packet_range == (1, 31)
    request = project(b.view.index, p, model="m", infos=b.view.infos, tail="<turn_context/>")
    summary = request.messages[0].content[0].text  # type: ignore[union-attr]
    assert summary.startswith('<context_summary turns="1-31">')
    assert "Turns 1–31" in summary and 'recall({"turn": N})' in summary and "31 tool results" in summary
    assert request.messages[-1].text.endswith(directive) and len(request.messages) == 1
    assert request_tokens(prof, request) + 12_080 + 512 <= 13_000


def test_no_usable_horizon_takes_the_reset_with_handoff_rescue() -> None:
    b = build_session(5)
    dead = replace(profile(0, out=256, window=8192))
    p = b.view.plan(dead, "hello", prefix_tokens=100, tail_tokens=0)
    assert p.rescue and "no usable horizon" in p.rescue_reason
    assert fidelities(p) == "xxxxx" and p.packet is None and p.budget.history == 0
    squeezed = b.view.plan(profile(600, out=256), "hello", prefix_tokens=300, tail_tokens=0)
    assert squeezed.rescue and "cannot even point" in squeezed.rescue_reason


def test_turns_behind_a_reset_are_never_planned_nor_covered() -> None:
    b = build_session(12, tools_per_turn=1)
    b.add(ResetWithHandoff(handoff="Context reset.", last_turn_id=b.view.index.turns[-1].id, reason="test"))
    for i in range(10):
        b.turn(f"After the reset, question {i} about the copper price trend", [search_call(i)], "Done." * 20)
    p = _tight(b, -300, "copper price")
    assert fidelities(p)[:12] == "x" * 12
    assert p.packet is not None and p.packet.first_ordinal == 13
    assert all(t.tokens == 0 for t in p.turns[:12])
    request = project(b.view.index, p, model="m", infos=b.view.infos) if not p.packet.needs_summary else None
    if request is not None:
        text = json.dumps(request.model_dump(mode="json"))
        assert "(turn 1)" not in text and "Turns 1–" not in text


def search_call(i: int) -> Tool:
    return ("web_search", {"query": f"copper {i}"}, body_for("web_search", i), False)


# ------------------------------------------------------------------ packets: stored, reused, grown


def _store_summary(b: SessionBuilder, first: int, last: int, words: int, model: str = "local:test") -> str:
    index = b.view.index
    from vak_context.context.history.packets import compaction_payload

    return b.add(compaction_payload(index, first, last, " ".join(["summary"] * words), model=model))


def test_a_stored_packet_is_rendered_only_for_exactly_its_range() -> None:
    b = build_session(20, tools_per_turn=1, answer_words=50)
    p = _tight(b, -500, "next")
    assert p.packet is not None and p.packet.needs_summary
    first, last = p.packet_range  # type: ignore[misc]
    other = _store_summary(b, first, last - 1 if last > first else last, 10)
    again = b.view.plan(profile(p.budget.horizon), "next", prefix_tokens=0, tail_tokens=0, state=p.state)
    assert again.packet is not None and again.packet.stored_id is None and again.packet.needs_summary
    assert again.packet.seed_id == other  # growing starts from the longest stored packet over turn 1
    exact = _store_summary(b, first, last, 12)
    reused = b.view.plan(profile(p.budget.horizon), "next", prefix_tokens=0, tail_tokens=0, state=p.state)
    assert reused.packet is not None and reused.packet.stored_id == exact and not reused.packet.needs_summary
    request = project(b.view.index, reused, model="m", infos=b.view.infos)
    text = request.messages[0].content[0].text  # type: ignore[union-attr]
    assert text.startswith(f'<context_summary turns="{first}-{last}">') and "summary summary" in text
    assert api_problems(request.messages) == []
    with pytest.raises(InvalidInput, match="not written yet"):
        project(b.view.index, again, model="m", infos=b.view.infos)


def test_a_stored_packet_too_large_for_the_room_falls_back_to_the_list_without_a_new_call() -> None:
    b = build_session(20, tools_per_turn=1, answer_words=50)
    p = _tight(b, -500, "next")
    assert p.packet is not None
    _store_summary(b, *p.packet_range, words=5000)  # type: ignore[misc]
    again = b.view.plan(profile(p.budget.horizon), "next", prefix_tokens=0, tail_tokens=0, state=p.state)
    assert again.packet is not None and again.packet.level == "list" and not again.packet.needs_summary


def test_an_importers_compaction_over_other_turns_is_not_rendered() -> None:
    b = build_session(6)
    b.add(Compaction(first_turn_id=b.view.index.turns[0].id, last_turn_id=b.view.index.turns[3].id,
                     summary="imported summary", model="anthropic:claude"))
    p = b.view.plan(profile(100_000), "x", prefix_tokens=0, tail_tokens=0)
    assert p.packet is None and fidelities(p) == "FFFFFF"
    request = project(b.view.index, p, model="m", infos=b.view.infos)
    assert "imported summary" not in json.dumps(request.model_dump(mode="json"))


# ------------------------------------------------------------------ digests and inputs


def test_plan_digest_is_deterministic_and_covers_its_inputs() -> None:
    b = build_session(8)
    prof = profile(3_000)
    one = b.view.plan(prof, "copper", prefix_tokens=100, tail_tokens=10)
    two = b.view.plan(prof, "copper", prefix_tokens=100, tail_tokens=10)
    assert one.digest == two.digest and one.inputs_digest == two.inputs_digest
    assert len(one.digest) == 64
    assert b.view.plan(prof, "copper", prefix_tokens=101, tail_tokens=10).inputs_digest != one.inputs_digest
    assert b.view.plan(profile(3_001), "copper", prefix_tokens=100, tail_tokens=10).inputs_digest != one.inputs_digest
    assert json.loads(json.dumps(one.to_json()))["packet_range"] == (list(one.packet_range) if one.packet_range else None)
    assert one.inputs["head"] == b.view.index.head


def test_bad_inputs_are_typed_errors() -> None:
    b = build_session(2)
    with pytest.raises(InvalidInput, match="prefix_tokens"):
        plan(b.view.index, profile(1000), "x", prefix_tokens=-1, tail_tokens=0)
    with pytest.raises(InvalidInput, match="tail_tokens"):
        plan(b.view.index, profile(1000), "x", prefix_tokens=0, tail_tokens=1.5)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="tokens_per_char"):
        plan(b.view.index, profile(1000, tpc=0.0), "x", prefix_tokens=0, tail_tokens=0)


def test_sizes_without_evidence_bodies_fall_back_to_the_cards_own_measurement() -> None:
    b = build_session(4)
    exact = b.view.plan(profile(100_000), "x", prefix_tokens=0, tail_tokens=0)
    estimated = plan(b.view.index, profile(100_000), "x", prefix_tokens=0, tail_tokens=0)
    for e, x in zip(estimated.turns, exact.turns, strict=True):
        assert e.card_tokens == x.card_tokens
        assert e.full_tokens >= x.full_tokens - 2  # the card's tokens_full, converted back to characters


def test_the_projection_is_api_valid_and_no_larger_than_planned() -> None:
    b = build_session(12, tools_per_turn=2, answer_words=40)
    system = "You are a helpful agent. " * 40
    for horizon in (4_000, 6_000, 9_000, 40_000):
        prof = profile(horizon)
        pre = prefix_tokens(prof, system)
        p = b.view.plan(prof, "copper again", prefix_tokens=pre, tail_tokens=8)
        if p.packet is not None and p.packet.needs_summary:
            _store_summary(b, *p.packet_range, words=max(1, p.packet.summary_tokens // 2))  # type: ignore[misc]
            p = b.view.plan(prof, "copper again", prefix_tokens=pre, tail_tokens=8)
        request = project(b.view.index, p, model="m", infos=b.view.infos, system=system, tail="<t>now</t>")
        assert api_problems(request.messages) == []
        assert request_tokens(prof, request) <= pre + 8 + p.budget.history + p.budget.current
        assert request_tokens(prof, request) + prof.output_reserve <= horizon


def test_typical_shape_of_a_31_turn_session_on_a_small_model() -> None:
    """Spec §10: about 2 turns Full, the rest as cards of about 80 tokens, no packet, under 3k of history."""
    subjects = ["copper prices", "the ledger module", "flaky tests", "airline booking", "vector databases",
                "Rust vs Go", "the quarterly report", "a failing deploy"]
    b = SessionBuilder()
    for i in range(30):
        subject = subjects[i % len(subjects)]
        results = "\n".join(
            f"{k}. {subject.title()}, analysis part {k} of {i} https://example.org/{i}/{k}\n"
            f"   A snippet about {subject} that runs for a little while, as snippets do."
            for k in range(1, 13)
        )  # longer than VERBATIM_CHARS, as real search results are: a closed turn carries its digest
        b.turn(f"Look up {subject} (question {i + 1}).", [("web_search", {"query": subject}, results, False)],
               f"I found twelve sources on {subject}; the main point is that it changed this quarter.")
    small = profile(5_000, out=512)  # a small model's measured horizon, with a 1.5k-token prefix
    p = b.view.plan(small, "Tell me again what the copper prices were", prefix_tokens=1_500, tail_tokens=60)
    full = [t.ordinal for t in p.turns if t.fidelity == Fidelity.FULL]
    cards = [t for t in p.turns if t.fidelity == Fidelity.CARD]
    assert p.packet is None and len(p.turns) == 30  # 30 closed turns and the new one: 31
    assert 30 in full and any(b.view.index.turn(o).directive.text.startswith("Look up copper") for o in full)
    assert len(full) <= 3 and len(cards) >= 27
    assert sum(t.tokens for t in cards) / len(cards) < 100
    assert p.budget.history < 3_000
