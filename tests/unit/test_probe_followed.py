"""What counts as a followed instruction (issue 9, item 15): the content of the reply, not its wrapping.

"Followed" means probe_ack was called with the rung's nonce inside its arguments, whether the call
came as native ``tool_calls``, ``<tool_call>``, a ```` ```tool_call ```` or ```` ```json ```` fence, or a
bare JSON object. A wrong or missing nonce is not followed. A reply cut by max_tokens inside a call
is continued, not failed.
"""

from __future__ import annotations

import pytest

from tests.fakes.probe import run_probe
from tests.fakes.threshold import ThresholdModel
from vak_context.agent.probe import ProbeSettings
from vak_context.context.capacity.ladder import SampleOutcome

CALL = '{"name": "probe_ack", "arguments": {"ack": "{nonce}"}}'
ONE_RUNG = ProbeSettings(max_sizes=1, cache_rung=False, protocol="inline_fence")


@pytest.mark.parametrize("reply", [
    CALL,  # the bare object Qwen2.5-Coder wrote at 7,332 tokens
    f"```json\n{CALL}\n```",
    f"```tool_call\n{CALL}\n```",
    f"<tool_call>\n{CALL}\n</tool_call>",
    'Sure.\n```json\n{\n  "name": "probe_ack",\n  "arguments": {\n    "ack": "{nonce}"\n  }\n}\n```',
])
async def test_the_right_call_with_the_nonce_is_followed_in_every_wrapping(reply: str) -> None:
    """Each wrapping of probe_ack(ack=<nonce>) makes every sample followed and the rung pass."""
    rung = (await run_probe(ThresholdModel(10**9, reply=reply), ONE_RUNG)).ladder.outcomes[0]
    assert rung.instructions and all(s.followed for s in rung.instructions)
    assert rung.passed


async def test_native_tool_calls_with_the_nonce_are_followed() -> None:
    """A native tool_calls answer carrying the nonce is followed, on the native channel."""
    report = await run_probe(ThresholdModel(10**9), ProbeSettings(max_sizes=1, cache_rung=False))
    rung = report.ladder.outcomes[0]
    assert all(s.followed and s.channel == "native" for s in rung.instructions)


@pytest.mark.parametrize("reply", [
    '```tool_call\n{"name": "probe_ack", "ack": "{nonce}"}\n```',  # the nonce outside arguments
    '{"name": "probe_ack", "arguments": {}}',  # no nonce
    '{"name": "search_docs", "arguments": {"ack": "{nonce}"}}',  # the wrong tool
    "I will call probe_ack with ack={nonce}.",  # prose
])
async def test_a_call_without_the_nonce_in_its_arguments_is_not_followed(reply: str) -> None:
    """The nonce outside arguments, no nonce, the wrong tool, or prose: no sample followed."""
    rung = (await run_probe(ThresholdModel(10**9, reply=reply), ONE_RUNG)).ladder.outcomes[0]
    assert rung.instructions and not any(s.followed for s in rung.instructions)
    assert not rung.passed


async def test_a_wrong_nonce_is_not_followed() -> None:
    """The right tool with another nonce, in arguments, is not followed: the model copied, not obeyed."""
    rung = (await run_probe(ThresholdModel(10**9, wrong_nonce=True), ONE_RUNG)).ladder.outcomes[0]
    assert [s.followed for s in rung.instructions] == [False, False, False]  # settled at a lead of three


async def test_a_reply_cut_inside_the_call_is_continued_and_then_judged() -> None:
    """A reply cut by max_tokens after ``"arguments": {"ack`` is continued once (the reply so far sent
    back as the assistant's turn) and then followed; the sample records the continuation."""
    model = ThresholdModel(10**9, reply=f"```json\n{CALL}\n```", cut_at=len('```json\n{"name": "probe_ack", "arguments": {"ack'))
    rung = (await run_probe(model, ONE_RUNG)).ladder.outcomes[0]
    assert model.continuations == len(rung.instructions) == 3
    assert all(s.followed and s.extended == 1 for s in rung.instructions)


async def test_the_sample_record_keeps_every_call_with_its_arguments() -> None:
    """The activity's sample shows each call's name, arguments, wrapping and the nonce asked for."""
    report = await run_probe(ThresholdModel(10**9, reply=CALL), ONE_RUNG)
    sample = report.activity().detail["rungs"][0]["samples"][0]
    assert sample["calls"] == [{"name": "probe_ack", "arguments": {"ack": sample["nonce"]},
                                "wrapping": "bare_json", "complete": True}]
    assert sample["followed"] is True


def test_a_control_that_calls_anything_does_not_abstain() -> None:
    """A control abstains only when it called no tool at all, in any wrapping."""
    from vak_context.context.request.toolcalls import parse_tool_calls

    calls = parse_tool_calls('{"name": "search_docs", "arguments": {"query": "x"}}')
    assert not SampleOutcome("control", 10, 10, calls=calls).abstained
    assert SampleOutcome("control", 10, 10, calls=parse_tool_calls("It was about the audit log.")).abstained
