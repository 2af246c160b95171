"""The stable prefix as a plan prices it follows the rate its request is counted at.

A server without a tokenizer endpoint is sized as chars × tokens_per_char (``CharRatioCounter``, the fallback
of every exact counter), a rate each receipt moves. The AssemblerActor once kept the prefix's tokens as first
counted: at 32k, once receipts had moved the rate from 0.25 to 0.31, every plan was about 200 tokens short of
the request it made, so the turn's second step outgrew the frozen plan at every turn (a mid-turn replan, the
prefix cache lost) and the request went out over its budget. Counted inexactly, the prefix is priced at each
plan's own rate; an exact counter's figure is kept (the server's count does not move with the rate).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from vak_context.actors.assembler import AssemblerActor
from vak_context.agent.steps import StepRequest
from vak_context.context.capacity.profile import CapacityProfile, Ewma, Horizon, ProfileKey, request_chars
from vak_context.context.request.messages import ChatRequest, ToolSpec
from vak_context.events.payloads import AssistantStep, Directive, TextBlock
from vak_context.providers.tokencount import CharRatioCounter
from vak_context.storage.ledger import LedgerStore

PROFILE = CapacityProfile(ProfileKey("local", "m"), 32_768, Horizon(16_000, 0.9, 0.0), Ewma(0.25, 3), 256)
TOOLS = tuple(ToolSpec(name=f"tool{i}", description="Looks things up. " * 20) for i in range(6))
STEP = StepRequest(model="m", system="You are careful. " * 30, tools=TOOLS, tail="<turn_context>now</turn_context>\n",
                   max_tokens=64)


class Exact:
    """A counter of the caller's own that says it counts as the server does (a fixed 1,000 for any prefix)."""

    exact = True

    def __init__(self, rate: list[float]) -> None:
        self.rate = rate

    async def count(self, request: ChatRequest) -> int:
        return 1000 if not request.messages or request.messages[-1].text == " " else \
            await CharRatioCounter(lambda: self.rate[0]).count(request)


def _turn(store: LedgerStore, k: int) -> None:
    store.append("s", [Directive(text=f"question {k}")])
    store.append("s", [AssistantStep(blocks=(TextBlock(text=f"answer {k} " * 40),))])


async def test_an_estimated_prefix_is_priced_at_each_plans_rate(tmp_path: Path) -> None:
    rate = [0.25]
    counter = CharRatioCounter(lambda: rate[0])
    with LedgerStore(tmp_path / "ledger") as store:
        assembler = AssemblerActor(str(store.root), store, count=counter.count)
        prefix_chars = request_chars(ChatRequest(model="m", system=STEP.system, tools=TOOLS))
        for k, value in enumerate((0.25, 0.31, 0.5, 0.2)):
            rate[0] = value
            _turn(store, k)
            profile = replace(PROFILE, tokens_per_char=Ewma(value, 3))
            assembled = await assembler.assemble("s", profile, STEP)
            plan = assembler.state("s", str(profile.key)).frozen.plan  # type: ignore[union-attr]
            assert abs(plan.budget.prefix - prefix_chars * value) <= 2, (value, plan.budget.prefix)
            b = plan.budget
            # the plan's own figure is the request's count, to the rounding of its parts
            assert abs(b.prefix + b.tail + b.history + b.current - assembled.estimated_tokens) <= 8
        assert assembled.prefix_tokens is None and assembled.prefix_sized  # nothing kept to hand a plan made ahead


async def test_an_exact_prefix_count_is_kept(tmp_path: Path) -> None:
    rate = [0.25]
    exact = Exact(rate)
    with LedgerStore(tmp_path / "ledger") as store:
        assembler = AssemblerActor(str(store.root), store, count=exact.count)
        for k, value in enumerate((0.25, 0.5)):
            rate[0] = value
            _turn(store, k)
            assembled = await assembler.assemble("s", replace(PROFILE, tokens_per_char=Ewma(value, 3)), STEP)
            assert assembled.prefix_tokens == 1000 and assembled.prefix_sized
            plan = assembler.state("s", str(PROFILE.key)).frozen.plan  # type: ignore[union-attr]
            assert plan.budget.prefix == 1000
