"""Chat requests several tests send: built with the engine's own message types, rendered by each adapter."""

from __future__ import annotations

import json

from vak_context.context.request.messages import ChatRequest, Message, ToolSpec
from vak_context.events.blocks import TextBlock, ToolResultBlock, ToolUseBlock

READ_FILE = ToolSpec(
    name="read_file",
    description="Read a file in the workspace.",
    input_schema={"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)

# A request shaped like a real step: system, directive, a tool call, its JSON result, the tool schema.
REQUEST = ChatRequest(
    model="smollm2",
    system="You are a careful assistant. Use the tools when a file is needed.",
    messages=(
        Message.user("What does config.json set the port to?"),
        Message(role="assistant", content=(ToolUseBlock(id="call_1", name="read_file",
                                                       input={"path": "config.json"}),)),
        Message(role="user", content=(
            ToolResultBlock(tool_use_id="call_1", content=json.dumps(
                {"server": {"host": "127.0.0.1", "port": 8080, "workers": [1, 2, 3]}, "debug": False})),
            TextBlock(text="Answer in one line."),
        )),
    ),
    tools=(READ_FILE,),
    max_tokens=1,
    temperature=0.0,
)
