"""CapacityProfile (spec §1): feedback rules, bind-time read, staleness, and the ledger record."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from vak_context.context.capacity.profile import (
    ALPHA,
    ALPHA_UP,
    HOSTED_TTL_S,
    LOCAL_TTL_S,
    METADATA_CONFIDENCE,
    CacheBehaviour,
    CapacityProfile,
    Ewma,
    Horizon,
    ProbeProvenance,
    ProfileKey,
    TurnFeedback,
    apply_feedback,
    describe,
    from_record,
    metadata_digest,
    metadata_profile,
    probe_reason,
    profile_for,
    request_chars,
    to_record,
)
from vak_context.context.capacity.tokens import PRIOR_TOKENS_PER_CHAR
from vak_context.context.request.messages import ChatRequest, Message, ModelContext, ToolSpec
from vak_context.errors import InvalidInput
from vak_context.events.blocks import ToolResultBlock, ToolUseBlock
from vak_context.events.payloads import PAYLOAD_ADAPTER, CapacityProfileRecord, Usage
from vak_context.storage.ledger import LedgerStore

KEY = ProfileKey("anthropic", "claude-x")
META = ModelContext(provider="anthropic", model="claude-x", declared_window=200_000, output_limit=64_000,
                    source="/v1/models max_input_tokens")
T0 = 1_800_000_000.0


def probed(horizon: int = 50_000, *, at: float = T0, confidence: float = 0.9) -> CapacityProfile:
    base = metadata_profile(KEY, META, now=at)
    return replace(
        base,
        instruction_horizon=Horizon(horizon, confidence, at),
        tokens_per_char=Ewma(0.25, 5),
        provenance=replace(base.provenance, source="probe", probed_at=at, updated_at=at, passed_any=True,
                           protocol="native"),
    )


# ---------------------------------------------------------------------- feedback


def test_tokens_per_char_first_measurement_replaces_the_prior_then_ewma() -> None:
    p = metadata_profile(KEY, META, now=T0)
    assert p.tokens_per_char == Ewma(PRIOR_TOKENS_PER_CHAR, 0)
    p = apply_feedback(p, TurnFeedback(usage=Usage(input_tokens=300), chars_sent=1000), now=T0)
    assert p.tokens_per_char == Ewma(0.3, 1)
    p = apply_feedback(p, TurnFeedback(usage=Usage(input_tokens=200), chars_sent=1000), now=T0)
    assert p.tokens_per_char.value == pytest.approx(ALPHA * 0.2 + (1 - ALPHA) * 0.3)
    assert p.tokens_per_char.samples == 2


def test_tokens_per_char_counts_every_billed_tier_so_a_full_cache_hit_does_not_collapse_it() -> None:
    p = probed()
    # A full cache hit: input_tokens == 0, yet 1000 prompt tokens were billed for 4000 chars.
    hit = Usage(input_tokens=0, cache_read_tokens=900, cache_write_tokens=100)
    after = apply_feedback(p, TurnFeedback(usage=hit, chars_sent=4000), now=T0)
    assert after.tokens_per_char.value == pytest.approx(0.25)  # 1000 / 4000, unchanged EWMA
    skewed = apply_feedback(p, TurnFeedback(usage=Usage(input_tokens=0, cache_read_tokens=4000), chars_sent=4000),
                            now=T0)
    # a receipt that bills more per char than the rate is followed faster (ALPHA_UP) than one that bills
    # less (ALPHA): under-estimating sends requests over the horizon
    assert skewed.tokens_per_char.value == pytest.approx(ALPHA_UP * 1.0 + (1 - ALPHA_UP) * 0.25)
    lower = apply_feedback(p, TurnFeedback(usage=Usage(input_tokens=500), chars_sent=4000), now=T0)
    assert lower.tokens_per_char.value == pytest.approx(ALPHA * 0.125 + (1 - ALPHA) * 0.25)


def test_prefill_tps_learns_on_cache_miss_turns_only() -> None:
    p = probed()
    miss = apply_feedback(p, TurnFeedback(usage=Usage(input_tokens=2000), chars_sent=8000, prefill_ms=1000.0), now=T0)
    assert miss.prefill_tps == Ewma(2000.0, 1)
    hit = apply_feedback(miss, TurnFeedback(usage=Usage(input_tokens=10, cache_read_tokens=1990), chars_sent=8000,
                                            prefill_ms=50.0), now=T0)
    assert hit.prefill_tps == miss.prefill_tps
    second = apply_feedback(miss, TurnFeedback(usage=Usage(input_tokens=1000), chars_sent=4000, prefill_ms=1000.0),
                            now=T0)
    assert second.prefill_tps is not None
    assert second.prefill_tps.value == pytest.approx(ALPHA * 1000 + (1 - ALPHA) * 2000)


def test_a_failed_instruction_above_080_of_the_horizon_tightens_it() -> None:
    p = probed(horizon=50_000)
    fb = TurnFeedback(usage=Usage(input_tokens=42_000), chars_sent=168_000, request_tokens=42_000,
                      followed_instruction=False)
    after = apply_feedback(p, fb, now=T0 + 60)
    assert after.instruction_horizon == Horizon(42_000, 0.6, T0 + 60)
    assert after.provenance.needs_reprobe
    assert probe_reason(after, now=T0 + 61, local=False, digest=metadata_digest(META)) == "needs_reprobe"


def test_a_failure_at_or_below_080_of_the_horizon_changes_nothing() -> None:
    p = probed(horizon=50_000)
    fb = TurnFeedback(usage=Usage(input_tokens=40_000), chars_sent=160_000, request_tokens=40_000,
                      followed_instruction=False)
    after = apply_feedback(p, fb, now=T0)
    assert after.instruction_horizon == p.instruction_horizon
    assert not after.provenance.needs_reprobe


def test_feedback_never_widens_the_horizon() -> None:
    p = probed(horizon=50_000)
    success = TurnFeedback(usage=Usage(input_tokens=90_000), chars_sent=360_000, request_tokens=90_000,
                           followed_instruction=True)
    assert apply_feedback(p, success, now=T0).instruction_horizon.tokens == 50_000
    # A failure above the horizon lowers confidence and asks for a re-probe, but never raises tokens.
    over = TurnFeedback(usage=Usage(input_tokens=70_000), chars_sent=280_000, request_tokens=70_000,
                        followed_instruction=False)
    after = apply_feedback(p, over, now=T0)
    assert after.instruction_horizon.tokens == 50_000
    assert after.instruction_horizon.confidence == 0.6
    assert after.provenance.needs_reprobe


def test_tightening_never_raises_confidence() -> None:
    p = probed(horizon=50_000, confidence=0.3)
    fb = TurnFeedback(usage=Usage(input_tokens=45_000), chars_sent=1, request_tokens=45_000, followed_instruction=False)
    assert apply_feedback(p, fb, now=T0).instruction_horizon.confidence == 0.3


def test_reported_cache_reads_mark_an_unprobed_cache_as_provider_reported() -> None:
    p = metadata_profile(KEY, META, now=T0)
    after = apply_feedback(p, TurnFeedback(usage=Usage(input_tokens=5, cache_read_tokens=500), chars_sent=2000),
                           now=T0)
    assert after.cache is CacheBehaviour.PROVIDER_REPORTED
    stable = replace(p, cache=CacheBehaviour.PREFIX_STABLE)
    assert apply_feedback(stable, TurnFeedback(usage=Usage(cache_read_tokens=5), chars_sent=9), now=T0).cache \
        is CacheBehaviour.PREFIX_STABLE


# ---------------------------------------------------------------------- metadata and bind


def test_metadata_only_hosted_profile_is_the_declared_window_at_low_confidence() -> None:
    p = metadata_profile(KEY, META, now=T0)
    assert p.declared_window == 200_000
    assert p.instruction_horizon == Horizon(200_000, METADATA_CONFIDENCE, T0)
    assert p.output_reserve == 64_000
    assert p.verified_window is None and p.provenance.probed_at is None
    assert p.provenance.metadata_digest == metadata_digest(META)


def test_a_provider_without_a_window_gets_an_even_less_trusted_profile() -> None:
    ctx = ModelContext(provider="openai", model="gpt-x", source="none: OpenAI publishes no context length")
    p = metadata_profile(ProfileKey("openai", "gpt-x"), ctx, now=T0)
    assert p.instruction_horizon.confidence < METADATA_CONFIDENCE
    assert any("unknown" in s for s in p.provenance.signals)


def test_bind_returns_the_newer_of_ledger_and_process_cache() -> None:
    older, newer = probed(40_000, at=T0), probed(30_000, at=T0 + 100)
    assert profile_for(KEY, to_record(older), newer, META, T0 + 200) == newer
    assert profile_for(KEY, to_record(newer), older, META, T0 + 200) == newer
    assert profile_for(KEY, to_record(older), None, META, T0 + 200) == older
    assert profile_for(KEY, None, older, META, T0 + 200) == older


def test_bind_with_neither_gives_the_metadata_profile() -> None:
    p = profile_for(KEY, None, None, META, T0)
    assert p == metadata_profile(KEY, META, now=T0)


def test_bind_ignores_other_keys_and_changed_metadata() -> None:
    other = replace(probed(), key=ProfileKey("anthropic", "claude-y"))
    assert profile_for(KEY, None, other, META, T0).provenance.source == "metadata"
    changed = META.model_copy(update={"declared_window": 100_000})
    p = profile_for(KEY, to_record(probed()), None, changed, T0)
    assert p.provenance.source == "metadata" and p.declared_window == 100_000


def test_feedback_after_the_probe_counts_as_newer_at_bind() -> None:
    ledger = probed(at=T0)
    cached = apply_feedback(ledger, TurnFeedback(usage=Usage(input_tokens=10), chars_sent=100), now=T0 + 5)
    assert profile_for(KEY, to_record(ledger), cached, META, T0 + 10) == cached


def test_staleness_ttl_is_24h_local_and_7d_hosted() -> None:
    p = probed(at=T0)
    digest = metadata_digest(META)
    assert probe_reason(p, now=T0 + LOCAL_TTL_S - 1, local=True, digest=digest) is None
    assert probe_reason(p, now=T0 + LOCAL_TTL_S + 1, local=True, digest=digest) == "stale"
    assert probe_reason(p, now=T0 + LOCAL_TTL_S + 1, local=False, digest=digest) is None
    assert probe_reason(p, now=T0 + HOSTED_TTL_S + 1, local=False, digest=digest) == "stale"
    assert probe_reason(p, now=T0, local=True, digest="something-else") == "metadata_changed"
    assert probe_reason(None, now=T0, local=True, digest=digest) == "missing"
    assert probe_reason(metadata_profile(KEY, META, now=T0), now=T0, local=True, digest=digest) == "missing"


# ---------------------------------------------------------------------- the ledger record


def test_record_round_trip_and_payload_validation() -> None:
    p = replace(probed(), verified_window=190_000, prefill_tps=Ewma(812.5, 3), cache=CacheBehaviour.PREFIX_STABLE,
                provenance=replace(probed().provenance, rungs=({"target": 4096, "passed": True},),
                                   signals=("cache: 4095 cached tokens reported",), needs_reprobe=True))
    record = to_record(p)
    assert PAYLOAD_ADAPTER.validate_python(record.model_dump()) == record
    assert from_record(record) == p


def test_profiles_go_through_the_real_ledger(ledger_dir: Path) -> None:
    p = probed()
    with LedgerStore(ledger_dir) as store:
        entry_id = store.append_one("capacity", to_record(p))
        stored = store.payload(entry_id)
    assert isinstance(stored, CapacityProfileRecord)
    assert from_record(stored) == p


def test_profile_key_needs_provider_and_model() -> None:
    with pytest.raises(InvalidInput):
        ProfileKey("", "m")
    assert str(ProfileKey("local", "smollm2", "Q4_1")) == "local:smollm2@Q4_1"


def test_request_chars_counts_system_parts_and_tool_schemas() -> None:
    tool = ToolSpec(name="t", description="dd", input_schema={"type": "object"})
    request = ChatRequest(model="m", system="sys", tools=(tool,), messages=(
        Message.user("hello"),
        Message(role="assistant", content=(ToolUseBlock(id="1", name="t", input={"a": 1}),)),
        Message(role="user", content=(ToolResultBlock(tool_use_id="1", content="result"),)),
    ))
    assert request_chars(request) == 3 + 5 + (1 + len('{"a": 1}')) + 6 + (1 + 2 + len('{"type": "object"}'))


def test_usable_window_and_describe() -> None:
    p = replace(probed(horizon=50_000), verified_window=100_000, output_reserve=8_000)
    assert p.usable_window == 50_000
    narrow = replace(p, verified_window=60_000, output_reserve=20_000)
    assert narrow.usable_window == 40_000
    text = describe(p)
    assert "50,000 tokens (confidence 0.90)" in text and "protocol native" in text
    none = replace(p, provenance=ProbeProvenance(source="probe", probed_at=T0, passed_any=False))
    assert "passed any rung: NO" in describe(none)
