"""The normalized request and result every provider adapter renders from and parses into.

The engine builds a ``ChatRequest`` (system prompt, tools, whole-turn messages, cache hints);
each adapter in ``providers/`` renders it to its wire format and parses the reply into a
``ChatResult``. Nothing here does I/O.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from events.payloads import Usage


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TextPart(_Frozen):
    type: Literal["text"] = "text"
    text: str


class ImagePart(_Frozen):
    type: Literal["image"] = "image"
    ref: str  # URL, data: URL, or path
    media_type: str = "image/png"


class ThinkingPart(_Frozen):
    type: Literal["thinking"] = "thinking"
    thinking: str
    signature: str | None = None


class ToolUsePart(_Frozen):
    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: dict[str, Any] = Field(default_factory=dict)


class ToolResultPart(_Frozen):
    type: Literal["tool_result"] = "tool_result"
    tool_use_id: str
    content: str
    is_error: bool = False
    # The deferred tools this result loads (a ``find_tools`` result): an adapter with native deferred
    # loading (Anthropic) sends them as tool references, the others send ``content`` (their schemas).
    loads: tuple[str, ...] = ()


Part = Annotated[TextPart | ImagePart | ThinkingPart | ToolUsePart | ToolResultPart, Field(discriminator="type")]


class Message(_Frozen):
    role: Literal["user", "assistant"]
    content: tuple[Part, ...]

    @classmethod
    def user(cls, text: str) -> Message:
        return cls(role="user", content=(TextPart(text=text),))

    @classmethod
    def assistant(cls, text: str) -> Message:
        return cls(role="assistant", content=(TextPart(text=text),))

    @property
    def text(self) -> str:
        return "".join(p.text for p in self.content if isinstance(p, TextPart))


class ToolSpec(_Frozen):
    name: str
    description: str
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class CacheHints(_Frozen):
    """Where the engine wants the provider to cache: a session key and message-index breakpoints.

    ``breakpoints`` are indices into ``ChatRequest.messages``; a breakpoint at ``i`` means
    "cache everything up to and including message ``i``". ``prefix`` asks for a breakpoint after the
    system prompt and tools. Adapters render what their provider supports and ignore the rest.
    """

    session_key: str | None = None
    prefix: bool = True
    breakpoints: tuple[int, ...] = ()


class ChatRequest(_Frozen):
    model: str
    system: str = ""
    messages: tuple[Message, ...] = ()
    tools: tuple[ToolSpec, ...] = ()
    # The admitted tools the model loads on demand (``find_tools``): the same on every step. Adapters with
    # native deferred loading (Anthropic ``defer_loading``) declare them; the others leave them out.
    deferred_tools: tuple[ToolSpec, ...] = ()
    tool_choice: Literal["auto", "none", "required"] | None = None
    max_tokens: int = 1024
    temperature: float | None = None
    cache: CacheHints = CacheHints()
    extra: dict[str, Any] = Field(default_factory=dict)  # provider-specific options, passed through


class ToolCall(_Frozen):
    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    raw_arguments: str = ""  # as the provider sent them, when they were a string


class ChatResult(_Frozen):
    provider: str
    model: str
    text: str = ""
    thinking: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = Usage()
    stop_reason: str | None = None
    latency_ms: float = 0.0
    first_token_ms: float | None = None
    timings: dict[str, Any] = Field(default_factory=dict)  # llama.cpp `timings`, and similar
    raw: dict[str, Any] = Field(default_factory=dict)  # the parsed response body, for receipts


class ModelContext(_Frozen):
    """What a provider's catalogue says about a model (the metadata rung)."""

    provider: str
    model: str
    declared_window: int | None = None
    output_limit: int | None = None
    source: str = ""  # which endpoint and field said so, or why nothing did
    detail: dict[str, Any] = Field(default_factory=dict)
