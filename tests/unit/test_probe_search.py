"""The ladder: rung plan, the search, verdicts, and the whole runner against a scripted threshold model.

The scripted model (tests/fakes/threshold.py) follows iff the prompt is under T tokens; the probe
must find T within one search step, through the real OpenAI-compatible adapter.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.probe import ACK, outcome, run_probe
from tests.fakes.threshold import ThresholdModel
from vak_context.agent.probe import ProbeSettings, build_request, synthetic_turn
from vak_context.context.capacity.ladder import (
    LadderSearch,
    SampleOutcome,
    judge_cache,
    plan_rungs,
)
from vak_context.context.capacity.profile import CacheBehaviour, from_record, request_chars
from vak_context.context.request.toolcalls import parse_tool_calls
from vak_context.errors import InvalidInput
from vak_context.events.payloads import Activity, CapacityProfileRecord
from vak_context.storage.ledger import LedgerStore

# ---------------------------------------------------------------------- plan


def test_rungs_grow_geometrically_from_4k_to_090_of_the_window() -> None:
    assert plan_rungs(131_072) == (4096, 8192, 16384, 32768, 65536, 117964)
    assert plan_rungs(32_768) == (4096, 8192, 16384, 29491)


def test_a_small_window_starts_below_4k() -> None:
    rungs = plan_rungs(8192)
    assert rungs[0] < 4096 and rungs[-1] == int(8192 * 0.9) and len(rungs) >= 3
    assert plan_rungs(4096, floor=500)[0] >= 500


def test_a_window_not_above_the_floor_has_no_rungs() -> None:
    assert plan_rungs(512, floor=600) == ()
    with pytest.raises(InvalidInput):
        plan_rungs(0)
    with pytest.raises(InvalidInput):
        LadderSearch(())


# ---------------------------------------------------------------------- verdicts


def test_a_rung_is_the_majority_of_its_samples_and_needs_the_control_to_abstain() -> None:
    assert outcome(1000, 2).passed
    assert not outcome(1000, 1).passed
    assert not outcome(1000, 3, control_calls=1).passed  # called when told not to
    assert outcome(1000, 2, controls=3, control_calls=1).passed  # the majority of controls abstained


def test_only_an_instruction_sample_can_follow() -> None:
    control = SampleOutcome("control", 10, 10, calls=ACK, nonce="n1")
    assert not control.followed and not control.abstained
    errored = SampleOutcome("control", 10, None, error="HTTP 503")
    assert not errored.abstained  # an error is not evidence of abstaining


def test_inline_fences_are_read_from_text() -> None:
    """Fenced and tagged calls are read from text; a cut one is incomplete; prose is no call."""
    def names(text: str) -> list[tuple[str | None, bool]]:
        return [(c.name, c.complete) for c in parse_tool_calls(text)]

    assert names('```tool_call\n{"name": "probe_ack", "arguments": {"ack": "1"}}\n```') == [("probe_ack", True)]
    assert names('<tool_call>\n{"name": "probe_ack", "arguments": {}}\n</tool_call>') == [("probe_ack", True)]
    assert names('<tool_call>\n{"name": "probe_ack", "argum') == [("probe_ack", False)]  # cut by max_tokens
    assert names("I would call probe_ack here.") == []


def test_cache_rung_verdicts() -> None:
    cold = SampleOutcome("control", 1, 1000, latency_ms=1000.0)
    assert judge_cache(cold, SampleOutcome("control", 1, 1000, cached_tokens=999, latency_ms=900.0)).behaviour \
        is CacheBehaviour.PREFIX_STABLE
    assert judge_cache(cold, SampleOutcome("control", 1, 1000, latency_ms=150.0)).behaviour \
        is CacheBehaviour.PREFIX_STABLE  # 6.7x faster, nothing reported
    assert judge_cache(cold, SampleOutcome("control", 1, 1000, latency_ms=400.0)).behaviour is CacheBehaviour.NONE


# ---------------------------------------------------------------------- the search, pure


@pytest.mark.parametrize("threshold", [1500, 4100, 7000, 12_345, 30_000, 100_000])
def test_search_brackets_a_threshold_within_one_step(threshold: int) -> None:
    search = LadderSearch(plan_rungs(131_072), floor=300)
    while (target := search.next_target()) is not None:
        search.record(outcome(target, 3 if target < threshold else 0))
    assert search.lo is not None and search.hi is not None
    assert search.lo < threshold <= search.hi
    assert search.hi - search.lo <= search.resolution
    assert search.result().horizon_target == search.lo


def test_search_below_the_first_rung_tries_the_floor_then_bisects() -> None:
    search = LadderSearch(plan_rungs(131_072), floor=300)
    while (target := search.next_target()) is not None:
        search.record(outcome(target, 3 if target < 1000 else 0))
    tried = [o.target for o in search.outcomes]
    assert tried[:2] == [4096, 300]
    assert search.lo is not None and search.lo < 1000 <= (search.hi or 0)


def test_a_model_that_never_follows_passes_no_rung() -> None:
    search = LadderSearch(plan_rungs(32_768), floor=300)
    while (target := search.next_target()) is not None:
        search.record(outcome(target, 0))
    # The first rung, the floor, then the second look at the floor (the bracket's failing end).
    assert [o.target for o in search.outcomes] == [4096, 300, 300]
    result = search.result()
    assert not result.passed_any and result.horizon_tokens == 0


def test_a_model_that_always_follows_tops_out_at_090_of_the_window() -> None:
    """Every rung passes: the horizon is the top rung, looked at twice, and the bracket is open above."""
    search = LadderSearch(plan_rungs(32_768), floor=300)
    while (target := search.next_target()) is not None:
        search.record(outcome(target, 3))
    top = int(32_768 * 0.9)
    assert search.result().horizon_target == top and search.looks[top] == 2
    assert search.hi is None and search.result().bracket == (top, None)


def test_max_sizes_caps_the_requests() -> None:
    search = LadderSearch(plan_rungs(131_072), floor=300, max_sizes=3)
    while (target := search.next_target()) is not None:
        search.record(outcome(target, 3))
    assert len(search.outcomes) == 3


# ---------------------------------------------------------------------- the runner against the scripted model


@pytest.mark.parametrize("threshold", [900, 2600, 5000, 11_000, 21_000])
async def test_probe_finds_the_threshold_within_one_search_step(threshold: int) -> None:
    model = ThresholdModel(threshold, n_ctx=32_768)
    report = await run_probe(model)
    ladder = report.ladder
    passed = [o for o in ladder.outcomes if o.passed]
    failed = [o for o in ladder.outcomes if not o.passed]
    assert passed and failed
    best_fail = min(failed, key=lambda o: o.target)
    assert ladder.horizon_tokens < threshold <= (best_fail.prompt_tokens or 0)
    # One search step: the bracket in the search's own units, and the same in measured tokens.
    resolution = ladder.step
    assert resolution is not None and resolution <= max(64, 4096 // 16)
    assert threshold - ladder.horizon_tokens <= 2 * resolution
    assert report.profile.instruction_horizon.tokens == ladder.horizon_tokens
    assert report.profile.provenance.passed_any is True
    assert report.profile.provenance.protocol == "native"


async def test_probe_sizes_histories_from_reported_usage() -> None:
    model = ThresholdModel(50_000, n_ctx=32_768, tokens_per_char=0.4)  # far from the 0.25 prior
    report = await run_probe(model)
    assert report.profile.tokens_per_char.value == pytest.approx(0.4, rel=0.05)
    for rung in report.ladder.outcomes:  # every rung lands within a few percent of its target
        assert rung.prompt_tokens == pytest.approx(rung.target, rel=0.05)


async def test_samples_of_a_rung_are_identical_and_hit_the_cache() -> None:
    model = ThresholdModel(5000, n_ctx=32_768)
    report = await run_probe(model)
    for rung in report.ladder.outcomes:
        first, *rest = rung.instructions
        assert [s.prompt_tokens for s in rest] == [first.prompt_tokens] * len(rest)
        assert all(s.cached_tokens == (s.prompt_tokens or 0) - 1 for s in rest)
    assert report.cache is not None and report.cache.behaviour is CacheBehaviour.PREFIX_STABLE


async def test_noisy_threshold_model_majority_of_three_still_finds_it() -> None:
    found = 0
    for seed in range(10):
        model = ThresholdModel(7000, n_ctx=32_768, noise=0.05, seed=seed)
        ladder = (await run_probe(model)).ladder
        step = ladder.step or 0
        found += ladder.passed_any and 0 <= 7000 - ladder.horizon_tokens <= 2 * step
    assert found >= 8


async def test_a_model_that_always_calls_does_not_pass() -> None:
    report = await run_probe(ThresholdModel(10**9, always_calls=True))
    assert not report.ladder.passed_any
    assert report.profile.instruction_horizon.tokens == 0
    assert report.profile.provenance.passed_any is False
    assert all(o.control_calls == len(o.controls) for o in report.ladder.outcomes)


async def test_over_length_sets_the_verified_window() -> None:
    model = ThresholdModel(10**9, n_ctx=12_000, declared=32_768)  # the server declares more than it takes
    report = await run_probe(model)
    verified = report.profile.verified_window
    assert verified is not None and verified <= 12_000 - 32
    assert verified >= 12_000 - 2 * (report.ladder.step or 0) - 32
    assert report.profile.instruction_horizon.tokens <= verified
    assert any(o.overflow and o.limit_tokens == 12_000 for o in report.ladder.outcomes)


async def test_inline_fence_protocol_is_recorded() -> None:
    model = ThresholdModel(3000, inline=True)
    report = await run_probe(model, ProbeSettings(protocol="inline_fence"))
    assert report.profile.provenance.protocol == "inline_fence"
    assert report.ladder.passed_any


async def test_native_request_that_gets_an_inline_answer_records_inline() -> None:
    report = await run_probe(ThresholdModel(3000, inline=True))
    assert report.profile.provenance.protocol == "inline_fence"


async def test_each_sample_asks_for_about_32_tokens() -> None:
    seen: list[int] = []
    model = ThresholdModel(5000)
    inner = model.handle

    def spy(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/chat/completions"):
            seen.append(json.loads(request.content)["max_tokens"])
        return inner(request)

    model.handle = spy  # type: ignore[method-assign]
    report = await run_probe(model)
    # The cache rung, the floor measurement and each rung's sizing shot only need the prompt evaluated.
    assert seen[:3] == [1, 1, 1]
    sizing = sum(1 for o in report.ladder.outcomes for _ in [o])  # at least one sizing shot per rung
    assert seen.count(1) >= 3 + sizing
    assert set(seen) == {1, 32}


async def test_progress_reports_every_rung() -> None:
    events: list[dict[str, object]] = []
    report = await run_probe(ThresholdModel(5000), progress=events.append)
    stages = [e["stage"] for e in events]
    assert stages[:3] == ["metadata", "cache", "plan"] and stages[-1] == "done"
    assert stages.count("rung") == len(report.ladder.outcomes)


async def test_probe_ledger_entries_reconstruct_the_decision(ledger_dir: Path) -> None:
    report = await run_probe(ThresholdModel(5000))
    with LedgerStore(ledger_dir) as store:
        ids = store.append("capacity", report.ledger_payloads())
        activity, record = store.payload(ids[0]), store.payload(ids[1])
    assert isinstance(activity, Activity) and activity.activity == "capacity.probe"
    assert isinstance(record, CapacityProfileRecord)
    assert from_record(record) == report.profile
    rungs = activity.detail["rungs"]
    assert len(rungs) == len(report.ladder.outcomes)
    # Every verdict follows from the stored samples alone.
    for rung in rungs:
        followed = sum(s["followed"] for s in rung["samples"] if s["kind"] == "instruction")
        abstained = sum(s["abstained"] for s in rung["samples"] if s["kind"] == "control")
        asked = sum(s["kind"] == "instruction" for s in rung["samples"])
        controls = sum(s["kind"] == "control" for s in rung["samples"])
        assert rung["passed"] == (2 * followed > asked and 2 * abstained > controls and not rung["overflow"])
    assert activity.detail["verdict"]["horizon_tokens"] == report.profile.instruction_horizon.tokens


def test_synthetic_turns_are_shaped_like_real_ones_and_histories_nest() -> None:
    turn = synthetic_turn(3)
    assert turn.result.startswith("[evidence:") and "recall(evidence_id=" in turn.result
    small = build_request(2000, 0.27, kind="instruction", nonce="abc", model="m")
    large = build_request(4000, 0.27, kind="instruction", nonce="abc", model="m")
    assert small.messages[-1].text == large.messages[-1].text
    assert 'probe_ack tool now with ack="abc"' in small.messages[-1].text
    # Whole turns first: the smaller history's full turns are a prefix of the larger one.
    full_small = small.messages[: (len(small.messages) - 1) // 4 * 4 - 4]
    assert large.messages[: len(full_small)] == full_small
    assert request_chars(large) * 0.27 == pytest.approx(4000, rel=0.05)
    control = build_request(2000, 0.27, kind="control", nonce="abc", model="m")
    # Same history; only the padding of the last answer differs, by the length of the two endings.
    assert control.messages[:-2] == small.messages[:-2] and "Do not call any tool" in control.messages[-1].text
    assert control.messages[-2].text.startswith(small.messages[-2].text[:100])


class Alternating(ThresholdModel):
    """Follows on every other instruction request: the first two samples of a rung disagree."""

    def respond(self, path: str, content: bytes) -> tuple[int, dict[str, Any]]:
        status, body = super().respond(path, content)
        sent = json.loads(content) if path.endswith("/chat/completions") else {}
        # Samples only: a rung's sizing shot (max_tokens 1) is no answer.
        if sent and sent["max_tokens"] > 1 and "probe_ack" in sent["messages"][-1]["content"]:
            self.asked = getattr(self, "asked", 0) + 1
            if self.asked % 2 == 0:
                body["choices"][0]["message"] = {"role": "assistant", "content": "Done."}
        return status, body


async def test_a_rung_stops_sampling_once_its_majority_is_settled() -> None:
    """Sampling stops at a lead of three; a split rung samples on up to the cap (7); lead 2 of 3 is
    the old rule (majority of three, stopping when two agree)."""
    settings = ProbeSettings(max_sizes=1, cache_rung=False)
    decided = (await run_probe(ThresholdModel(10**9), settings)).ladder.outcomes[0]
    assert len(decided.instructions) == 3 and decided.followed == 3 and decided.passed
    full = (await run_probe(ThresholdModel(10**9), ProbeSettings(max_sizes=1, cache_rung=False,
                                                                  decide_early=False))).ladder.outcomes[0]
    assert len(full.instructions) == settings.samples == 7 and full.passed
    split = (await run_probe(Alternating(10**9), settings)).ladder.outcomes[0]
    # Never three ahead: it samples to the cap, and the majority of seven decides.
    assert [s.followed for s in split.instructions] == [True, False] * 3 + [True]
    assert split.passed
    old_rule = ProbeSettings(max_sizes=1, cache_rung=False, samples=3, lead=2)
    split3 = (await run_probe(Alternating(10**9), old_rule)).ladder.outcomes[0]
    assert [s.followed for s in split3.instructions] == [True, False, True]  # the third sample decides
