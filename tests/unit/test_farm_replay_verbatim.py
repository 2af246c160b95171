"""The farm's no-cut check counts a closed turn's short results, which its record keeps as sent
(``vak_context.context.history.render.VERBATIM_CHARS``), as verbatim, not as missing.

The generated session of seed 3 (three turns) under a 32k window keeps every closed turn at full
fidelity, and its results are short: later requests carry them as they were sent, naming no evidence id.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from vak_context.farm.replay import _check, replay_session
from vak_context.farm.rows import UnitKey
from vak_context.farm.spec import ModelEntry
from vak_context.sessions.generator import generate_session
from vak_context.storage.ledger import LedgerStore


def test_a_closed_turns_short_results_count_as_verbatim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every replayed request passes with no missing result, and some request counts more verbatim results
    than its current turn holds: the closed turns' short results, shown as sent."""
    store = LedgerStore(tmp_path / "ledger")
    generate_session(seed=3, turns=3, append=lambda p, b: store.append("gen", [p], blobs=[b])[0])
    chain = store.chain_to_root(store.head("gen") or "")
    model = ModelEntry(name="wide", kind="endpoint", window=32_768)

    async def no_summary(view: Any, plan: Any) -> list[str]:
        raise AssertionError("a 32k window needs no packet for three short turns")

    in_current: list[int] = []  # per request: the results its current turn holds when it is checked

    def keep(*args: Any) -> dict[str, Any]:
        view, current = args[4], args[9]
        in_current.append(sum(ex.evidence_id is not None and ex.result is not None
                              for ex in view.index.turn(current).exchanges))
        return _check(*args)

    monkeypatch.setattr("vak_context.farm.replay._check", keep)
    rows = asyncio.run(replay_session(UnitKey("r", "wide", "gen"), "run", "node", model, chain, ledger=store,
                                      decode=store.mapper.payload_of, target="gen.wide.0", system="",
                                      summarise=no_summary))
    assert all(r["passed"] and r["missing_results"] == 0 for r in rows), [r["reason"] for r in rows]
    assert len(in_current) == len(rows)
    assert any(r["verbatim_results"] > n for r, n in zip(rows, in_current, strict=True))
