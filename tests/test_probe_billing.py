"""The horizon is a billed size, so the search brackets billed sizes (issue 9, item 13).

The scripted threshold model bills differently from what the probe asks for: a template overhead,
a per-message cost (so billing is not linear in the characters sent) and a tokens-per-char ratio
far from the prior. It follows iff the billed prompt is under T.
"""

from __future__ import annotations

import pytest

from agent.probe import ProbeSettings
from tests.test_probe_scripted import ThresholdModel
from tests.test_probe_search import run_probe

STEP = 64
THRESHOLDS = tuple(range(1_900, 28_000, 1_337))  # 20 thresholds, none on a rung


def skewed(threshold: int) -> ThresholdModel:
    return ThresholdModel(threshold, n_ctx=32_768, tokens_per_char=0.31, overhead=40, per_message=6)


async def test_horizon_is_within_one_step_below_the_threshold_for_every_threshold() -> None:
    """Over 20 thresholds, every horizon is a billed size below T and at most one step (64) below it;
    then the reported billed bracket holds T and is at most one step wide."""
    ladders = {t: (await run_probe(skewed(t), ProbeSettings(resolution=STEP))).ladder for t in THRESHOLDS}
    assert [(t, t - ladder.horizon_tokens) for t, ladder in ladders.items()
            if not 0 < t - ladder.horizon_tokens <= STEP] == []
    for t, ladder in ladders.items():
        lo, hi = ladder.bracket
        assert lo == ladder.horizon_tokens and hi is not None and lo < t <= hi
        assert ladder.step == hi - lo <= STEP


@pytest.mark.parametrize("threshold", [5_000, 17_777])
async def test_every_rung_lands_on_its_target_in_billed_tokens(threshold: int) -> None:
    """Prompts are filled to the character and re-aimed from the billed count: every rung's samples
    were billed within half a step of the size the search asked for (the sizing tolerance is 1/8
    step; at a turn boundary four more messages cost 24 template tokens, so sizes in that gap
    cannot be built and the closest shot is used)."""
    report = await run_probe(skewed(threshold), ProbeSettings(resolution=STEP))
    for rung in report.ladder.outcomes:
        billed = {s.prompt_tokens for s in rung.instructions}
        assert len(billed) == 1
        assert abs(billed.pop() - rung.target) <= STEP // 2  # type: ignore[operator]


async def test_the_profile_reports_the_billed_bracket() -> None:
    """The profile's signal and the probe activity name the billed bracket around the horizon."""
    report = await run_probe(skewed(9_000), ProbeSettings(resolution=STEP))
    lo, hi = report.ladder.bracket
    assert lo == report.profile.instruction_horizon.tokens
    assert any(f"bracket {lo}..{hi} billed tokens" in s for s in report.profile.provenance.signals)
    assert report.activity().detail["verdict"]["bracket"] == [lo, hi]
