"""The horizon is a billed size, so the search brackets billed sizes (issue 9, item 13).

The scripted threshold model bills differently from what the probe asks for: a template overhead,
a per-message cost (so billing is not linear in the characters sent) and a tokens-per-char ratio
far from the prior. It follows iff the billed prompt is under T.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.fakes.probe import KEY, run_probe
from tests.fakes.threshold import ThresholdModel
from vak_context.agent.probe import ProbeRunner, ProbeSettings
from vak_context.context.request.messages import ChatRequest
from vak_context.providers.base import RetryPolicy
from vak_context.providers.openai_compat import OpenAICompatProvider

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


class ModelsOwnCount:
    """An exact counter for the scripted model: its own billing of the body the adapter would send."""

    exact = True

    def __init__(self, model: ThresholdModel, provider: OpenAICompatProvider) -> None:
        self.model, self.provider, self.counts = model, provider, 0

    async def count(self, request: ChatRequest) -> int:
        self.counts += 1
        return self.model.prompt_tokens(self.provider.render(request))


async def test_an_exact_counter_sizes_rungs_without_sending_them() -> None:
    """With the server's own count (the quick ladder's sizing), no rung sends a max_tokens=1 shot: the
    only such chat calls are the cache rung's two and the floor's one. Every rung still lands within half
    a step of its billed target, and the horizon is within one step below the threshold."""
    model = skewed(9_000)
    sizes: list[int] = []
    async with httpx.AsyncClient(transport=model.transport()) as client:
        provider = OpenAICompatProvider(client, base_url="http://scripted.test/v1", retry=RetryPolicy(attempts=1))
        original = model.respond

        def respond(path: str, content: bytes) -> tuple[int, dict[str, Any]]:
            if path.endswith("/chat/completions"):
                sizes.append(json.loads(content).get("max_tokens", 0))
            return original(path, content)

        model.respond = respond  # type: ignore[method-assign]
        counter = ModelsOwnCount(model, provider)
        report = await ProbeRunner(provider, KEY, settings=ProbeSettings(resolution=STEP), counter=counter,
                                   clock=lambda: 1_800_000_000.0).run()
    assert counter.counts >= len(report.ladder.outcomes)
    assert sizes.count(1) == 3
    for rung in report.ladder.outcomes:
        billed = {s.prompt_tokens for s in rung.instructions}
        assert len(billed) == 1 and abs(billed.pop() - rung.target) <= STEP // 2  # type: ignore[operator]
    assert 0 < 9_000 - report.ladder.horizon_tokens <= STEP
