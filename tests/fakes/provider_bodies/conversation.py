"""One conversation every OpenAI-shaped adapter's tests render (a user message with an image, an assistant's
thinking, text and call, a tool result with a follow-up), with its tool and a local base URL."""

from __future__ import annotations

from vak_context.context.request.messages import CacheHints, ChatRequest, Message, ToolSpec
from vak_context.events.blocks import ImageBlock, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock

LOCAL = "http://127.0.0.1:8080/v1"
SCHEMA = {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}
WEATHER = ToolSpec(name="get_weather", description="Weather for a place.", input_schema=SCHEMA)

CONVERSATION = ChatRequest(
    model="gpt-4o-mini",
    system="You are terse.",
    tools=(WEATHER,),
    tool_choice="auto",
    max_tokens=64,
    temperature=0.0,
    cache=CacheHints(session_key="sess-42", breakpoints=(1,)),
    messages=(
        Message(
            role="user",
            content=(TextBlock(text="Weather in Boston?"), ImageBlock(ref="https://example.com/map.png")),
        ),
        Message(
            role="assistant",
            content=(
                ThinkingBlock(thinking="need the tool"),
                TextBlock(text="Checking."),
                ToolUseBlock(id="call_1", name="get_weather", input={"location": "Boston"}),
            ),
        ),
        Message(
            role="user",
            content=(
                ToolResultBlock(tool_use_id="call_1", content="12C, rain"),
                TextBlock(text="And tomorrow?"),
            ),
        ),
    ),
)
