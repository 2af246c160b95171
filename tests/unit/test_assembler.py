"""AssemblerActor: the plan is frozen within a turn, and the stable prefix is measured by the counter."""

from __future__ import annotations

from pathlib import Path

from vak_context.actors.assembler import AssemblerActor
from vak_context.agent.steps import StepRequest
from vak_context.context.capacity.profile import CapacityProfile, Ewma, Horizon, ProfileKey, request_chars
from vak_context.context.request.messages import ChatRequest, ToolSpec
from vak_context.events.envelope import Mapper
from vak_context.events.payloads import AssistantStep, Directive, TextBlock
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
