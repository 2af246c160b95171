"""The ProbeActor reads the profile recorded for its model from the ledger's index (storage/ledger_index.py),
the entry binding reads, not from every entry of every session (issue 35 item 2): a restarted actor finds the
probe another process recorded fresh, and reads no session's entries to find it (counted, not timed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.fakes.threshold import ThresholdModel, loopback
from vak_context.actors.probe import ProbeActor, ProbeRequest
from vak_context.agent.probe import ProbeSettings
from vak_context.config import ProbeConfig, VakConfig
from vak_context.events.payloads import Directive
from vak_context.storage import ledger as ledger_module
from vak_context.storage.ledger import LedgerStore

QUICK = ProbeSettings(samples=3, controls=1, first_rung=1024, max_sizes=3, cache_rung=False)
OFF = VakConfig(probe=ProbeConfig(hosted="off"))


def clock() -> float:
    return 1_800_000_000.0


async def test_a_restarted_probe_finds_the_recorded_profile_without_reading_entries(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = ThresholdModel(3000, n_ctx=8192)
    with loopback(model) as url:
        target = ProbeRequest(spec="openai-compat:scripted", base_url=url, settings=QUICK)
        with LedgerStore(tmp_path) as store:
            first = ProbeActor(store, config=OFF, clock=clock)
            assert await first.turn_finished(target) == "started"
            await first.wait(target.key, timeout=60)
            recorded = await first.profile(target.key)
            for n in range(6):  # other sessions of the ledger, never read to find the profile
                store.append(f"other-{n}", [Directive(text=f"turn {n}")])
        calls = model.chat_calls
        loads: list[Any] = []
        real = ledger_module.load_session

        def counted(*args: Any, **kwargs: Any) -> Any:
            loads.append(args[0].name)
            return real(*args, **kwargs)

        monkeypatch.setattr(ledger_module, "load_session", counted)
        with LedgerStore(tmp_path) as store:
            second = ProbeActor(store, config=OFF, clock=clock)  # a restarted process: an empty cache
            assert await second.turn_finished(target) == "fresh"
            assert await second.profile(target.key) == recorded
            assert loads == []
        assert model.chat_calls == calls


async def test_a_fresh_profile_comes_back_with_until_when_no_probe_can_start(tmp_path: Path) -> None:
    """``turn_finished_quiet``: "fresh" hands back the profile ``profile`` gives and the end of its TTL (the turn
    services skip the next turn's ``turn_starting`` before then); a probe that starts hands back neither."""
    from vak_context.context.capacity.profile import from_record, ttl_s

    model = ThresholdModel(3000, n_ctx=8192)
    with loopback(model) as url:
        target = ProbeRequest(spec="openai-compat:scripted", base_url=url, settings=QUICK)
        with LedgerStore(tmp_path) as store:
            actor = ProbeActor(store, config=OFF, clock=clock)
            assert await actor.turn_finished_quiet(target) == ("started", None, None)
            await actor.wait(target.key, timeout=60)
            decision, record, until = await actor.turn_finished_quiet(target)
            assert decision == "fresh" and record == await actor.profile(target.key) and record is not None
            probed_at = from_record(record).provenance.probed_at
            assert probed_at is not None and until == probed_at + ttl_s(target.is_local)
