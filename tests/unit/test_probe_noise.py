"""The sampling policy of bisection rungs against noisy answers (issue 9, item 14).

The measurement (0/10/20% noise, 20 runs each, four policies) is ``bench/probe_noise.py``; its
figures are in docs/CAPACITY.md "Noise". Here: the chosen default reaches the stated rate on seeded
runs, and the second look repairs a bracket that a flipped verdict put in the wrong place.
"""

from __future__ import annotations

import random

from bench.probe_noise import one_run, settings_for
from tests.fakes.probe import outcome
from vak_context.context.capacity.ladder import DEFAULT_CAP, DEFAULT_LEAD, LadderSearch, plan_rungs

STEP = 64


async def test_the_default_policy_lands_within_one_step_in_16_of_20_seeded_runs_at_20_percent_noise() -> None:
    """The bench's 20%-noise cell for the default policy (seeds 0-19, thresholds drawn from
    2,000-28,000, skewed billing): the horizon is within one step below T in at least 16 of 20 runs
    (the stated rate, 80%; the bench measured 17). Majority of three stopping when two agree
    managed 8 of 20 on the same runs."""
    assert (DEFAULT_CAP, DEFAULT_LEAD) == (7, 3)
    within = []
    for run in range(20):
        threshold = random.Random(f"noise-0.2-{run}").randint(2000, 28_000)
        ok, _requests, _gap = await one_run(threshold, 0.2, run, settings_for(DEFAULT_CAP, DEFAULT_LEAD, True))
        within.append(ok)
    assert sum(within) >= 16, within


def test_a_second_look_that_flips_an_end_reopens_the_bracket() -> None:
    """A flipped fail below the threshold (T = 10,000) pins the bracket there; the second look at that
    end passes, the pooled verdict becomes a pass, the bracket reopens and the search ends within one
    step below T. Without the second look it would stop at the flipped rung."""
    def run(second_look: bool) -> LadderSearch:
        search = LadderSearch(plan_rungs(32_768), floor=300, resolution=STEP, second_look=second_look)
        looks: dict[int, int] = {}
        while (target := search.next_target()) is not None:
            looks[target] = looks.get(target, 0) + 1
            flipped = target == 8192 and looks[target] == 1  # the first look at 8,192 fails by noise
            if target == 8192 and looks[target] == 2:
                # The runner samples a second look until the pooled answers lead by three: after
                # 0 of 3, six that follow (6 of 9).
                search.record(outcome(target, 6, asked=6))
                continue
            search.record(outcome(target, 0 if flipped or target >= 10_000 else 3))
        return search

    without = run(False).result()
    assert without.horizon_tokens < 8192 and 8192 - without.horizon_tokens <= STEP  # stuck under the flip
    with_look = run(True)
    result = with_look.result()
    assert with_look.looks[8192] == 2 and with_look.verdicts[8192].passed  # 6 of 9 pooled
    assert 0 < 10_000 - result.horizon_tokens <= STEP
    assert result.bracket[1] is not None and result.bracket[0] < 10_000 <= result.bracket[1]
