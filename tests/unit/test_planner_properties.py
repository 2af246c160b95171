"""Property tests: for random sessions and profiles a planned request never exceeds the horizon, never
splits a turn, and never drops a tool result (spec "Verification": no-cut invariant)."""

from __future__ import annotations

import json
import math

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.fakes.sessions import WORDS, SessionBuilder
from vak_context.context.capacity.profile import CapacityProfile, Ewma, Horizon, ProfileKey, request_budget
from vak_context.context.history.packets import compaction_payload
from vak_context.context.history.render import VERBATIM_CHARS, api_problems
from vak_context.context.history.turncard import short_id
from vak_context.context.planner.records import Fidelity
from vak_context.context.request.assemble import prefix_tokens, project, request_tokens, text_tokens
from vak_context.errors import RequestTooLarge
from vak_context.events.blocks import ToolResultBlock, ToolUseBlock
from vak_context.events.payloads import ResetWithHandoff

tool_calls = st.lists(
    st.tuples(
        st.sampled_from(["web_search", "bash", "read_file", "get_reservation"]),
        st.integers(1, 60),  # lines of output
        st.booleans(),  # is_error
    ),
    max_size=3,
)
turn_specs = st.tuples(st.integers(1, 60), tool_calls, st.integers(0, 90))
light_turns = st.tuples(st.integers(1, 40), tool_calls.filter(lambda c: len(c) <= 1), st.integers(20, 90))
profiles = st.builds(
    lambda h, extra, out, tpc: CapacityProfile(
        key=ProfileKey("local", "prop"),
        declared_window=max(1, h + extra),
        instruction_horizon=Horizon(h, 0.9, 0.0),
        tokens_per_char=Ewma(tpc, 3),
        output_reserve=out,
    ),
    st.sampled_from([0, 1_500, 2_000, 2_500, 3_000, 4_000, 5_000, 6_000, 8_000, 12_000, 20_000, 40_000]),
    st.sampled_from(range(-1_000, 20_001, 250)),  # the window may be below the horizon (a verified window did that)
    st.integers(0, 1_000),
    st.floats(0.15, 0.5),
)


def _words(n: int, seed: int) -> str:
    return " ".join(WORDS[(seed * 7 + k * 3) % len(WORDS)] for k in range(n))


def _body(kind: str, lines: int, seed: int) -> str:
    if kind == "get_reservation":
        return json.dumps({"id": f"R{seed}", "flights": [{"no": f"HAT{k:03d}"} for k in range(lines % 12 + 1)]})
    return "\n".join(f"{k} {_words(6, seed + k)}" for k in range(lines))


def _session(specs: list[tuple[int, list[tuple[str, int, bool]], int]], reset_after: int | None) -> SessionBuilder:
    b = SessionBuilder()
    for i, (dwords, calls, awords) in enumerate(specs):
        tools = [(kind, {"q": _words(2, i + k)}, _body(kind, lines, i + k), err) for k, (kind, lines, err) in enumerate(calls)]
        b.turn(_words(dwords, i) + f" (turn {i + 1})", tools, _words(awords, i + 1) or "ok")
        if reset_after is not None and i + 1 == reset_after:
            b.add(ResetWithHandoff(handoff="reset", last_turn_id=b.view.index.turns[-1].id, reason="prop"))
    return b


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    specs=st.lists(turn_specs, max_size=14),
    reset_after=st.none() | st.integers(1, 12),
    prof=profiles,
    system_words=st.integers(0, 300),
    tail=st.text(alphabet="abc <>/", max_size=300),
    directive_words=st.integers(1, 40),
)
def test_a_planned_request_fits_the_horizon_never_splits_a_turn_and_drops_no_result(
    specs: list[tuple[int, list[tuple[str, int, bool]], int]],
    reset_after: int | None,
    prof: CapacityProfile,
    system_words: int,
    tail: str,
    directive_words: int,
) -> None:
    b = _session(specs, reset_after)
    _check(b, prof, _words(system_words, 3), tail, _words(directive_words, 5))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    specs=st.lists(light_turns, min_size=4, max_size=26),
    reset_after=st.none() | st.integers(1, 26),
    fraction=st.sampled_from([0.0, 0.05, 0.1, 0.2, 0.35, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.2]),
    out=st.integers(0, 600),
    tpc=st.floats(0.2, 0.4),
    directive_words=st.integers(1, 30),
)
def test_tight_budgets_packet_the_oldest_turns_and_still_fit(
    specs: list[tuple[int, list[tuple[str, int, bool]], int]],
    reset_after: int | None,
    fraction: float,
    out: int,
    tpc: float,
    directive_words: int,
) -> None:
    """Budgets around what the session's cards cost: every packet level, and the rescue below them."""
    b = _session(specs, reset_after)
    directive = _words(directive_words, 5)
    probe = CapacityProfile(
        key=ProfileKey("local", "prop"), declared_window=10**6, instruction_horizon=Horizon(10**6, 0.9, 0.0),
        tokens_per_char=Ewma(tpc, 3), output_reserve=out,
    )
    first = b.view.plan(probe, directive, prefix_tokens=0, tail_tokens=0)
    cheap = sum(min(t.full_tokens, t.card_tokens) for t in first.turns if t.fidelity != Fidelity.BEHIND_RESET)
    horizon = out + first.budget.current_turn_reserve + int(cheap * fraction)
    prof = CapacityProfile(
        key=ProfileKey("local", "prop"), declared_window=horizon, instruction_horizon=Horizon(horizon, 0.9, 0.0),
        tokens_per_char=Ewma(tpc, 3), output_reserve=out,
    )
    _check(b, prof, "", "", directive)


def _check(b: SessionBuilder, prof: CapacityProfile, system: str, tail: str, directive: str) -> None:
    pre, tail_n = prefix_tokens(prof, system), text_tokens(prof, tail)
    try:
        p = b.view.plan(prof, directive, prefix_tokens=pre, tail_tokens=tail_n)
    except RequestTooLarge as exc:  # nothing to send: not even the directive fits beside the prefix
        event("refused")
        rescue = prof.instruction_horizon.tokens <= 0 or request_budget(prof) <= 0
        assert exc.needed == math.ceil(len(directive) * prof.tokens_per_char.value)
        assert exc.available < exc.needed and exc.available <= request_budget(prof, rescue=rescue) - pre - tail_n
        return
    if p.packet is not None and p.packet.needs_summary:  # the summariser writes at most its room
        words = max(1, int(p.packet.summary_tokens / prof.tokens_per_char.value) // 8)
        b.add(compaction_payload(b.view.index, p.packet.first_ordinal, p.packet.last_ordinal, "summary " * words,
                                 model=p.model))
        p = b.view.plan(prof, directive, prefix_tokens=pre, tail_tokens=tail_n)
    index = b.view.index
    event("rescue" if p.rescue else f"packet {p.packet.level}" if p.packet else "no packet")
    event(f"turns: {'none' if not index.turns else 'few' if len(index.turns) < 6 else 'many'}")

    # every turn is listed once; behind-reset turns are never planned nor covered
    assert [t.ordinal for t in p.turns] == list(range(1, len(index.turns) + 1))
    for t in p.turns:
        assert (t.fidelity == Fidelity.BEHIND_RESET) == (index.turn(t.ordinal).behind_reset or p.rescue)
        if t.fidelity in (Fidelity.BEHIND_RESET, Fidelity.PACKET):
            assert t.tokens == 0
    planned = [t for t in p.turns if t.fidelity != Fidelity.BEHIND_RESET]
    if p.packet is not None:
        assert p.packet.first_ordinal == planned[0].ordinal
        assert not index.turn(p.packet.first_ordinal).behind_reset
        for t in planned:
            inside = t.ordinal <= p.packet.last_ordinal
            assert (t.fidelity == Fidelity.PACKET or (t.fidelity == Fidelity.FULL and t.retrieved)) if inside else t.fidelity in (Fidelity.FULL, Fidelity.CARD)

    request = project(index, p, model="m", infos=b.view.infos, system=system, tail=tail)
    assert api_problems(request.messages) == []
    text = json.dumps(request.model_dump(mode="json"), ensure_ascii=False)
    if not p.rescue:
        assert p.budget.history <= max(p.budget.budget, 0)
        # the prompt never exceeds the horizon, nor with the output reserve the window (request_budget)
        assert request_tokens(prof, request) <= request_budget(prof) == p.budget.horizon - prof.output_reserve
        assert request_budget(prof) <= prof.instruction_horizon.tokens
        assert request_budget(prof) + prof.output_reserve <= prof.declared_window
    else:
        assert p.budget.history == 0 and p.packet is None

    # a turn is never split: a Full turn's calls and results are all there, any other turn's are not
    used = {part.id for m in request.messages for part in m.content if isinstance(part, ToolUseBlock)}
    answered = {part.tool_use_id for m in request.messages for part in m.content if isinstance(part, ToolResultBlock)}
    for t in p.turns:
        calls = {ex.tool_use_id for ex in index.turn(t.ordinal).exchanges}
        if t.fidelity == Fidelity.FULL:
            assert calls <= used and calls <= answered
            assert index.turn(t.ordinal).directive.text in text or index.turn(t.ordinal).directive.text == ""
        else:
            assert not (calls & used) and not (calls & answered)

    # no cut: every result of a planned turn is shown whole, digested with its id, on its card, or
    # named by the packet (a pointer or brief packet names how many and how to recall them)
    contents = {part.tool_use_id: part.content for m in request.messages for part in m.content
                if isinstance(part, ToolResultBlock)}
    shown_whole = {ex.result.evidence_id for t in planned for ex in index.turn(t.ordinal).exchanges
                   if ex.result is not None and ex.result.evidence_id and len(ex.result.content) <= VERBATIM_CHARS
                   and contents.get(ex.tool_use_id) == ex.result.content}
    if not p.rescue:
        for t in planned:
            for eid in index.turn(t.ordinal).evidence:
                in_packet = p.packet is not None and t.fidelity == Fidelity.PACKET
                if in_packet and p.packet is not None and p.packet.level in ("pointer", "brief"):
                    assert "tool result" in text and 'recall({\\"turn\\": N})' in text
                elif t.fidelity == Fidelity.FULL and eid in shown_whole:  # as short as a digest: as it was sent
                    continue
                else:
                    assert short_id(eid) in text, (t.fidelity, eid)
