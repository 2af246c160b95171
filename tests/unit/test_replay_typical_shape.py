"""Spec §10 on a real recorded session: a 31-turn tau-bench session planned for the local model's 8k window
carries under 3k tokens of history, no turn lost (the two-model replay gate: tests/live/test_replay_gate.py)."""

from __future__ import annotations

from pathlib import Path

from tests.fakes.imported import TAU_FOLLOW_UP, TAU_SESSION, import_tau
from tests.fakes.local_model import LOCAL_MODEL_N_CTX
from vak_context.context.capacity.profile import CapacityProfile, Ewma, Horizon, ProfileKey
from vak_context.context.planner.view import SessionView
from vak_context.context.request.assemble import prefix_tokens


def test_typical_shape_31_turns_on_a_small_profile_carry_under_3k_tokens_of_history(
    trajectories: Path, tmp_path: Path
) -> None:
    """Spec §10: a 31-turn session on a small model carries under 3k tokens of history, no turn lost."""
    store, system = import_tau(trajectories, tmp_path / "ledger")
    head = store.head(TAU_SESSION)
    assert head is not None
    view = SessionView.build(store.chain_to_root(head))
    local = CapacityProfile(  # the local model's 8k window
        key=ProfileKey("local", "smollm2"), declared_window=LOCAL_MODEL_N_CTX,
        instruction_horizon=Horizon(LOCAL_MODEL_N_CTX, 0.9, 0.0), tokens_per_char=Ewma(0.25, 5), output_reserve=512,
    )
    p = view.plan(local, TAU_FOLLOW_UP, prefix_tokens=prefix_tokens(local, system), tail_tokens=20)
    assert len(p.turns) == 30  # 30 closed turns and the follow-up: 31 turns
    assert p.budget.history < 3_000
    assert p.packet is None and all(t.fidelity in ("full", "card") for t in p.turns)
    store.close()
