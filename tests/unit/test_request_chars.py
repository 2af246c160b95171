"""``request_chars`` counts a request's system, message parts and tool schemas; what it keeps between requests
(each message's and each tool spec's count, by identity: issue 37) never changes the count."""

from __future__ import annotations

from vak_context.context.capacity import profile as capacity
from vak_context.context.capacity.profile import request_chars
from vak_context.context.request.messages import ChatRequest, Message, ToolSpec
from vak_context.events.blocks import ToolResultBlock, ToolUseBlock

SCHEMA = {"type": "object", "properties": {"path": {"type": "string", "description": "où lire"}}}


def test_the_count_is_the_same_with_and_without_what_is_kept_and_follows_a_new_spec() -> None:
    read = ToolSpec(name="read_file", description="Read a file.", input_schema=SCHEMA)
    messages = (Message.user("look"),
                Message(role="assistant", content=(ToolUseBlock(id="c1", name="read_file", input={"path": "a"}),)),
                Message(role="user", content=(ToolResultBlock(tool_use_id="c1", content="été"),)))
    first = ChatRequest(model="m", system="sys", messages=messages, tools=(read,))
    counted = request_chars(first)
    again = ChatRequest(model="m", system="sys", messages=messages, tools=(read,))  # the same spec, kept
    assert request_chars(again) == counted
    capacity._TOOL_CHARS.clear()
    capacity._MESSAGE_CHARS.clear()
    capacity._CHARS.clear()
    assert request_chars(again) == counted
    wider = ToolSpec(name="read_file", description="Read a file.", input_schema={**SCHEMA, "required": ["path"]})
    changed = ChatRequest(model="m", system="sys", messages=messages, tools=(wider,))
    assert request_chars(changed) == counted + len(', "required": ["path"]')
