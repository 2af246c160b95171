"""AssemblerActor: the plan is frozen within a turn (and comes back from its plan entry after a restart),
the stable prefix is measured by the counter, and a branched session is folded from its new head."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from tests.fakes.planning import prepare
from vak_context.actors.assembler import AssemblerActor
from vak_context.agent.steps import StepRequest
from vak_context.context.capacity.profile import CapacityProfile, Ewma, Horizon, ProfileKey, request_chars
from vak_context.context.history.turncard import build_card
from vak_context.context.planner.plan import Plan
from vak_context.context.planner.view import SessionView
from vak_context.context.request.messages import ChatRequest, ToolSpec
from vak_context.events.envelope import Mapper
from vak_context.events.payloads import (
    AssistantStep,
    Directive,
    EvidenceBody,
    TextBlock,
    ToolResult,
    ToolUseBlock,
)
from vak_context.storage.ledger import LedgerStore

PROFILE = CapacityProfile(ProfileKey("local", "m"), 32_768, Horizon(16_000, 0.9, 0.0), Ewma(0.25, 3), 256)
STEP = StepRequest(model="m", system="You are careful.", tools=(ToolSpec(name="grep", description="Search."),),
                   tail="<turn_context>now</turn_context>\n", max_tokens=64)


async def test_the_prefix_is_counted_once_and_planned_with(tmp_path: Path) -> None:
    """With a counter, the plan's prefix_tokens is the counted size of system + tools (counted once per
    prefix digest, not per step); later steps keep the frozen plan."""
    counted: list[ChatRequest] = []

    async def count(request: ChatRequest) -> int:
        counted.append(request)
        return request_chars(request) // 2  # a tokenizer twice as dense as the 0.25 prior

    with LedgerStore(tmp_path / "ledger") as store:
        store.append("s", [Directive(text="find the parser")])
        assembler = AssemblerActor(str(store.root), store, count=count)
        first = await assembler.assemble("s", PROFILE, STEP)
        store.append("s", [AssistantStep(blocks=(TextBlock(text="looking"),))])
        second = await assembler.assemble("s", PROFILE, STEP)
        plans = [Mapper().payload_of(e) for e in store.entries("s") if e.kind == "plan"]
    prefix_probes = [r for r in counted if not r.messages or r.messages[0].text == " "]
    assert len(prefix_probes) == 1
    assert plans[0].inputs["prefix_tokens"] == request_chars(prefix_probes[0]) // 2
    assert first.replanned and not second.replanned and len(plans) == 1
    assert second.request.messages[: len(first.request.messages)] == first.request.messages


async def test_without_a_counter_the_prefix_is_measured_by_one_usage_only_request(tmp_path: Path) -> None:
    """A hosted provider has no tokenizer endpoint: the prefix is measured once per digest with a usage-only
    request (max_tokens 1) through ``UsageCounter``, and the plan uses the billed figure; steps themselves
    are not sent for counting."""
    import httpx

    from vak_context.providers.base import RetryPolicy
    from vak_context.providers.openai_compat import OpenAICompatProvider
    from vak_context.providers.tokencount import UsageCounter

    sent: list[dict[str, object]] = []

    def handle(request: httpx.Request) -> httpx.Response:
        import json

        sent.append(json.loads(request.content))
        return httpx.Response(200, json={"choices": [{"index": 0, "message": {"role": "assistant", "content": "."},
                                                      "finish_reason": "length"}],
                                         "usage": {"prompt_tokens": 777, "completion_tokens": 1}})

    async with httpx.AsyncClient(transport=httpx.MockTransport(handle)) as client:
        counter = UsageCounter(OpenAICompatProvider(client, base_url="http://127.0.0.1:9/v1",
                                                    retry=RetryPolicy(attempts=1)))
        with LedgerStore(tmp_path / "ledger") as store:
            store.append("s", [Directive(text="find the parser")])
            assembler = AssemblerActor(str(store.root), store, count_prefix=counter.count)
            await assembler.assemble("s", PROFILE, STEP)
            store.append("s", [AssistantStep(blocks=(TextBlock(text="looking"),))])
            await assembler.assemble("s", PROFILE, STEP)
            plans = [Mapper().payload_of(e) for e in store.entries("s") if e.kind == "plan"]
    assert len(sent) == 1 and sent[0]["max_tokens"] == 1 and counter.calls == 1
    assert plans[0].inputs["prefix_tokens"] == 777


# ---------------------------------------------------------------- restart mid-turn, and a branch

RESTART = CapacityProfile(ProfileKey("local", "m"), 8_192, Horizon(4_000, 0.9, 0.0), Ewma(0.25, 3), 256)
READ = StepRequest(model="m", system="You are careful.", tools=(ToolSpec(name="read_file", description="Read."),),
                   tail="<turn_context>now</turn_context>\n", max_tokens=64)


def _put(store: LedgerStore, payload: BaseModel, blob: bytes | None = None) -> str:
    return store.append("s", [payload], blobs=[blob])[0]


def _read_step(store: LedgerStore, k: int, lines: int) -> None:
    """One step of a turn as the loop writes it: the call, the result's evidence body, the result."""
    body = "\n".join(f"{j:4d}  line {j} read at step {k}" for j in range(lines))
    call = f"call_{k}"
    _put(store, AssistantStep(blocks=(ToolUseBlock(id=call, name="read_file", input={"path": f"f{k}.py"}),)))
    ev = _put(store, EvidenceBody(tool_use_id=call, tool_name="read_file", chars=len(body), bytes=len(body)),
              body.encode())
    _put(store, ToolResult(tool_use_id=call, tool_name="read_file", content=body, evidence_id=ev))


def _history(store: LedgerStore, turns: int) -> None:
    """Closed turns with their cards (built from the chain, as the EvidenceActor does)."""
    for i in range(turns):
        _put(store, Directive(text=f"Read module {i} and explain it."))
        _read_step(store, 100 + i, 30)
        _put(store, AssistantStep(blocks=(TextBlock(text="It keeps the ledger's segments in order. " * 4),)))
        view = SessionView.build(store.chain_to_root(store.head("s") or ""))
        turn = view.index.current
        assert turn is not None
        _put(store, build_card(view.index, turn, view.turn_infos(turn)))


async def test_an_assembler_restarted_mid_turn_sends_the_request_the_old_one_would_have(tmp_path: Path) -> None:
    """Four steps through one assembler (the plan made at the first and kept), then the fifth step's
    request from it and from a fresh assembler over the reopened ledger: byte for byte the same, with
    no new plan. Planning afresh at that step (what a restart did while the frozen plan lived only in
    the actor's memory) gives a different request: the grown turn leaves the history less room."""
    root = tmp_path / "ledger"
    with LedgerStore(root) as store:
        _history(store, 8)
        _put(store, Directive(text="Now compare all of them."))
        original = AssemblerActor(str(root), store)
        first = await original.assemble("s", RESTART, READ)
        for k in range(4):
            _read_step(store, k, 40)
            if k < 3:
                kept = await original.assemble("s", RESTART, READ)
                assert not kept.replanned and kept.plan_digest == first.plan_digest
        would = await original.assemble("s", RESTART, READ)
        entries = len(store.entries("s"))
        view = SessionView.build(store.chain_to_root(store.head("s") or ""))
    del original
    with LedgerStore(root) as store:
        restarted = await AssemblerActor(str(root), store).assemble("s", RESTART, READ)
        assert len(store.entries("s")) == entries  # nothing written: the frozen plan came from its entry
        turn = view.index.current
        assert turn is not None

        async def no_summary(_view: SessionView, _plan: Plan) -> list[str]:
            raise AssertionError("this history needs no summary")

        replanned = await prepare(view, RESTART, "", ledger=store, session="s", summarise=no_summary, model=READ.model,
                                  system=READ.system, tools=READ.tools, tail=READ.tail, current=turn.ordinal,
                                  max_tokens=READ.max_tokens)
    assert first.replanned and not would.replanned and not restarted.replanned and restarted.plan_id is None
    assert restarted.plan_digest == would.plan_digest == first.plan_digest
    assert restarted.request.model_dump_json() == would.request.model_dump_json()
    assert restarted.estimated_tokens == would.estimated_tokens <= restarted.budget_tokens
    assert replanned.request.messages != would.request.messages  # a re-plan here would have sent other bytes
    assert replanned.plan.fidelities.count("F") < would.fidelity["full"]


async def test_a_branched_session_is_folded_from_its_new_head(tmp_path: Path) -> None:
    """An entry appended on another parent (the session branched): the assembler's view follows the
    chain to the new head and rebuilds, so the request carries the branch's step, not the old one."""
    with LedgerStore(tmp_path / "ledger") as store:
        _history(store, 2)
        fork = _put(store, Directive(text="Look at the parser."))
        _put(store, AssistantStep(blocks=(TextBlock(text="the road not taken"),)))
        assembler = AssemblerActor(str(store.root), store)
        before = await assembler.assemble("s", RESTART, READ)
        store.append("s", [AssistantStep(blocks=(TextBlock(text="the branch taken"),))], parent=fork)
        after = await assembler.assemble("s", RESTART, READ)
    texts = [m.text for m in after.request.messages]
    assert any("the road not taken" in t for t in (m.text for m in before.request.messages))
    assert any("the branch taken" in t for t in texts) and not any("the road not taken" in t for t in texts)
