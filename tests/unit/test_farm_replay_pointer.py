"""The farm's no-cut check accepts a pointer-level packet (``docs/PLANNER.md``: the range, how many
results it holds, how to recall them), and still fails a request that drops it.

The generated session of seed 5 (eight turns) replayed under an 8k window with a 2,250-token horizon
plans turns 2–5 into a packet that only a pointer fits: it names the turns, not their evidence ids.
(It was 2,500 before the budget became min(h, window − out) and the session text the repository's files.)
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from vak_context.context.request.messages import ChatRequest, Message
from vak_context.events.blocks import TextBlock
from vak_context.farm.replay import _check, replay_session
from vak_context.farm.rows import UnitKey
from vak_context.farm.spec import ModelEntry
from vak_context.sessions.generator import generate_session
from vak_context.storage.ledger import LedgerStore


def test_a_pointer_packet_names_its_turns_results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every replayed request passes, some carry a pointer packet whose turns' results count as packeted;
    the same request without the pointer's text fails as a no-cut violation."""
    store = LedgerStore(tmp_path / "ledger")
    generate_session(seed=5, turns=8, append=lambda p, b: store.append("gen", [p], blobs=[b])[0])
    chain = store.chain_to_root(store.head("gen") or "")
    # At 2,250 tokens a list-level packet of the early turns fits since a batch stops short of the newest turns
    # (context/planner/fill.py batch_end); at 1,600 only a pointer does.
    model = ModelEntry(name="small", kind="endpoint", window=8_192, horizon=1_600)

    async def no_summary(view: Any, plan: Any) -> list[str]:
        raise AssertionError("only a pointer fits this horizon: no summary is asked for")

    seen: list[tuple[Any, ...]] = []

    def keep(*args: Any) -> dict[str, Any]:
        seen.append(args)
        return _check(*args)

    monkeypatch.setattr("vak_context.farm.replay._check", keep)
    rows = asyncio.run(replay_session(UnitKey("r", "small", "gen"), "run", "node", model, chain, ledger=store,
                                      decode=store.mapper.payload_of, target="gen.small.0", system="",
                                      summarise=no_summary))
    assert all(r["passed"] for r in rows), [(r["request"], r["reason"]) for r in rows if not r["passed"]]
    pointers = [args for args in seen if args[6].plan.packet is not None and args[6].plan.packet.level == "pointer"]
    assert pointers
    unit, run, node, n, view, profile, first, _again, previous, current, wall = pointers[-1]
    row = _check(unit, run, node, n, view, profile, first, first, previous, current, wall)
    assert row["packeted_results"] > 0 and row["missing_results"] == 0

    def without_pointer(m: Message) -> Message:
        kept = tuple(p for p in m.content if not (isinstance(p, TextBlock) and p.text.startswith("<context_summary turns=")))
        return Message(role=m.role, content=kept)

    request = first.request
    cut = dataclasses.replace(first, request=ChatRequest(
        **{**request.__dict__, "messages": tuple(without_pointer(m) for m in request.messages)}))
    row = _check(unit, run, node, n, view, profile, cut, cut, previous, current, wall)
    assert not row["passed"] and row["missing_results"] > 0 and "no-cut" in row["reason"]
    store.close()
