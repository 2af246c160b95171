"""A request crosses to the driver on Ray as what is new in it: the prefix it shares with the request the
driver holds, then each later message either one the driver holds (the same object there, so its encoding
and sizes, kept by identity, are reused) or one carried (``Assembled.reused``, ``Assembled.whole``).

At a turn's first step the plan regroups the history (a run of cards becomes new messages, turns move from
Full to card), so the shared prefix is short while most messages are the same objects as before: at 100
turns of the embed bench 30-78 of ~220 messages were the prefix, and all but 3-26 crossed again.
"""

from __future__ import annotations

import random
from pathlib import Path

from vak_context.actors.assembler import AssemblerActor
from vak_context.agent.steps import FRESH, Assembled, StepRequest
from vak_context.agent.steps import layout as _layout
from vak_context.context.capacity.profile import CapacityProfile, Ewma, Horizon, ProfileKey
from vak_context.context.request.messages import ChatRequest, Message, ToolSpec
from vak_context.events.payloads import AssistantStep, Directive, TextBlock
from vak_context.storage.ledger import LedgerStore

PROFILE = CapacityProfile(ProfileKey("local", "m"), 4_096, Horizon(2_000, 0.9, 0.0), Ewma(0.25, 3), 256)
STEP = StepRequest(model="m", system="You are careful.", tools=(ToolSpec(name="grep", description="Search."),),
                   tail="<turn_context>now</turn_context>\n", max_tokens=64)


def _answer(before: tuple[Message, ...], messages: tuple[Message, ...]) -> Assembled:
    kept, reused, fresh = _layout(before, messages)
    request = ChatRequest(model="m", messages=fresh)
    return Assembled(request=request, plan_digest="", plan_id=None, replanned=False, fidelity={}, prefix_digest="",
                     estimated_tokens=0, budget_tokens=0, kept=kept, reused=reused)


def test_any_request_is_made_whole_from_what_the_driver_holds_and_what_crossed() -> None:
    rng = random.Random(7)
    for trial in range(400):
        before = tuple(Message.user(f"m{trial}.{i}") for i in range(rng.randrange(0, 30)))
        messages: list[Message] = []
        for i in range(rng.randrange(0, 40)):
            pick = rng.random()
            if before and pick < 0.5:
                messages.append(rng.choice(before))  # moved, the same object
            elif i < len(before) and pick < 0.7:
                messages.append(Message.user(before[i].text))  # equal to the one at its place, made again
            else:
                messages.append(Message.user(f"new {trial}.{i}"))
        if rng.random() < 0.3:  # a shared prefix
            messages[:0] = before[: rng.randrange(0, len(before) + 1)]
        answer = _answer(before, tuple(messages))
        whole = answer.whole(before)
        assert whole.request.messages == tuple(messages) and not whole.kept and not whole.reused
        held = {id(m) for m in before}
        crossed = answer.request.messages
        assert not any(id(m) in held for m in crossed)  # nothing the driver holds crosses again
        assert all(i == FRESH or 0 <= i < len(before) for i in answer.reused)
        assert len(crossed) == (answer.reused.count(FRESH) if answer.reused else len(messages) - answer.kept)
        # the reused are the driver's own objects
        for j, i in enumerate(answer.reused):
            if i != FRESH:
                assert whole.request.messages[answer.kept + j] is before[i]


def test_nothing_shared_is_the_whole_request() -> None:
    before = (Message.user("a"),)
    answer = _answer(before, (Message.user("b"), Message.user("c")))
    assert answer.kept == 0 and answer.reused == () and len(answer.request.messages) == 2
    assert answer.whole(before) is answer


async def test_a_regrouped_plan_crosses_only_its_new_messages(tmp_path: Path) -> None:
    """Turn after turn on a small profile (turns demoted to cards, runs of cards regrouped), each answer made
    whole is byte for byte the request a full answer carries."""
    with LedgerStore(tmp_path / "ledger") as store:
        delta, full = AssemblerActor(str(store.root), store), AssemblerActor(str(store.root), store)
        held: Assembled | None = None
        reused_seen = 0
        for k in range(24):
            store.append("s", [Directive(text=f"question {k}: where is item {k}?")])
            answer = await delta.assemble("s", PROFILE, STEP, delta=True, have=held.sent if held else None)
            whole = answer.whole(held.request.messages) if held is not None else answer
            reference = await full.assemble("s", PROFILE, STEP)
            assert whole.request.model_dump_json() == reference.request.model_dump_json()
            reused_seen += sum(1 for i in answer.reused if i != FRESH)
            held = whole
            store.append("s", [AssistantStep(blocks=(TextBlock(text=f"item {k} is here. " * 30),))])
        assert reused_seen > 0  # the plan moved messages the driver held


def test_a_step_equal_to_the_last_holds_its_prompt_and_specs() -> None:
    """``interned``: a step whose prompt and tool specs equal the last one's (new objects, as each call on Ray
    unpickles them) holds the last one's objects, so what is kept by their identity (the prefix digest, a spec's
    chars and JSON) is kept; a step whose specs or prompt differ is left as it is."""
    import pickle

    from vak_context.agent.steps import interned

    last = StepRequest(model="m", system="You are careful.", tools=(ToolSpec(name="grep", description="Search."),),
                       tail="t")
    again = pickle.loads(pickle.dumps(last))
    assert again == last and again.tools[0] is not last.tools[0]
    kept = interned(again, last)
    assert kept == again and kept.tools is last.tools and kept.system is last.system
    other = StepRequest(model="m", system="You are careful.", tools=(ToolSpec(name="grep", description="Find."),),
                        tail="t")
    assert interned(other, last) is other and interned(again, None) is again
    assert interned(pickle.loads(pickle.dumps(StepRequest(model="m", system="Other.", tools=last.tools, tail="t"))),
                    last).system == "Other."
