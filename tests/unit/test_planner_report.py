"""compare_plans: one session planned under several profiles, side by side (the main job prints it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes.sessions import build_session, store_sink
from vak_context.context.capacity.profile import CapacityProfile, Ewma, Horizon, ProfileKey
from vak_context.engine.plan_comparison import compare_plans
from vak_context.errors import InvalidInput
from vak_context.events.payloads import ResetWithHandoff
from vak_context.storage.ledger import LedgerStore

SMALL = CapacityProfile(ProfileKey("local", "smollm2"), 8_192, Horizon(1_700, 0.9, 0.0), Ewma(0.25, 3), 256)
LARGE = CapacityProfile(ProfileKey("hosted", "frontier"), 200_000, Horizon(200_000, 0.3, 0.0), Ewma(0.25, 3), 8_192)


def test_the_report_lists_every_turn_under_each_profile_with_its_tokens(ledger_dir: Path) -> None:
    store = LedgerStore(ledger_dir)
    b = build_session(20, tools_per_turn=1, sink=store_sink(store, "s"))
    text = compare_plans(store, "s", {"small": SMALL, "large": LARGE}, system="You are an agent. " * 30)
    lines = text.splitlines()
    assert lines[0] == "plans for session 's' (20 turns), turn 20 as the current turn"
    assert "small (local:smollm2)" in lines[2] and "large (hosted:frontier)" in lines[2]
    rows = [line for line in lines if line[:4].strip().isdigit()]
    assert len(rows) == 20
    for ordinal, row in enumerate(rows, 1):
        small_cell, large_cell = (c.strip() for c in row.split(" | ")[1:])
        if ordinal == 20:
            assert small_cell.startswith("current") and large_cell.startswith("current")
            continue
        assert large_cell.startswith("full")  # the frontier model keeps every turn whole
        assert small_cell.split()[0] in ("full", "card", "packet")
        if small_cell.split()[0] != "packet":
            assert int(small_cell.split()[1].replace(",", "")) > 0
    assert any("packet" in r.split(" | ")[1] for r in rows)  # the small model packs the oldest turns
    footer = "\n".join(lines[-5:])
    assert "budget" in footer and "history" in footer and "turns 1–" in footer and "packet" in footer
    new_turn = compare_plans(b.entries, "s", {"small": SMALL}, directive="And the copper price?")
    assert "a new turn: 'And the copper price?'" in new_turn.splitlines()[0]
    store.close()


def test_a_session_behind_a_reset_is_planned_as_a_new_turn_and_bad_calls_say_what_to_do(ledger_dir: Path) -> None:
    b = build_session(4)
    b.add(ResetWithHandoff(handoff="reset", reason="test"))
    text = compare_plans(b.entries, "t", {"large": LARGE})
    assert "a new turn" in text.splitlines()[0]
    assert all(line.rstrip().endswith("reset") for line in text.splitlines() if line[:4].strip().isdigit())
    with pytest.raises(InvalidInput, match="at least one profile"):
        compare_plans(b.entries, "t", {})
    with pytest.raises(InvalidInput, match="no turns"):
        compare_plans(b.entries, "other", {"large": LARGE})
    store = LedgerStore(ledger_dir)
    store.append("empty", [ResetWithHandoff(handoff="x")])
    with pytest.raises(InvalidInput, match="no turns"):
        compare_plans(store, "empty", {"large": LARGE})
    store.close()
