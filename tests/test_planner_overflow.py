"""Over-length recovery (spec §4) and the rescue, around the planner: scripted llama.cpp replies.

The provider is the real OpenAI-compatible adapter over ``httpx.MockTransport`` answering with the
bodies the local llama.cpp server sends (``tests/provider_bodies/openai_compat.json``).
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
from pydantic import BaseModel

from tests.provider_bodies.wire import body
from tests.test_planner import TOPICS, body_for
from vak_context.actors.evidence import EvidenceActor
from vak_context.agent.request import (
    Completed,
    Prepared,
    SessionView,
    after_overflow,
    complete_planned,
    prepare,
)
from vak_context.agent.summarise import Summariser, write_packet
from vak_context.context.capacity.profile import CapacityProfile, Ewma, Horizon, ProfileKey
from vak_context.context.history.packets import SUMMARISER_SYSTEM
from vak_context.context.history.render import api_problems
from vak_context.context.planner.plan import Plan
from vak_context.context.planner.records import Fidelity
from vak_context.context.request.assemble import request_tokens
from vak_context.context.request.messages import ChatRequest
from vak_context.errors import ContextOverflow
from vak_context.events.payloads import ResetWithHandoff
from vak_context.providers.base import RetryPolicy
from vak_context.providers.openai_compat import OpenAICompatProvider
from vak_context.storage.ledger import LedgerStore


def _profile(horizon: int, window: int, *, tpc: float = 0.25, out: int = 256) -> CapacityProfile:
    return CapacityProfile(
        key=ProfileKey("local", "smollm2"),
        declared_window=window,
        instruction_horizon=Horizon(horizon, 0.3, 0.0),
        tokens_per_char=Ewma(tpc, 1),
        output_reserve=out,
    )


def _ledger_session(root: Path, turns: int) -> tuple[LedgerStore, SessionView]:
    """A session written to a real ledger, turn by turn, with turn cards."""
    from vak_context.context.history.turncard import build_card
    from vak_context.events.payloads import (
        AssistantStep,
        Directive,
        EvidenceBody,
        TextBlock,
        ToolResult,
        ToolUseBlock,
    )

    store = LedgerStore(root)
    view = SessionView()

    def put(payload: BaseModel, blob: bytes | None = None) -> str:
        eid = store.append("s", [payload], blobs=[blob])[0]
        view.add(store.get(eid))
        return eid

    for i in range(turns):
        directive, tool, args = TOPICS[i % len(TOPICS)]
        put(Directive(text=f"{directive} (turn {i + 1})"))
        call = f"call_{i}"
        put(AssistantStep(blocks=(ToolUseBlock(id=call, name=tool, input=dict(args)),)))
        text = body_for(tool, i)
        ev = put(EvidenceBody(tool_use_id=call, tool_name=tool, chars=len(text), bytes=len(text)), text.encode())
        put(ToolResult(tool_use_id=call, tool_name=tool, content=text, evidence_id=ev))
        put(AssistantStep(blocks=(TextBlock(text="Here is what I found, in a few words. " * 6),)))
        turn = view.index.current
        assert turn is not None
        put(build_card(view.index, turn, view.turn_infos(turn)))
    return store, view


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


async def _run(server: Server, root: Path, prof: CapacityProfile, turns: int = 14) -> tuple[Completed, SessionView]:
    store, view = _ledger_session(root, turns)
    async with httpx.AsyncClient(transport=httpx.MockTransport(server)) as client:
        provider = OpenAICompatProvider(client, base_url="http://127.0.0.1:9/v1", retry=RetryPolicy(attempts=1))
        summariser = Summariser(provider, "smollm2", window_tokens=8192)

        async def summarise(v: SessionView, p: Plan) -> list[str]:
            return await write_packet(store, "s", v, p, summariser)

        async def build(profile: CapacityProfile) -> tuple[Plan, ChatRequest]:
            prep: Prepared = await prepare(
                view, profile, "And what about the copper price?", ledger=store, session="s", summarise=summarise,
                model="smollm2", system="You are an agent. " * 20,
            )
            return prep.plan, prep.request

        done = await complete_planned(provider, prof, build, clock=lambda: 1_000.0)
    store.close()
    return done, view


async def test_an_overflow_sets_the_verified_window_replans_smaller_and_retries_once(tmp_path: Path) -> None:
    # The metadata said 100k, the server holds 2,048 tokens, and it counts more tokens than we estimated.
    prof = _profile(100_000, 100_000)
    server = Server((400, _overflow(9_000, 2_048)), (200, body("openai_compat", "llamacpp_chat_repeat")))
    done, _view = await _run(server, tmp_path / "ledger", prof)
    assert done.result is not None and done.result.text
    assert len(done.overflows) == 1 and done.overflows[0].prompt_tokens == 9_000
    fixed = done.profile
    assert fixed.verified_window == 2_048  # the provider's stated limit, below the rejected 9,000
    assert fixed.tokens_per_char.value > prof.tokens_per_char.value  # the rejection measured real tokens
    assert any("verified_window: 2048" in s for s in fixed.provenance.signals)
    first, second = server.sent
    assert len(json.dumps(second)) < len(json.dumps(first))
    request = done.request
    assert request_tokens(fixed, request) + fixed.output_reserve <= 2_048
    assert api_problems(request.messages) == []
    assert done.plan.budget.horizon == 2_048


async def test_a_second_overflow_is_never_a_permanent_error(tmp_path: Path) -> None:
    prof = _profile(100_000, 100_000)
    server = Server((400, _overflow(9_000, 4_096)), (400, _overflow(3_900, 3_000)))
    done, _view = await _run(server, tmp_path / "ledger", prof)  # no exception
    assert done.result is None and len(done.overflows) == 2
    assert done.profile.verified_window == 3_000  # the next turn plans for this


def test_after_overflow_without_sizes_shrinks_below_what_was_sent() -> None:
    prof = _profile(100_000, 100_000)
    sent = 40_000  # characters: 10,000 tokens at 0.25
    fixed = after_overflow(prof, ContextOverflow("too long", prompt_tokens=None), request_chars_sent=sent, now=5.0)
    assert fixed.verified_window == 9_999 and fixed.tokens_per_char == prof.tokens_per_char
    assert fixed.provenance.updated_at == 5.0
    again = after_overflow(fixed, ContextOverflow("still", prompt_tokens=12_000), request_chars_sent=30_000, now=6.0)
    assert again.verified_window is not None and again.verified_window < fixed.verified_window


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
    the retry is not sent: no result, the corrected profile, one request on the wire."""
    prof = _profile(100_000, 100_000)
    server = Server((400, _overflow(9_000, 100)))
    done, _view = await _run(server, tmp_path / "ledger", prof)
    assert done.result is None and len(done.overflows) == 1 and len(server.sent) == 1
    assert done.profile.verified_window == 100
