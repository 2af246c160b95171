"""The stable prefix and moving tail: digest, tail block, tail placement and cache breakpoints."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vak_context.context.request.assemble import (
    Tail,
    attach_tail,
    cache_breakpoints,
    prefix_change,
    prefix_digest,
    render_tail,
    system_prompt,
)
from vak_context.context.request.messages import Message, ToolSpec
from vak_context.errors import InvalidInput
from vak_context.events.blocks import TextBlock, ToolResultBlock, ToolUseBlock

TOOLS = (ToolSpec(name="recall", description="Recall."), ToolSpec(name="grep", description="Search."))


def test_prefix_digest_is_stable_and_sensitive() -> None:
    """Equal system and tools give one digest; any byte of either changes it, and the change is named."""
    system = system_prompt("More tools:\n- web — Web.")
    d = prefix_digest(system, TOOLS)
    assert d == prefix_digest(system_prompt("More tools:\n- web — Web."), tuple(TOOLS))
    assert d != prefix_digest(system + " ", TOOLS)
    assert d != prefix_digest(system, TOOLS[::-1])
    assert d != prefix_digest(system, (TOOLS[0], ToolSpec(name="grep", description="Search!")))
    assert prefix_change((system, TOOLS), (system, TOOLS[::-1])) == "tool order changed"
    assert "added ['x']" in prefix_change((system, TOOLS), (system, (*TOOLS, ToolSpec(name="x", description=""))))
    assert prefix_change((system, TOOLS), (system + "!", TOOLS)).startswith(f"system prompt differs from char {len(system)}")


def test_system_prompt_has_no_per_turn_material() -> None:
    """The system prompt is the static layers only: two builds are byte-identical, no clock in it."""
    assert system_prompt("cat") == system_prompt("cat")
    assert "turn_context" not in system_prompt("cat")


def test_tail_renders_instant_local_time_and_thread() -> None:
    """The tail carries the UTC instant, local time and zone, and the thread with paused directives."""
    tail = render_tail(Tail(now=1_764_504_000.0, timezone="Europe/Paris", intent="find the parser",
                            thread=("fix the lexer",), paused=("write docs",), work_contract="tests pass"))
    assert "<turn_context>UTC 2025-11-30T12:00:00Z; local 2025-11-30 13:00 Europe/Paris (UTC+0100)</turn_context>" in tail
    assert "<intent>find the parser</intent>" in tail
    assert "- fix the lexer\n- (earlier, now paused) write docs" in tail
    assert "<work_contract>tests pass</work_contract>" in tail
    with pytest.raises(InvalidInput, match="IANA"):
        render_tail(Tail(now=0.0, timezone="Mars/Olympus"))


def _turn() -> list[Message]:
    return [
        Message.user("old question"),
        Message.assistant("old answer"),
        Message(role="user", content=(ToolResultBlock(tool_use_id="t0", content="r"), TextBlock(text="new directive"))),
        Message(role="assistant", content=(ToolUseBlock(id="t1", name="grep", input={"pattern": "x"}),)),
        Message(role="user", content=(ToolResultBlock(tool_use_id="t1", content="hit"),)),
    ]


def test_attach_tail_goes_into_the_directive_not_the_last_message() -> None:
    """The tail lands after the directive's leading tool results and before its words; nothing else moves."""
    msgs = _turn()
    out = attach_tail(msgs, "<tail/>", 2)
    assert [type(p) for p in out[2].content] == [ToolResultBlock, TextBlock, TextBlock]
    assert out[2].content[1] == TextBlock(text="<tail/>") and out[2].content[2] == TextBlock(text="new directive")
    assert out[:2] == tuple(msgs[:2]) and out[3:] == tuple(msgs[3:])
    assert attach_tail(msgs, "  ", 2) == tuple(msgs)
    for bad in (5, -1, 1):
        with pytest.raises(InvalidInput):
            attach_tail(msgs, "<tail/>", bad)


@settings(max_examples=100, deadline=None)
@given(steps=st.integers(min_value=0, max_value=6))
def test_steps_append_and_never_rewrite_earlier_messages(steps: int) -> None:
    """Property: each later step's request starts with the previous step's request, byte for byte,
    because the tail is attached to the directive index, whatever comes after it."""
    base = _turn()[:3]
    previous: tuple[Message, ...] | None = None
    for k in range(steps + 1):
        msgs = list(base)
        for i in range(k):
            msgs.append(Message(role="assistant", content=(ToolUseBlock(id=f"s{i}", name="grep"),)))
            msgs.append(Message(role="user", content=(ToolResultBlock(tool_use_id=f"s{i}", content=str(i)),)))
        out = attach_tail(msgs, "<tail/>", 2)
        if previous is not None:
            assert out[: len(previous)] == previous
        previous = out


def test_cache_breakpoints() -> None:
    """Breakpoints sit on the message before the directive and on the last message, prefix flagged."""
    hints = cache_breakpoints(5, 2, "s1")
    assert hints.breakpoints == (1, 4) and hints.prefix and hints.session_key == "s1"
    assert cache_breakpoints(1, 0, None).breakpoints == (0,)
    assert cache_breakpoints(0, None, None).breakpoints == ()
