"""Content blocks: the one model of what a message or an assistant step holds.

The ledger stores these blocks inside its payloads (``AssistantStep.blocks``, ``Directive.images``) and
the engine builds requests from the same classes (``vak_context.context.request.messages.Message.content``), so a block read
back from the ledger goes into a request as it is. Each block is a frozen pydantic model tagged by
``type``; ``StepBlock`` and ``MessageBlock`` are the discriminated unions each side accepts.

A block's JSON is part of an entry's canonical bytes, so a field added here changes entry ids: add one
only with a default, and only where the stored form leaves it out (see ``vak_context.events.payloads.StoredImage``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

JsonValue = Any  # a value canonical JSON encodes (checked by vak_context.events.canonical)


class Frozen(BaseModel):
    """The base of every ledger and request model: immutable, and no field it does not declare."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class TextBlock(Frozen):
    type: Literal["text"] = "text"
    text: str


class ImageBlock(Frozen):
    """An image: a reference (URL, data: URL, path or evidence id), never bytes."""

    type: Literal["image"] = "image"
    ref: str
    media_type: str = "image/png"


class ThinkingBlock(Frozen):
    type: Literal["thinking"] = "thinking"
    thinking: str
    signature: str | None = None


class ToolUseBlock(Frozen):
    """A tool call as the ledger stores it in an assistant step and a request sends it back: id, name and
    arguments (``input``). The turn loop writes one per ``ParsedCall`` it runs (docs/TURNS.md "Tool calls")."""

    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: dict[str, JsonValue] = Field(default_factory=dict)


class ToolResultBlock(Frozen):
    """A tool's result as a request carries it (the ledger keeps it as a ``ToolResult`` entry)."""

    type: Literal["tool_result"] = "tool_result"
    tool_use_id: str
    content: str
    is_error: bool = False
    # The deferred tools this result loads (a ``find_tools`` result): an adapter with native deferred
    # loading (Anthropic) sends them as tool references, the others send ``content`` (their schemas).
    loads: tuple[str, ...] = ()


StepBlock = Annotated[TextBlock | ThinkingBlock | ToolUseBlock, Field(discriminator="type")]
"""What an assistant step holds, in order."""

MessageBlock = Annotated[
    TextBlock | ImageBlock | ThinkingBlock | ToolUseBlock | ToolResultBlock, Field(discriminator="type")
]
"""What a request message holds."""


def text_of(blocks: Iterable[BaseModel]) -> str:
    """The text blocks' text, joined in order (thinking and tool blocks left out)."""
    return "".join(b.text for b in blocks if isinstance(b, TextBlock))


def tool_uses_of(blocks: Iterable[BaseModel]) -> tuple[ToolUseBlock, ...]:
    """The tool_use blocks, in order."""
    return tuple(b for b in blocks if isinstance(b, ToolUseBlock))
