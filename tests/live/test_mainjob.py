"""The README's main job end to end (the ledger CLI commands end to end: tests/service/test_ledger_cli_process.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from vak_context.cli.mainjob import run_main_job
from vak_context.events.payloads import Directive
from vak_context.sessions.generator import generate_session
from vak_context.storage.ledger import LedgerStore


@pytest.mark.ray
@pytest.mark.live
def test_main_job_writes_verifies_and_summarises(ray_cluster: Any, local_model: Any, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The main job measures the model, runs live turns through the actors, writes and verifies the generated
    session, reads it back and plans it for two models; everything it says is on disk."""
    lines: list[str] = []
    monkeypatch.setenv("OPENAI_COMPAT_API_KEY", local_model.api_key)  # as for `vak run --local-base-url`
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "README.md").write_text("# Heron\nRun the tests with `make test`.\n")
    summary = run_main_job(tmp_path / "ledger", turns=6, seed=3, session="job", out=lines.append,
                           local_model="smollm2", local_base_url=local_model.base_url, workspace=workspace,
                           live_turns=("List the files in the workspace.", "What is in README.md?"))
    text = "\n".join(lines)
    assert summary["verify"]["ok"]
    assert summary["head"] in text and "entries by kind" in text and "turn_card" in text
    # the local model was measured, and the probe and its profile are in the ledger
    assert "capacity profile local:smollm2" in text and "instruction horizon" in text
    # the live turns went through the engine: a plan, a receipt and a profile update per step, a card per turn
    assert [t["directive"] for t in summary["live"]] == ["List the files in the workspace.", "What is in README.md?"]
    assert "you> What is in README.md?" in text and "step 1: plan" in text
    # the one demo directive among them is scored against the workspace (the other is a caller's own)
    assert summary["score"]["of"] == 1 and summary["score"]["verdicts"][0]["check"] == "listing"
    assert "demo score" in text and summary["repeat_rule"] == "close"
    # the session was read back (turns, cards, digests) and planned for two models side by side
    assert "── turn 6" in text and "[evidence:" in text
    assert "local (measured)" in text and "frontier (200k)" in text and "budget" in text
    with LedgerStore(tmp_path / "ledger", readonly=True) as store:  # what the job wrote is on disk
        assert store.head("job") == summary["head"]
        assert store.count("job") == summary["written"]
        job = [e.kind for e in store.entries("job")]
        assert job[:2] == ["activity", "capacity_profile"] and job.count("directive") == 6
        # this workspace lacks the files the generated directives ask about: their text is the snapshot's
        asked = [store.payload(e.id).text for e in store.entries("job") if e.kind == "directive"]
        assert asked == [p.text for p, _ in generate_session(seed=3, turns=6).items if isinstance(p, Directive)]
        live = [e.kind for e in store.entries("job-live")]
    steps = sum(t["steps"] for t in summary["live"])
    assert live.count("directive") == 2 and live.count("turn_card") == 2
    assert live.count("assistant_step") == live.count("receipt") == steps >= 2
    assert live.count("capacity_profile") >= steps  # one feedback update per step (and any overflow)
    assert len({t["prefix_digest"] for t in summary["live"]}) == 1
