"""The step policy (``vak_context.context.planner.policy``): freeze, re-plan on outgrowing and on an
undercount, the profile an overflow implies, its state through ``plan`` entries, and the one budget
(``request_budget``) on random profiles. Pure code over real plans of real sessions."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tests.fakes.golden_plans as golden
from tests.fakes.sessions import SessionBuilder
from vak_context.context.capacity.profile import CapacityProfile, Ewma, Horizon, ProfileKey, request_budget
from vak_context.context.planner.delta import PlanRows
from vak_context.context.planner.plan import Plan
from vak_context.context.planner.policy import (
    RETRIES,
    Asked,
    FrozenPlan,
    GiveUp,
    Planned,
    Project,
    Projected,
    Rejected,
    Replan,
    Retry,
    Send,
    StepState,
    after_overflow,
    decide,
    plan_entry,
    plan_of_entry,
    rows_reader,
    state_of_entry,
    turn_of,
)
from vak_context.context.planner.records import Rows
from vak_context.context.request.assemble import project
from vak_context.errors import ContextOverflow, InvalidInput
from vak_context.events.envelope import Mapper
from vak_context.events.payloads import AssistantStep, Directive, PlanRecord, TextBlock

PROFILE = CapacityProfile(ProfileKey("local", "m"), 8_192, Horizon(6_000, 0.9, 0.0), Ewma(0.25, 3), 512)
BUDGET = 6_000  # min(6,000, 8,192 − 512)


def _session(turns: int = 4, steps: int = 2) -> SessionBuilder:
    """Closed turns with a tool call each, then an open turn with ``steps`` steps."""
    b = SessionBuilder("s")
    for i in range(turns):
        b.turn(f"Read module {i} and say what it does.", [("read_file", {"path": f"m{i}.py"},
                                                          "\n".join(f"{k} code of m{i}" for k in range(20)), False)])
    b.add(Directive(text="Now compare them."))
    for k in range(steps):
        b.add(AssistantStep(blocks=(TextBlock(text=f"step {k}: thinking it over " * 4),)))
    return b


def _plan(b: SessionBuilder, profile: CapacityProfile = PROFILE) -> Plan:
    return b.view.plan(profile, "", prefix_tokens=100, tail_tokens=10, current=len(b.view.index.turns))


def _through_ledger(record: PlanRecord) -> PlanRecord:
    """The record as a stored entry's payload reads back (canonical JSON bytes and the upcasting Mapper)."""
    mapper = Mapper()
    back = mapper.payload_of(mapper.entry(record, session="s", seq=0, parent=None, time_us=0))
    assert isinstance(back, PlanRecord)
    return back


# ------------------------------------------------------------------ freeze and re-plan


def test_the_first_step_plans_and_every_later_step_of_the_turn_keeps_that_plan() -> None:
    b = _session()
    turn = b.view.index.turns[-1].id
    decision, state = decide(Asked(turn, PROFILE), StepState())
    assert decision == Replan(PROFILE, "first step")
    p = _plan(b)
    decision, state = decide(Planned(p, PROFILE, 900, 3_600, counted=False), state)
    assert decision == Send(p, True, 900, BUDGET) and state.frozen == FrozenPlan(turn, p)
    for tokens in (1_000, BUDGET):  # the turn grows; its request still fits: the same plan, not recorded again
        decision, state = decide(Asked(turn, PROFILE), state)
        assert decision == Project(p)
        decision, state = decide(Projected(PROFILE, tokens, 4 * tokens, counted=True), state)
        assert decision == Send(p, False, tokens, BUDGET) and state.frozen == FrozenPlan(turn, p)


def test_a_turn_that_outgrows_its_budget_is_planned_again_and_that_plan_is_frozen() -> None:
    b = _session()
    turn = b.view.index.turns[-1].id
    first = _plan(b)
    _, state = decide(Planned(first, PROFILE, 900, 3_600, counted=False), StepState())
    decision, state = decide(Asked(turn, PROFILE), state)
    decision, state = decide(Projected(PROFILE, BUDGET + 1, 24_004, counted=False), state)
    assert decision == Replan(PROFILE, "outgrew") and state.frozen == FrozenPlan(turn, first)
    b.add(AssistantStep(blocks=(TextBlock(text="a much longer step " * 50),)))
    second = _plan(b)
    decision, state = decide(Planned(second, PROFILE, 2_000, 8_000, counted=False), state)
    assert decision == Send(second, True, 2_000, BUDGET) and state.frozen == FrozenPlan(turn, second)


def test_a_new_turn_plans_afresh_and_a_changed_budget_is_checked_against_the_frozen_plan() -> None:
    b = _session()
    _, state = decide(Planned(_plan(b), PROFILE, 900, 3_600, counted=False), StepState())
    b.add(Directive(text="Another question."))
    decision, _ = decide(Asked(b.view.index.turns[-1].id, PROFILE), state)
    assert decision == Replan(PROFILE, "first step")
    # A verified window found mid-turn: the frozen plan's request no longer fits what the profile allows.
    narrow = replace(PROFILE, verified_window=1_400)  # min(6,000, 1,400 − 512) = 888 tokens
    _, kept = decide(Asked(turn_of(state.frozen.plan), narrow), state)  # type: ignore[union-attr]
    decision, _ = decide(Projected(narrow, 900, 3_600, counted=False), kept)
    assert decision == Replan(narrow, "outgrew")


def test_an_undercount_plans_once_more_at_the_measured_rate_and_then_sends() -> None:
    b = _session()
    turn = b.view.index.turns[-1].id
    _, state = decide(Asked(turn, PROFILE), StepState())
    p = _plan(b)
    decision, state = decide(Planned(p, PROFILE, BUDGET + 600, 16_000, counted=True), state)
    assert isinstance(decision, Replan) and decision.reason == "undercount"
    assert decision.profile.tokens_per_char == Ewma((BUDGET + 600) / 16_000, 3)  # the server's rate
    assert decision.profile.instruction_horizon == PROFILE.instruction_horizon and state.undercounted
    again = _plan(b, decision.profile)
    decision, state = decide(Planned(again, PROFILE, BUDGET + 10, 16_000, counted=True), state)
    assert decision == Send(again, True, BUDGET + 10, BUDGET)  # planned twice at most: the provider decides
    # Without a counter an estimate over the budget is the planner's own figure: nothing to correct.
    _, fresh = decide(Asked(turn, PROFILE), state)
    assert not fresh.undercounted
    decision, _ = decide(Planned(p, PROFILE, BUDGET + 1, 24_004, counted=False), fresh)
    assert isinstance(decision, Send)


def test_a_frozen_size_without_a_frozen_plan_and_a_foreign_input_are_errors() -> None:
    with pytest.raises(InvalidInput, match="start with Asked"):
        decide(Projected(PROFILE, 10, 40, counted=False), StepState())
    with pytest.raises(InvalidInput, match="takes Asked"):
        decide("send it", StepState())  # type: ignore[arg-type]


sizes = st.tuples(st.integers(0, 3 * BUDGET), st.integers(1, 40_000), st.booleans())


@settings(max_examples=200, deadline=None)
@given(first=st.booleans(), frozen_size=sizes, plan_sizes=st.lists(sizes, min_size=3, max_size=3))
def test_whatever_the_sizes_a_request_is_planned_at_most_twice_then_sent(
    first: bool, frozen_size: tuple[int, int, bool], plan_sizes: list[tuple[int, int, bool]]
) -> None:
    """The driver the assembler runs, over random sizes: it always ends in Send, after at most two plans,
    and the plan sent is the one the state then holds frozen."""
    p = _PLAN
    state = StepState() if first else StepState(FrozenPlan(turn_of(p), p))
    decision, state = decide(Asked(turn_of(p), PROFILE), state)
    plans = 0
    while not isinstance(decision, Send):
        if isinstance(decision, Project):
            decision, state = decide(Projected(PROFILE, *frozen_size), state)
        else:
            assert isinstance(decision, Replan)
            decision, state = decide(Planned(p, decision.profile, *plan_sizes[plans]), state)
            plans += 1
    assert plans <= 2 and state.frozen == FrozenPlan(turn_of(p), decision.plan)
    assert decision.record == (plans > 0) and decision.budget == BUDGET


_PLAN = _plan(_session())


# ------------------------------------------------------------------ over-length


def test_a_rejection_is_retried_once_against_the_profile_it_implies() -> None:
    error = ContextOverflow("too long", prompt_tokens=9_000, limit_tokens=2_048)
    decision, state = decide(Rejected(PROFILE, error, 30_000, 7.0), StepState())
    implied = after_overflow(PROFILE, error, request_chars_sent=30_000, now=7.0)
    assert decision == Retry(implied) and state.rejections == 1
    assert implied.verified_window == 2_048 and implied.tokens_per_char == Ewma(0.3 * 0.3 + 0.7 * 0.25, 4)
    assert implied.provenance.updated_at == 7.0 and request_budget(implied) == 2_048 - 512
    decision, state = decide(Rejected(implied, ContextOverflow("again", prompt_tokens=1_900, limit_tokens=1_800),
                                      8_000, 8.0), state)
    assert isinstance(decision, GiveUp) and state.rejections == RETRIES + 1
    assert decision.profile.verified_window == 1_800  # what the next turn plans against
    _, fresh = decide(Asked("t", PROFILE), state)  # the next step starts with no rejection counted
    assert fresh.rejections == 0


# ------------------------------------------------------------------ the state through plan entries


def test_the_frozen_plan_comes_back_from_its_plan_entry_with_its_digest_and_its_request() -> None:
    b = _session()
    p = _plan(b)
    record = _through_ledger(plan_entry(p, b.view.index.head))
    assert record.history_start == p.rows.history_start
    state = state_of_entry(record)
    assert state == StepState(FrozenPlan(b.view.index.turns[-1].id, p))  # equal records, equal rows
    back = state.frozen.plan  # type: ignore[union-attr]
    assert back.digest == p.digest and back.inputs == p.inputs
    b.add(AssistantStep(blocks=(TextBlock(text="one more step"),)))  # a later step projects it alike
    kw: dict[str, Any] = {"model": "m", "infos": b.view.infos, "system": "sys", "tail": "<t/>"}
    assert project(b.view.index, back, **kw) == project(b.view.index, p, **kw)


def _v1(record: PlanRecord, p: Plan) -> PlanRecord:
    """The entry as format 1 wrote it: the rows as the plan's JSON turns, no delta fields."""
    return record.model_copy(update={"plan": p.to_json(), "rows": None, "base": None})


def test_an_entry_written_before_history_start_was_recorded_still_decodes() -> None:
    """Entries from before the field validate (it defaults to None); their plan decodes by inferring it
    (the leading run of turns behind a reset) and is checked against the recorded digest."""
    b = _session()
    p = _plan(b)
    raw = _v1(plan_entry(p, b.view.index.head), p).model_dump(mode="json")
    del raw["rows"], raw["base"]
    del raw["history_start"]
    old = _through_ledger(PlanRecord.model_validate(raw))
    assert old.history_start is None
    assert plan_of_entry(old) == p
    # A digest that does not match what the entry decodes to: no state, the next step plans afresh.
    assert state_of_entry(old.model_copy(update={"digest": "0" * 64})) == StepState()
    # A plan for a new directive (no current turn) freezes nothing.
    new = b.view.plan(PROFILE, "A new question", prefix_tokens=100, tail_tokens=10)
    assert state_of_entry(_through_ledger(plan_entry(new, b.view.index.head))) == StepState()


class _RoundTrip(golden._Walk):
    """The golden corpus's walk, every plan put through its ledger entry and back as it is made."""

    checked = 0
    legacy = 0
    entries: ClassVar[dict[str, PlanRecord]] = {}

    def plan_all(self, directive: str, current: int | None) -> dict[str, Plan]:
        plans = super().plan_all(directive, current)
        self.bases: dict[str, tuple[str, Rows]] = getattr(self, "bases", {})
        for key, p in plans.items():
            record = _through_ledger(plan_entry(p, self.view.index.head))
            back = plan_of_entry(record)
            assert back is not None and back.digest == p.digest, (self.name, p.model)
            if not p.rescue:  # a rescue's rows keep the relevance its JSON drops (no request reads it)
                assert back == p
            if not (p.packet is not None and p.packet.needs_summary):  # that one is never projected
                kw: dict[str, Any] = {"model": "m", "infos": self.view.infos, "system": "s", "tail": "<t/>"}
                assert project(self.view.index, back, **kw) == project(self.view.index, p, **kw)
            # As a delta against the same profile's plan before it (ledger format 2), read back by a reader
            # holding none of them, and as a format-1 entry (its rows as JSON turns).
            entry_id = f"{_RoundTrip.checked:064x}"
            delta = _RoundTrip.entries[entry_id] = _through_ledger(
                plan_entry(p, self.view.index.head, self.bases.get(key)))
            rows = PlanRows().rows_of(entry_id, rows_reader(_RoundTrip.entries.get))
            assert rows is not None and plan_of_entry(delta, rows) == back
            self.bases[key] = (entry_id, p.rows)
            legacy = plan_of_entry(_v1(record, p).model_copy(update={"history_start": None}))
            assert legacy is None or legacy.digest == p.digest
            if not p.rescue:  # only a rescue behind another model's reset cannot say where history starts
                assert legacy is not None
            _RoundTrip.checked += 1
            _RoundTrip.legacy += legacy is not None
        return plans


def test_every_plan_of_the_golden_bench_and_long_turn_round_trips_through_its_entry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Packets at every level, stored and mid-turn ones, resets and rescues, current-turn compaction."""
    monkeypatch.setattr(golden, "_Walk", _RoundTrip)
    seen = golden.coverage([*golden._bench_session(20).plans, *golden._long_turn(30).plans])
    assert _RoundTrip.checked > 300 and _RoundTrip.legacy > 0
    assert [k for k in ("packet pointer", "packet list", "packet summary", "packet stored", "packet mid-turn",
                        "rescue", "reset", "current step packet ids") if not seen[k]] == []


# ------------------------------------------------------------------ the one budget


windows = st.integers(0, 300_000)
budget_profiles = st.builds(
    lambda h, declared, verified, out: CapacityProfile(ProfileKey("p", "m"), declared, Horizon(h, 0.9, 0.0),
                                                       Ewma(0.25, 3), out, verified_window=verified),
    st.integers(0, 250_000), windows, st.none() | windows | st.just(0), st.integers(0, 40_000),
)


@settings(max_examples=500, deadline=None)
@given(profile=budget_profiles)
def test_the_budget_holds_a_prompt_to_the_horizon_and_with_the_reserve_to_the_window(profile: CapacityProfile) -> None:
    budget = request_budget(profile)
    window = profile.verified_window if profile.verified_window is not None else profile.declared_window
    assert 0 <= budget <= profile.instruction_horizon.tokens
    assert budget == 0 or budget + profile.output_reserve <= window
    # the largest such prompt: either the horizon or the window with the reserve is what stops it
    assert budget in (max(0, profile.instruction_horizon.tokens), max(0, window - profile.output_reserve))
    assert profile.usable_window == budget
    assert request_budget(profile, rescue=True) == max(0, window - profile.output_reserve) >= budget
    if profile.verified_window == 0:  # a measured 0 is a measurement: nothing fits, whatever was declared
        assert budget == 0


@settings(max_examples=60, deadline=None)
@given(profile=budget_profiles.filter(lambda p: request_budget(p) > 2_000))
def test_the_planner_and_the_policy_use_the_same_budget(profile: CapacityProfile) -> None:
    """The plan's room is ``request_budget`` less the prefix and tail, and the policy sends what fits it."""
    p = _plan(_SMALL, profile)
    assert not p.rescue
    assert p.budget.horizon - profile.output_reserve == request_budget(profile)
    assert p.budget.budget + p.budget.current_turn_reserve == request_budget(profile) - 100 - 10
    decision, _ = decide(Projected(profile, request_budget(profile), 1, counted=False), StepState(FrozenPlan("t", p)))
    assert isinstance(decision, Send) and decision.budget == request_budget(profile)


_SMALL = _session(turns=2, steps=1)
