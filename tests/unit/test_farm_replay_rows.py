"""A farm's replay and fork in this process, on a generated session: one passing row per recorded request and
the checks that fail a row; a fork for a live rerun (the farm run itself: tests/live/test_farm_run.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from vak_context.storage.ledger import LedgerStore


def generated(tmp_path: Path, turns: int = 6) -> tuple[Any, Any]:
    from vak_context.farm.sessions import materialise
    from vak_context.farm.spec import SessionEntry

    mat = materialise(SessionEntry(name="gen", kind="generated", seed=5, turns=turns), tmp_path / "ledgers")
    store = LedgerStore(mat.root)
    return mat, store


def test_replay_rows_and_the_checks_that_fail_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In process: a generated session replays one passing row per recorded request; a request missing a
    digest is a no-cut violation, one over the budget fails, and a re-projection that differs fails the gate."""
    import asyncio
    import dataclasses

    from vak_context.context.request.messages import ChatRequest
    from vak_context.farm.replay import _check, replay_name, replay_session
    from vak_context.farm.rows import UnitKey
    from vak_context.farm.spec import ModelEntry

    mat, store = generated(tmp_path)
    chain = store.chain_to_root(mat.source_head)
    model = ModelEntry(name="big", kind="local", n_ctx=65_536)

    async def no_summary(view: Any, plan: Any) -> list[str]:
        raise AssertionError("a 64k window needs no packet for six turns")

    seen: list[Any] = []  # the arguments of each request's check, to check them again altered

    def keep(*args: Any) -> dict[str, Any]:
        seen.append(args)
        return _check(*args)

    monkeypatch.setattr("vak_context.farm.replay._check", keep)
    target = replay_name("gen", "big", store.sessions())
    rows = asyncio.run(replay_session(UnitKey("r", "big", "gen"), "run", "node", model, chain, ledger=store,
                                      decode=store.mapper.payload_of, target=target, system=mat.system,
                                      summarise=no_summary))
    steps = sum(e.kind == "assistant_step" for e in chain)
    assert [r["request"] for r in rows] == list(range(steps)) and all(r["passed"] for r in rows), [r["reason"] for r in rows]
    assert sum(r["digested_results"] for r in rows) > 0 and sum(r["verbatim_results"] for r in rows) > 0
    # the replay is its own session in the same ledger: the originals again, with a plan per projection
    assert target == "gen.big.0" and replay_name("gen", "big", store.sessions()) == "gen.big.1"
    replayed = store.chain_to_root(store.head(target) or "")
    assert [e.kind for e in replayed if e.kind != "plan"] == [e.kind for e in chain]
    originals = {e.id for e in chain}  # a copy has new ids, and names the copies, never the originals
    named = {m for e in replayed for m in re.findall(r"[0-9a-f]{64}", e.payload.decode())}
    assert named and not named & originals and named & {e.id for e in replayed}
    # the live step policy: a turn is planned at its first request, under this model and the gate partner, and
    # its later requests (and the gate's third, this model's again) keep that plan: a plan entry per turn and model
    turns = sum(e.kind == "directive" for e in chain)
    assert sum(e.kind == "plan" for e in replayed) == 2 * turns

    unit, run, node, n, view, profile, first, _again, previous, current, wall = seen[-1]
    digested = [m for m in first.request.messages if "[evidence:" in json.dumps(m.model_dump(mode="json"))]
    assert digested
    cut = dataclasses.replace(first, request=ChatRequest(
        **{**first.request.__dict__, "messages": tuple(m for m in first.request.messages if m is not digested[0])}))
    row = _check(unit, run, node, n, view, profile, cut, cut, previous, current, wall)
    assert not row["passed"] and row["missing_results"] > 0 and "no-cut" in row["reason"]
    row = _check(unit, run, node, n, view, profile, first, cut, previous, current, wall)
    assert not row["passed"] and "gate" in row["reason"]
    budget = dataclasses.replace(first.plan.budget, horizon=first.plan.budget.output_reserve + 100)
    over = dataclasses.replace(first, plan=dataclasses.replace(first.plan, budget=budget))
    row = _check(unit, run, node, n, view, profile, over, over, previous, current, wall)
    assert not row["passed"] and row["budget"] == 100 and "over budget" in row["reason"]
    store.close()


def test_a_fork_stops_before_the_turn_it_reruns(tmp_path: Path) -> None:
    """A live rerun of turn N starts from a copy of the session that ends just before turn N's directive, and
    gets that directive's text; the session's own ledger is not touched."""
    from vak_context.context.history.turns import TurnIndex
    from vak_context.farm.sessions import fork

    mat, store = generated(tmp_path)
    index = TurnIndex.build(store.chain_to_root(mat.source_head), mapper=store.mapper)
    store.close()
    text = fork(mat.root, "gen", mat.source_head, tmp_path / "fork", before_turn=3)
    assert text == index.turn(3).directive.text
    with LedgerStore(tmp_path / "fork", readonly=True) as forked:
        head = forked.head("gen")
        assert head is not None
        copied = TurnIndex.build(forked.chain_to_root(head), mapper=forked.mapper)
    assert [t.directive.text for t in copied.turns] == [t.directive.text for t in index.turns[:2]]
    with LedgerStore(mat.root, readonly=True) as again:
        assert again.head("gen") == mat.source_head
