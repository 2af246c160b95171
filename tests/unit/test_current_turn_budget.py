"""A current turn larger than the budget (issue 9, item 3): every request of a 140-step turn fits.

The turn is ``vak_context.sessions.longturn``'s generated coding turn (about 120k tokens as carried); it is planned
and projected after its directive and after each of its 140 steps, under an 8k, a 32k and a 200k
profile, as the turn loop would.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.fakes.planning import prepare
from tests.fakes.sessions import SessionBuilder
from vak_context.context.capacity.profile import CapacityProfile, Ewma, Horizon, ProfileKey
from vak_context.context.history.packets import render_step_packet, step_items, step_packet_chars
from vak_context.context.history.render import api_problems
from vak_context.context.history.turncard import short_id
from vak_context.context.planner.plan import Plan
from vak_context.context.planner.view import SessionView
from vak_context.context.request.assemble import prefix_tokens, project, request_tokens
from vak_context.context.request.messages import ChatRequest
from vak_context.events.blocks import ToolResultBlock, ToolUseBlock
from vak_context.sessions.longturn import LongTurn


def _profile(name: str, horizon: int, window: int, out: int) -> CapacityProfile:
    return CapacityProfile(ProfileKey("test", name), window, Horizon(horizon, 0.9, 0.0), Ewma(0.25, 10), out)


PROFILES = {
    "8k": _profile("local-8k", 6_144, 8_192, 512),  # an 8k window with a 6k horizon
    "32k": _profile("mid-32k", 24_576, 32_768, 1_024),
    "200k": _profile("frontier-200k", 200_000, 200_000, 8_192),
}
SYSTEM = "You are a careful coding agent. Read before you edit; run the tests after every change. " * 8


def _messages_json(request: ChatRequest) -> str:
    return json.dumps(request.model_dump(mode="json")["messages"], ensure_ascii=False)


def _shape(p: Plan) -> tuple[Any, ...]:
    """What a compaction changes: the history's fidelities and packet, the current turn's boundaries."""
    ct = p.current_turn
    assert ct is not None
    return p.fidelities, p.packet, ct.covered, ct.packet_through, ct.digest_through, ct.level


@dataclass
class Requests:
    by_profile: dict[str, list[tuple[Plan, ChatRequest]]]  # (plan, request) after the directive and each step
    evidence: list[str]  # the long turn's evidence ids: step k's at index k − 1


@pytest.fixture(scope="module")
def long_turn() -> Requests:
    """Every request of the long turn under each profile, as the turn loop would plan them."""
    lt = LongTurn(steps=140)
    out: dict[str, list[tuple[Plan, ChatRequest]]] = {name: [] for name in PROFILES}
    for _k in lt.steps():
        current = len(lt.view.index.turns)
        for name, prof in PROFILES.items():
            p = lt.view.plan(prof, "", prefix_tokens=prefix_tokens(prof, SYSTEM), tail_tokens=0, current=current)
            out[name].append((p, project(lt.view.index, p, model="m", infos=lt.view.infos, system=SYSTEM)))
    return Requests(out, list(lt.evidence))


@pytest.mark.parametrize("name", list(PROFILES))
def test_every_request_of_a_140_step_turn_fits_the_budget_with_pairs_kept_and_ids_named(
    name: str, long_turn: Requests
) -> None:
    """Over all 141 requests of the turn: none exceeds horizon − output reserve; each is API-valid
    (every tool_use answered by its tool_result, none without its call); a compacted step's call is
    there with its result (digested) or gone with it (in the step packet); and every evidence id of a
    compacted step is named in the request."""
    prof = PROFILES[name]
    requests = long_turn.by_profile[name]
    assert len(requests) == 141
    over = [k for k, (p, request) in enumerate(requests)
            if request_tokens(prof, request) + prof.output_reserve > p.budget.horizon]
    assert over == [], f"{len(over)} of {len(requests)} requests over the budget under {name}"
    for p, request in requests:
        # the prompt within the horizon, and with the output reserve within the window (request_budget)
        assert p.budget.horizon - prof.output_reserve <= prof.instruction_horizon.tokens
        assert p.budget.horizon <= prof.declared_window
        assert api_problems(request.messages) == []
        ct = p.current_turn
        assert ct is not None and ct.tokens <= ct.room
        calls = {part.id for m in request.messages for part in m.content if isinstance(part, ToolUseBlock)}
        results = {part.tool_use_id for m in request.messages for part in m.content if isinstance(part, ToolResultBlock)}
        assert calls == results
        text = _messages_json(request)
        for k in range(1, ct.steps + 1):
            assert (f"toolu_{k:03d}" in calls) == (k > ct.packet_through)
            if k <= ct.digest_through:
                assert short_id(long_turn.evidence[k - 1]) in text, (name, k)


def test_the_small_profiles_compact_in_chunks_and_keep_the_prefix_between(long_turn: Requests) -> None:
    """Compaction moves its boundaries in chunks: while the plan's shape (history, packet, the current
    turn's boundaries) holds, each request is the previous one plus the new step, byte for byte; the
    shape changes in under half of the steps on 8k, rarely on 32k, and never on 200k (it fits)."""
    moves = {}
    for name in PROFILES:
        requests = long_turn.by_profile[name]
        n = 0
        for (p0, r0), (p1, r1) in pairwise(requests):
            if _shape(p0) == _shape(p1):
                before, after = _messages_json(r0), _messages_json(r1)
                assert after.startswith(before[:-1]), name  # the same messages, then the new step's
            else:
                n += 1
        moves[name] = n
    assert moves["200k"] == 0
    assert 0 < moves["32k"] <= 20
    assert 0 < moves["8k"] < len(long_turn.by_profile["8k"]) / 2  # a step is a quarter of this room
    final = {name: long_turn.by_profile[name][-1][0].current_turn for name in PROFILES}
    assert final["8k"] is not None and final["8k"].level == "ids"  # past digests, the step packet
    assert final["200k"] is not None and final["200k"].digest_through == 0  # the whole turn, as carried


async def test_a_turn_that_cannot_fit_even_at_its_smallest_is_refused_with_what_to_do() -> None:
    """When the current turn's most compact form does not fit, plan() raises RequestTooLarge (nothing
    to send) naming the sizes and what to do, and prepare() raises it before writing or sending anything."""
    from vak_context.errors import RequestTooLarge  # the error this fix adds

    lt = LongTurn(steps=30, prior_turns=2)
    for _ in lt.steps():
        pass
    current = len(lt.view.index.turns)
    tiny = _profile("tiny", 444, 8_192, 256)  # a 444-token prompt at most: the output reserve is beside it
    with pytest.raises(RequestTooLarge) as err:
        lt.view.plan(tiny, "", prefix_tokens=prefix_tokens(tiny, SYSTEM), tail_tokens=0, current=current)
    message = str(err.value)
    assert "Nothing was sent" in message and "larger horizon" in message and "new one" in message
    assert err.value.needed > err.value.available

    class Ledger:
        def append(self, session: str, payloads: Any) -> list[str]:
            raise AssertionError("nothing is written for a request that cannot be sent")

        def get(self, entry_id: str) -> Any:
            raise AssertionError("nothing is read")

    async def summarise(view: SessionView, p: Plan) -> list[str]:
        raise AssertionError("no summary for a request that cannot be sent")

    with pytest.raises(RequestTooLarge):
        await prepare(lt.view, tiny, "", ledger=Ledger(), session="s", summarise=summarise, model="m",
                      system=SYSTEM, current=current)


def test_the_step_packet_is_sized_exactly_and_names_every_id() -> None:
    """``step_packet_chars`` (what the fold charges) is the rendered packet's length, at both levels and
    for any range, and the packet names every call of its steps with its evidence id."""
    lt = LongTurn(steps=12, prior_turns=2)
    for _ in lt.steps():
        pass
    turn = lt.view.index.turns[-1]
    per_step = step_items(lt.view.index, turn)
    for first, last in ((1, 1), (1, 12), (4, 9)):
        items = [item for step in per_step[first - 1 : last] for item in step]
        for level in ("list", "ids"):
            text = render_step_packet(turn.ordinal, first, last, level=level, items=items)  # type: ignore[arg-type]
            assert len(text) == step_packet_chars(
                turn.ordinal, first, last, level=level,  # type: ignore[arg-type]
                line_chars=sum(len(i.line) for i in items), brief_chars=sum(len(i.brief) for i in items),
                items=len(items))
            assert text.startswith(f'<context_summary turn="{turn.ordinal}" steps="{first}-{last}">')
            assert all(short_id(eid) in text for eid in lt.evidence[first - 1 : last])
            # both levels name each call, in order, beside its id: a model reading the packet can tell
            # which of its calls ran (the ids level once named none, and a model repeated them)
            for k, step in enumerate(turn.steps[first - 1 : last], start=first):
                for ex in step.exchanges:
                    if ex.evidence_id is not None:
                        assert f"- step {k} {ex.tool_name}" in text and short_id(ex.evidence_id) in text


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    history=st.integers(0, 6),
    steps=st.lists(st.tuples(st.sampled_from(["bash", "read_file", "web_search"]), st.integers(1, 400)),
                   min_size=1, max_size=40),
    horizon=st.sampled_from([600, 1_200, 2_500, 4_000, 8_000, 30_000]),
    out=st.integers(0, 600),
    tpc=st.floats(0.2, 0.4),
)
def test_any_current_turn_is_planned_within_budget_or_refused(
    history: int, steps: list[tuple[str, int]], horizon: int, out: int, tpc: float
) -> None:
    """For random current turns and profiles: plan() either refuses (RequestTooLarge, with needed >
    available) or its request fits horizon − output reserve, is API-valid, keeps or drops each step's
    call and result together, and names every evidence id of a compacted step."""
    from vak_context.errors import RequestTooLarge

    b = SessionBuilder()
    for i in range(history):
        b.turn(f"Earlier question {i + 1} about the ledger", [("bash", {"command": "ls"}, "a\nb\nc", False)], "ok")
    tools = [(name, {"n": k}, "\n".join(f"{k}:{j} output line of {name}, with some words" for j in range(lines)),
              k % 7 == 3) for k, (name, lines) in enumerate(steps)]
    b.turn("Fix the failing tests and run the suite again.", tools, "Done.", close=False)
    current = len(b.view.index.turns)
    prof = CapacityProfile(ProfileKey("prop", "p"), horizon, Horizon(horizon, 0.9, 0.0), Ewma(tpc, 3), out)
    try:
        p = b.view.plan(prof, "", prefix_tokens=50, tail_tokens=0, current=current)
    except RequestTooLarge as exc:
        event("refused")
        assert exc.needed > exc.available
        return
    if p.packet is not None and p.packet.needs_summary:
        event("history summary")
        return  # the summariser's part, tested elsewhere
    ct = p.current_turn
    assert ct is not None
    event("step packet" if ct.packet_through else "digests" if ct.digest_through else "as carried")
    request = project(b.view.index, p, model="m", infos=b.view.infos)
    assert request_tokens(prof, request) + 50 + out <= p.budget.horizon
    assert api_problems(request.messages) == []
    turn = b.view.index.turn(current)
    text = _messages_json(request)
    calls = {part.id for m in request.messages for part in m.content if isinstance(part, ToolUseBlock)}
    for k, step in enumerate(turn.steps, start=1):
        for ex in step.exchanges:
            assert (ex.tool_use_id in calls) == (k > ct.packet_through)
            if k <= ct.digest_through and ex.evidence_id is not None:
                assert short_id(ex.evidence_id) in text
