"""AssemblerActor's delta (what the driver on Ray asks for, ``RayServices``): a step's request comes back as the
messages after those it shares with the request handed back before, and the driver's copy of that one makes
it whole again, byte for byte the request a full answer carries. A caller that does not hold the one named
(``have``) gets the whole request."""

from __future__ import annotations

from pathlib import Path

from vak_context.actors.assembler import AssemblerActor
from vak_context.agent.steps import Assembled, StepRequest
from vak_context.context.capacity.profile import CapacityProfile, Ewma, Horizon, ProfileKey
from vak_context.context.request.messages import ToolSpec
from vak_context.events.payloads import AssistantStep, Directive, TextBlock, ToolUseBlock
from vak_context.storage.ledger import LedgerStore

PROFILE = CapacityProfile(ProfileKey("local", "m"), 32_768, Horizon(16_000, 0.9, 0.0), Ewma(0.25, 3), 256)
STEP = StepRequest(model="m", system="You are careful.", tools=(ToolSpec(name="grep", description="Search."),),
                   tail="<turn_context>now</turn_context>\n", max_tokens=64)


def _whole(held: Assembled | None, assembled: Assembled) -> Assembled:
    """What the driver makes of an answer: the messages it holds for those the answer kept, then the rest."""
    if not assembled.kept:
        return assembled
    assert held is not None
    messages = (*held.request.messages[:assembled.kept], *assembled.request.messages)
    return Assembled(**{**vars(assembled), "request": assembled.request.model_copy(update={"messages": messages}),
                        "kept": 0})


async def test_a_step_crosses_only_its_new_messages_and_is_made_whole_again(tmp_path: Path) -> None:
    with LedgerStore(tmp_path / "ledger") as store:
        store.append("s", [Directive(text="where is beta?")])
        delta, full = AssemblerActor(str(store.root), store), AssemblerActor(str(store.root), store)
        first = await delta.assemble("s", PROFILE, STEP, delta=True)
        assert first.kept == 0 and first.sent is not None  # nothing held yet: the whole request
        held = first
        for k in range(3):
            store.append("s", [AssistantStep(blocks=(TextBlock(text=f"looking {k}"),
                                                     ToolUseBlock(id=f"c{k}", name="grep", input={"p": k})))])
            answer = await delta.assemble("s", PROFILE, STEP, delta=True, have=held.sent)
            whole = _whole(held, answer)
            reference = await full.assemble("s", PROFILE, STEP)
            assert answer.kept > 0 and len(answer.request.messages) < len(whole.request.messages)
            assert whole.request.model_dump_json() == reference.request.model_dump_json()
            held = whole
        # a caller that holds another request (a restarted driver, or one that never asked) gets it whole
        store.append("s", [AssistantStep(blocks=(TextBlock(text="done"),))])
        stranger = await delta.assemble("s", PROFILE, STEP, delta=True, have=None)
        assert stranger.kept == 0
        assert stranger.request.model_dump_json() == (await full.assemble("s", PROFILE, STEP)).request.model_dump_json()
