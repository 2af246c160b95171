"""The previous turn never vanishes (issue 9, item 4): the reserve, the handoff, and per-model resets.

Sessions are written to a real on-disk ledger (``LedgerStore``) and planned through ``prepare()``,
as the agent does; the summariser is a plain function that writes a fixed summary (no model call).
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.fakes.planning import Prepared, prepare
from tests.fakes.sessions import ledger_session
from vak_context.actors.planner import record_plan
from vak_context.context.capacity.profile import CapacityProfile, Ewma, Horizon, ProfileKey
from vak_context.context.history.packets import compaction_payload
from vak_context.context.history.render import api_problems
from vak_context.context.history.turncard import build_card
from vak_context.context.planner.plan import Plan
from vak_context.context.planner.records import Fidelity
from vak_context.context.planner.view import SessionView
from vak_context.context.request.assemble import prefix_tokens, project, request_tokens
from vak_context.events.payloads import AssistantStep, ResetWithHandoff, TextBlock
from vak_context.sessions.longturn import LongTurn
from vak_context.storage.ledger import LedgerStore

FOLLOW_UP = "Thanks. Now also update the docs for that change."  # about 20 tokens, referring back


def _profile(name: str, horizon: int, window: int, out: int) -> CapacityProfile:
    return CapacityProfile(ProfileKey("local", name), window, Horizon(horizon, 0.9, 0.0), Ewma(0.25, 5), out)


SMALL = _profile("small", 1_500, 8_192, 256)  # a summary packet over turns 1-8 of a 14-turn session
LARGE = _profile("large", 200_000, 200_000, 8_192)
DEAD = _profile("dead", 0, 8_192, 256)  # the probe saw it follow the instruction at no size
SYSTEM = "You are an agent. " * 20


def _bytes(prep: Prepared) -> bytes:
    return json.dumps(prep.request.model_dump(mode="json"), sort_keys=True, ensure_ascii=False).encode()


def test_a_follow_up_after_a_140_step_turn_keeps_the_previous_turn_in_view() -> None:
    """After a turn of about 120k tokens, a short follow-up on an 8k profile (6k horizon) is not a
    rescue: the reserve is held to a share of the room (not the previous turn's size), and the
    request carries the previous turn (a card or Full, naming recall of it), within the horizon."""
    lt = LongTurn(steps=140)
    for _ in lt.steps():
        pass
    turn = lt.view.index.current
    assert turn is not None
    lt.add(AssistantStep(blocks=(TextBlock(text="The suite passes now; the segment reader was off by one."),)))
    lt.add(build_card(lt.view.index, turn, lt.view.turn_infos(turn)))
    big = turn.tokens
    assert big > 100_000
    prof = _profile("local-8k", 6_144, 8_192, 512)
    pre = prefix_tokens(prof, SYSTEM)
    p = lt.view.plan(prof, FOLLOW_UP, prefix_tokens=pre, tail_tokens=0)
    assert not p.rescue, p.rescue_reason
    available = p.budget.horizon - pre - prof.output_reserve
    assert p.budget.current_turn_reserve <= 0.75 * available < big  # CURRENT_TURN_SHARE of what is left
    # a card, or (its card alone is over 3k tokens: one trace line per call) the packet that names it
    assert p.fidelity(turn.ordinal) in (Fidelity.CARD, Fidelity.FULL, Fidelity.PACKET)
    if p.packet is not None and p.packet.needs_summary:  # as prepare() would: the summary, then plan again
        lt.add(compaction_payload(lt.view.index, p.packet.first_ordinal, p.packet.last_ordinal,
                                  "A long coding turn fixed the ledger's segment reader.", model=p.model))
        p = lt.view.plan(prof, FOLLOW_UP, prefix_tokens=pre, tail_tokens=0, state=p.state)
    request = project(lt.view.index, p, model="m", infos=lt.view.infos, system=SYSTEM)
    text = json.dumps(request.model_dump(mode="json")["messages"], ensure_ascii=False)
    if p.fidelity(turn.ordinal) == Fidelity.PACKET:
        assert p.packet is not None and p.packet.last_ordinal == turn.ordinal
        assert f'<context_summary turns=\\"{p.packet.first_ordinal}-{turn.ordinal}\\">' in text
        assert 'recall({\\"turn\\": N})' in text
    else:
        assert f'recall({{\\"turn\\": {turn.ordinal}}})' in text
    assert request.messages[-1].text.endswith(FOLLOW_UP)
    assert request_tokens(prof, request) + prof.output_reserve <= p.budget.horizon
    assert api_problems(request.messages) == []


async def _prepare(view: SessionView, store: LedgerStore, prof: CapacityProfile, calls: list[str]) -> Prepared:
    async def summarise(v: SessionView, p: Plan) -> list[str]:
        assert p.packet is not None
        calls.append(p.model)
        packet = compaction_payload(v.index, p.packet.first_ordinal, p.packet.last_ordinal,
                                    "The user asked about reservations, copper and the ledger.", model=p.model)
        ids = store.append("s", [packet])
        view.add(store.get(ids[0]))
        return ids

    prep = await prepare(view, prof, "And what about the copper price?", ledger=store, session="s",
                         summarise=summarise, model=prof.key.model, system=SYSTEM)
    record_plan(store, "s", view, prep.plan)  # as the PlannerActor does
    assert api_problems(prep.request.messages) == []
    return prep


async def test_a_reset_handoff_is_rendered_first_for_the_model_it_was_written_for(tmp_path: Path) -> None:
    """The reset a rescue writes is in that model's next requests: its handoff first, naming the turns
    behind it and how to recall them, before anything else."""
    store, view = ledger_session(tmp_path / "ledger", 6)
    calls: list[str] = []
    first = await _prepare(view, store, DEAD, calls)
    assert len(first.written) == 1 and isinstance(reset := store.payload(first.written[0]), ResetWithHandoff)
    again = await _prepare(view, store, DEAD, calls)
    assert again.written == [] and calls == []
    for prep in (first, again):
        lead = prep.request.messages[0].content[0]
        assert lead.text.startswith('<context_reset turns="1-6">')  # type: ignore[union-attr]
        assert reset.handoff in lead.text and 'recall({"turn": N})' in lead.text  # type: ignore[union-attr]
    store.close()


async def test_the_two_model_gate_holds_after_prepare_with_a_third_models_reset(tmp_path: Path) -> None:
    """The gate after prepare(): the small model writes a packet, the large one sees every turn at Full;
    then a third model's rescue writes a reset. That reset is that model's alone: the large model's
    request and the small model's (its stored packet reused, no summary written) are byte for byte
    what they were, and neither plan puts a turn behind a reset."""
    store, view = ledger_session(tmp_path / "ledger", 14)
    calls: list[str] = []
    small = await _prepare(view, store, SMALL, calls)
    assert calls == ["local:small"] and small.plan.packet is not None and small.plan.packet.stored_id is not None
    large = await _prepare(view, store, LARGE, calls)
    assert large.plan.packet is None and all(t.fidelity == Fidelity.FULL for t in large.plan.turns)

    dead = await _prepare(view, store, DEAD, calls)
    reset = store.payload(dead.written[0])
    assert isinstance(reset, ResetWithHandoff)

    large_after = await _prepare(view, store, LARGE, calls)
    small_after = await _prepare(view, store, SMALL, calls)
    assert calls == ["local:small"] and large_after.written == [] and small_after.written == []
    assert _bytes(large_after) == _bytes(large) and _bytes(small_after) == _bytes(small)
    for prep in (large_after, small_after):
        assert prep.plan.reset is None and not prep.plan.with_fidelity(Fidelity.BEHIND_RESET)
    assert all(t.fidelity == Fidelity.BEHIND_RESET for t in dead.plan.turns)
    assert reset.model == "local:dead"
    store.close()
