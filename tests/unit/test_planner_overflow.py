"""Over-length recovery (spec §4) and the rescue, around the planner: scripted llama.cpp replies.

The over-length cases run the retry the turn loop runs: a real ``TurnLoop`` over a ledger session of
14 turns, its AssemblerActor planning (with a summariser for the packets a smaller window needs), the
step policy (``vak_context.context.planner.policy``) answering each rejection. The provider is the real
OpenAI-compatible adapter over ``httpx.MockTransport`` answering with the bodies the local llama.cpp
server sends (``tests/fakes/provider_bodies/openai_compat.json``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.fakes.planning import prepare
from tests.fakes.provider_bodies.wire import body
from tests.fakes.sessions import ledger_session as _ledger_session
from vak_context.actors.assembler import AssemblerActor
from vak_context.actors.evidence import EvidenceActor
from vak_context.actors.local_services import InProcessServices
from vak_context.agent.loop import TurnConfig, TurnLoop, TurnReport
from vak_context.agent.summarise import Summariser, write_packet
from vak_context.context.capacity.profile import (
    CapacityProfile,
    Ewma,
    Horizon,
    ProfileKey,
    from_record,
    request_budget,
)
from vak_context.context.evidence.digest import RECALL_TOOL
from vak_context.context.history.packets import SUMMARISER_SYSTEM
from vak_context.context.planner.plan import Plan
from vak_context.context.planner.policy import GiveUp, Rejected, Retry, StepState, decide
from vak_context.context.planner.records import Fidelity
from vak_context.context.planner.view import SessionView
from vak_context.context.request.surface import Surface, ToolDecl
from vak_context.errors import ContextOverflow
from vak_context.events.envelope import Mapper
from vak_context.events.payloads import CapacityProfileRecord, PlanRecord, ResetWithHandoff
from vak_context.providers.base import RetryPolicy
from vak_context.providers.openai_compat import OpenAICompatProvider
from vak_context.storage.ledger import LedgerStore

DIRECTIVE = "And what about the copper price?"
def _profile(horizon: int, window: int, *, tpc: float = 0.25, out: int = 256) -> CapacityProfile:
    return CapacityProfile(
        key=ProfileKey("local", "smollm2"),
        declared_window=window,
        instruction_horizon=Horizon(horizon, 0.3, 0.0),
        tokens_per_char=Ewma(tpc, 1),
        output_reserve=out,
    )


class Server:
    """A scripted llama.cpp: main requests get ``main`` replies in order; summariser calls a short summary."""

    def __init__(self, *main: tuple[int, object]) -> None:
        self.main = list(main)
        self.sent: list[dict[str, object]] = []
        self.summaries = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        sent = json.loads(request.content)
        if sent["messages"][0]["content"] == SUMMARISER_SYSTEM:
            self.summaries += 1
            return httpx.Response(200, json=body("openai_compat", "llamacpp_chat_repeat"))
        self.sent.append(sent)
        status, payload = self.main.pop(0)
        return httpx.Response(status, json=payload)


def _overflow(prompt: int, n_ctx: int) -> dict[str, object]:
    reply = body("openai_compat", "llamacpp_overflow")
    reply["error"].update(
        n_prompt_tokens=prompt,
        n_ctx=n_ctx,
        message=f"request ({prompt} tokens) exceeds the available context size ({n_ctx} tokens), try increasing it",
    )
    return reply


@dataclass
class Turn:
    """What one turn of the loop came to, and what it wrote."""

    report: TurnReport
    profiles: list[CapacityProfile]  # the capacity_profile entries the turn wrote, in order
    plans: list[PlanRecord]  # the plan entries it wrote
    kinds: list[str]  # every entry the turn wrote, by kind
    activities: list[str]


async def _turn(server: Server, root: Path, prof: CapacityProfile, turns: int = 14) -> Turn:
    """One turn of the real loop after ``turns`` recorded turns: assembler, step policy, provider."""
    store, _view = _ledger_session(root, turns)
    before = len(store.entries("s"))
    async with httpx.AsyncClient(transport=httpx.MockTransport(server)) as client:
        provider = OpenAICompatProvider(client, base_url="http://127.0.0.1:9/v1", retry=RetryPolicy(attempts=1))
        summariser = Summariser(provider, "smollm2", window_tokens=8192)

        async def summarise(v: SessionView, p: Plan) -> list[str]:
            return await write_packet(store, "s", v, p, summariser)

        assembler = AssemblerActor(str(store.root), store, summarise=summarise)
        config = TurnConfig(model="smollm2", provider="openai-compat", system="You are an agent. " * 20,
                            surface=Surface.build([ToolDecl(RECALL_TOOL, always_loaded=True)]), max_steps=2,
                            max_tokens=64)
        loop = TurnLoop(InProcessServices(store, "s", assembler=assembler), provider, prof, config,
                        clock=lambda: 1_000.0)
        report = await loop.run(DIRECTIVE)
    mapper = Mapper()
    written = [(e.kind, mapper.payload_of(e)) for e in store.entries("s")[before:]]
    store.close()
    return Turn(
        report=report,
        profiles=[from_record(p) for _, p in written if isinstance(p, CapacityProfileRecord)],
        plans=[p for _, p in written if isinstance(p, PlanRecord)],
        kinds=[k for k, _ in written],
        activities=[getattr(p, "activity", "") for k, p in written if k == "activity"],
    )


def _budget(plan: PlanRecord) -> dict[str, Any]:
    out: dict[str, Any] = plan.plan["budget"]  # type: ignore[assignment]  # the plan's Budget, as JSON
    return out


async def test_an_overflow_sets_the_verified_window_replans_smaller_and_retries_once(tmp_path: Path) -> None:
    """The metadata said 100k, the server holds 2,048 tokens and counts more tokens than estimated: the
    profile the rejection implies is recorded, the step is planned again against it (its older turns in a
    packet) and sent once more, smaller, within the corrected budget."""
    prof = _profile(100_000, 100_000)
    server = Server((400, _overflow(9_000, 2_048)), (200, body("openai_compat", "llamacpp_chat_repeat")))
    turn = await _turn(server, tmp_path / "ledger", prof)
    report = turn.report
    assert report.outcome == "completed" and report.answer
    [step] = report.steps
    assert step.overflows == 1 and step.replanned
    fixed = turn.profiles[0]  # recorded before the retry was planned
    assert fixed.verified_window == 2_048  # the provider's stated limit, below the rejected 9,000
    assert fixed.tokens_per_char.value > prof.tokens_per_char.value  # the rejection measured real tokens
    assert any("verified_window: 2048" in s for s in fixed.provenance.signals)
    first, second = server.sent
    assert len(json.dumps(second)) < len(json.dumps(first)) / 2
    # Two plans: the first step's, then the retry's against the corrected profile (its budget the one budget).
    assert len(turn.plans) == 2 and _budget(turn.plans[0])["horizon"] == 100_000
    assert _budget(turn.plans[1])["horizon"] == 2_048 and turn.plans[1].plan["packet"] is not None
    assert step.budget_tokens == request_budget(fixed) == 2_048 - 256
    assert step.estimated_tokens <= step.budget_tokens


async def test_a_second_overflow_is_never_a_permanent_error(tmp_path: Path) -> None:
    """Rejected again after the retry: no exception, the turn has no answer and closes failed, and the
    corrected profile is recorded for the next turn to plan against."""
    prof = _profile(100_000, 100_000)
    server = Server((400, _overflow(9_000, 4_096)), (400, _overflow(3_900, 3_000)))
    turn = await _turn(server, tmp_path / "ledger", prof)  # no exception
    assert turn.report.outcome == "failed" and "twice" in turn.report.answer and turn.report.steps == []
    assert len(server.sent) == 2
    assert [p.verified_window for p in turn.profiles] == [4_096, 3_000]
    assert turn.report.profile.verified_window == 3_000  # the next turn plans for this
    assert turn.kinds[-1] == "turn_card"
    assert "turn.over_window" in turn.activities  # the public Card's reason (engine/results.py) reads it


def test_after_overflow_without_sizes_shrinks_below_what_was_sent() -> None:
    """The policy's answer to a rejection without sizes: a window below what was sent, then (rejected
    again, with the provider's count) a smaller one still, and no third send."""
    prof = _profile(100_000, 100_000)
    sent = 40_000  # characters: 10,000 tokens at 0.25
    first, state = decide(Rejected(prof, ContextOverflow("too long", prompt_tokens=None), sent, 5.0), StepState())
    assert isinstance(first, Retry)
    fixed = first.profile
    assert fixed.verified_window == 9_999 and fixed.tokens_per_char == prof.tokens_per_char
    assert fixed.provenance.updated_at == 5.0
    again, state = decide(Rejected(fixed, ContextOverflow("still", prompt_tokens=12_000), 30_000, 6.0), state)
    assert isinstance(again, GiveUp) and state.rejections == 2
    assert again.profile.verified_window is not None and again.profile.verified_window < 9_999


async def test_no_usable_horizon_writes_the_reset_with_handoff_and_sends_the_current_turn(tmp_path: Path) -> None:
    store, view = _ledger_session(tmp_path / "ledger", 6)
    dead = _profile(0, 8_192)  # the probe saw the model follow the instruction at no size

    async def summarise(v: SessionView, p: Plan) -> list[str]:
        raise AssertionError("a rescue never calls the summariser")

    prep = await prepare(view, dead, "Start over: what is the copper price?", ledger=store, session="s",
                         summarise=summarise, model="smollm2")
    assert len(prep.written) == 1
    reset = store.payload(prep.written[0])
    assert isinstance(reset, ResetWithHandoff) and "no usable horizon" in reset.reason
    assert reset.last_turn_id == view.index.turns[5].id and 'recall({"turn": N})' in reset.handoff
    assert reset.model == "local:smollm2"  # this model's rescue: the index marks no turn for every model
    assert not any(t.behind_reset for t in view.index.turns)
    assert [t.fidelity for t in prep.plan.turns] == [Fidelity.BEHIND_RESET] * 6
    # one message: the handoff (a pointer to turns 1-6), then the directive
    assert len(prep.request.messages) == 1
    handoff, directive = prep.request.messages[0].content
    assert handoff.text.startswith('<context_reset turns="1-6">') and reset.handoff in handoff.text  # type: ignore[union-attr]
    assert directive.text == "Start over: what is the copper price?"  # type: ignore[union-attr]
    # a second turn on the same profile writes no second reset
    again = await prepare(view, dead, "And now?", ledger=store, session="s", summarise=summarise, model="smollm2")
    assert again.written == [] and len(view.index.resets) == 1 and again.plan.reset is not None
    store.close()
    # behind the reset, never planned, but recall({turn}) still reaches a turn's full record
    evidence = EvidenceActor(str(tmp_path / "ledger"), LedgerStore(tmp_path / "ledger"))  # the folder's writer
    record = evidence.recall("s", {"turn": 2})
    assert not record["is_error"] and "What is the copper price trend this quarter? (turn 2)" in record["content"]
    assert evidence.ledger.store is not None
    evidence.ledger.store.close()


async def test_a_retry_that_cannot_fit_even_the_current_turn_is_not_sent(tmp_path: Path) -> None:
    """After an over-length reply whose stated limit (100 tokens) cannot hold even the current turn,
    the retry is not sent: the turn fails as too large, one request on the wire, the corrected profile
    recorded."""
    prof = _profile(100_000, 100_000)
    server = Server((400, _overflow(9_000, 100)))
    turn = await _turn(server, tmp_path / "ledger", prof)
    assert turn.report.outcome == "failed" and "cannot fit" in turn.report.answer and len(server.sent) == 1
    assert [p.verified_window for p in turn.profiles] == [100]
    assert "turn.request_too_large" in turn.activities and len(turn.plans) == 1
