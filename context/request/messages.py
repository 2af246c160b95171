"""The normalized request and result every provider adapter renders from and parses into.

The engine builds a ``ChatRequest`` (system prompt, tools, whole-turn messages, cache hints);
each adapter in ``providers/`` renders it to its wire format and parses the reply into a
``ChatResult``. Nothing here does I/O.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import Field

from vak_context.events.blocks import Frozen, MessageBlock, TextBlock, ToolUseBlock, text_of
from vak_context.events.payloads import Usage


class Message(Frozen):
    """One whole-turn message of a request. Its content is the ledger's own blocks
    (``vak_context.events.blocks``, one name each), so an assistant step read back from the ledger goes
    into a request unchanged."""

    role: Literal["user", "assistant"]
    content: tuple[MessageBlock, ...]

    @classmethod
    def user(cls, text: str) -> Message:
        return cls(role="user", content=(TextBlock(text=text),))

    @classmethod
    def assistant(cls, text: str) -> Message:
        return cls(role="assistant", content=(TextBlock(text=text),))

    @property
    def text(self) -> str:
        return text_of(self.content)


class ToolSpec(Frozen):
    name: str
    description: str
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class CacheHints(Frozen):
    """Where the engine wants the provider to cache: a session key and message-index breakpoints.

    ``breakpoints`` are indices into ``ChatRequest.messages``; a breakpoint at ``i`` means
    "cache everything up to and including message ``i``". ``prefix`` asks for a breakpoint after the
    system prompt and tools. Adapters render what their provider supports and ignore the rest.
    """

    session_key: str | None = None
    prefix: bool = True
    breakpoints: tuple[int, ...] = ()


class ChatRequest(Frozen):
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


class NativeCall(Frozen):
    """A tool call as a provider's reply carried it natively (``ChatResult.tool_calls``): the provider's
    id, the decoded arguments, and the argument string as sent (for receipts and redaction).

    One of the call types, each with its own role (docs/TURNS.md "Tool calls"): the turn loop and the probe
    read these through ``toolcalls.native_calls`` as ``ParsedCall``s, the same type the text parser
    yields, and the loop stores each call it runs as a ``ToolUseBlock``.
    """

    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    raw_arguments: str = ""  # as the provider sent them, when they were a string


class ChatResult(Frozen):
    provider: str
    model: str
    text: str = ""
    thinking: str = ""
    tool_calls: tuple[NativeCall, ...] = ()
    usage: Usage = Usage()
    stop_reason: str | None = None
    latency_ms: float = 0.0
    first_token_ms: float | None = None
    timings: dict[str, Any] = Field(default_factory=dict)  # llama.cpp `timings`, and similar
    raw: dict[str, Any] = Field(default_factory=dict)  # the parsed response body, for receipts


class ModelContext(Frozen):
    """What a provider's catalogue says about a model (the metadata rung)."""

    provider: str
    model: str
    declared_window: int | None = None
    output_limit: int | None = None
    source: str = ""  # which endpoint and field said so, or why nothing did
    detail: dict[str, Any] = Field(default_factory=dict)


def input_json(block: ToolUseBlock) -> str:
    """``json.dumps(block.input, ensure_ascii=False)``: a call's arguments as the chat wire carries them and
    as ``request_chars`` counts them, encoded once per block. A long session's request shows the same
    closed turns step after step (``closed_record`` keeps their blocks), each call's input encoded twice a
    step (rendered, measured): a hundred encodes a step at 1,000 turns."""
    hit = _INPUTS.get(id(block))
    if hit is not None and hit[0] is block:
        return hit[1]
    text = json.dumps(block.input, ensure_ascii=False)
    if len(_INPUTS) >= 16_384:  # the calls of a few sessions' windows
        _INPUTS.clear()
    _INPUTS[id(block)] = (block, text)
    return text


# By identity, holding the block (so its id is not reused while it is a key); a frozen block never changes.
_INPUTS: dict[int, tuple[ToolUseBlock, str]] = {}
