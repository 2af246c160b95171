"""A small live ladder against the real local model (SmolLM2 on llama.cpp, the shared server).

Kept to about a minute on 2 cores: the ladder is probed as if the window were 2048 tokens, with
at most 3 samples and one control per rung. What the 135M model does with the instruction is the
measurement, so nothing here asserts that it follows; only that the probe measured what it says.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from vak_context.agent.probe import ProbeSettings, measure_local_profile, probe_local
from vak_context.context.capacity.profile import CacheBehaviour, from_record
from vak_context.events.payloads import Activity, CapacityProfileRecord
from vak_context.providers.local.server import LocalModelServer
from vak_context.storage.ledger import LedgerStore

pytestmark = pytest.mark.live

SMALL = ProbeSettings(samples=3, controls=1, first_rung=512, window=2048, max_sizes=3)


async def test_a_small_live_ladder_measures_what_it_reports(local_model: LocalModelServer, ledger_dir: Path) -> None:
    events: list[str] = []
    report = await probe_local("smollm2", base_url=local_model.base_url, api_key=local_model.api_key, settings=SMALL,
                               on_progress=lambda e: events.append(str(e["stage"])))
    profile = report.profile
    # The metadata rung reads the server's real window, even though the ladder stayed under 2048.
    assert profile.declared_window == local_model.n_ctx
    assert 0 < len(report.ladder.outcomes) <= 3
    assert events.count("rung") == len(report.ladder.outcomes)
    for rung in report.ladder.outcomes:
        assert rung.target <= int(2048 * 0.9)
        first, *rest = rung.instructions
        assert first.prompt_tokens is not None
        # Sized from the server's own usage: each prompt lands near its target.
        assert first.prompt_tokens == pytest.approx(rung.target, rel=0.3)
        # Identical samples: the second and third reuse the whole prompt from llama.cpp's cache.
        for sample in rest:
            assert sample.prompt_tokens == first.prompt_tokens
            assert sample.cached_tokens >= first.prompt_tokens - 2
        # max_tokens 32 held (a reply cut inside a call is continued, with 64 more, at most twice).
        assert all(len(s.text) < 400 * (1 + 2 * s.extended) for s in rung.samples)
    # The cache rung: an identical repeat reports cached tokens on this server.
    assert report.cache is not None and report.cache.cached_tokens > 0
    assert profile.cache is CacheBehaviour.PREFIX_STABLE
    assert 0.1 < profile.tokens_per_char.value < 1.0 and profile.tokens_per_char.samples >= 4
    assert profile.prefill_tps is not None and profile.prefill_tps.value > 0
    # Whatever the model did, the profile says it consistently.
    passed = [o for o in report.ladder.outcomes if o.passed]
    assert profile.provenance.passed_any == bool(passed)
    assert (profile.instruction_horizon.tokens > 0) == bool(passed)
    if passed:  # the billed size of the largest pooled pass below the smallest fail
        assert profile.instruction_horizon.tokens == report.ladder.bracket[0]
    with LedgerStore(ledger_dir) as store:
        ids = store.append("capacity", report.ledger_payloads())
        activity, record = store.payload(ids[0]), store.payload(ids[1])
    assert isinstance(activity, Activity) and len(activity.detail["rungs"]) == len(report.ladder.outcomes)
    assert isinstance(record, CapacityProfileRecord) and from_record(record) == profile


def test_measure_local_profile_returns_a_probed_profile(local_model: LocalModelServer) -> None:
    one_rung = ProbeSettings(samples=1, controls=0, first_rung=256, window=1024, max_sizes=1, cache_rung=False)
    profile = measure_local_profile("smollm2", base_url=local_model.base_url, api_key=local_model.api_key,
                                    settings=one_rung)
    assert profile.key.model == "smollm2" and profile.key.provider == "local"
    assert profile.provenance.source == "probe" and profile.provenance.probed_at is not None
    assert len(profile.provenance.rungs) == 1
    assert profile.declared_window == local_model.n_ctx
