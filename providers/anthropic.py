"""Anthropic Messages: ``POST {base_url}/messages`` with ``x-api-key`` and ``anthropic-version`` headers.

Rendering: the system prompt is one text block; tools carry ``input_schema``; tool results are
``tool_result`` blocks inside the user turn; thinking parts go back as ``thinking`` blocks (only with their
signature, which the API requires). Anthropic caches nothing unless told where, so ``cache_control:
{"type": "ephemeral"}`` goes on at most four blocks: one after the tools/system prefix (``CacheHints.prefix``)
and the rest on the last block of the messages ``CacheHints.breakpoints`` names, the latest ones first.

Usage: ``input_tokens`` is already the uncached part; ``cache_read_input_tokens`` and
``cache_creation_input_tokens`` are the two cache tiers.
"""

from __future__ import annotations

from typing import Any, ClassVar, Unpack

import httpx

from vak_context.coerce import int_or_none
from vak_context.context.request.messages import ChatRequest, ChatResult, Message, ModelContext, NativeCall
from vak_context.errors import ContextOverflow, InvalidInput
from vak_context.events.blocks import ImageBlock, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock
from vak_context.events.payloads import Usage
from vak_context.providers.base import (
    Provider,
    ProviderOptions,
    error_message,
    first_int,
    overflow_error,
    require_loaded_image,
    split_data_url,
)

ANTHROPIC_VERSION = "2023-06-01"
# The beta that deferred tools (``defer_loading``) and ``tool_reference`` blocks need.
DEFERRED_TOOLS_BETA = "advanced-tool-use-2025-11-20"
MAX_CACHE_BREAKPOINTS = 4  # the API rejects a request with more cache_control blocks
EPHEMERAL = {"type": "ephemeral"}
_TOOL_CHOICE = {"auto": {"type": "auto"}, "required": {"type": "any"}, "none": {"type": "none"}}
# The token-counting endpoint: ``POST /v1/messages/count_tokens`` takes the Messages body's input fields
# (https://platform.claude.com/docs/en/api/messages/count_tokens: model, messages, system, tools, tool_choice,
# thinking, ...) and no generation settings (max_tokens, temperature, stop_sequences, ...), and answers
# ``{"input_tokens": N}``.
COUNT_TOKENS_PATH = "/messages/count_tokens"
COUNTED_FIELDS = frozenset({"model", "messages", "system", "tools", "tool_choice", "thinking", "mcp_servers",
                            "output_config", "context_management", "cache_control"})


class AnthropicProvider(Provider):
    name: ClassVar[str] = "anthropic"
    chat_path: ClassVar[str] = "/messages"
    key_hint: ClassVar[str] = "ANTHROPIC_API_KEY"
    default_base_url: ClassVar[str | None] = "https://api.anthropic.com/v1"

    def __init__(
        self,
        client: httpx.AsyncClient,
        *,
        anthropic_version: str = ANTHROPIC_VERSION,
        **options: Unpack[ProviderOptions],
    ) -> None:
        super().__init__(client, **options)
        self.anthropic_version = anthropic_version

    def headers(self) -> dict[str, str]:
        out = {"anthropic-version": self.anthropic_version}
        if self._api_key:
            out["x-api-key"] = self._api_key
        return out

    def body_headers(self, body: dict[str, Any]) -> dict[str, str]:
        """Deferred tools are a beta feature: a body that declares any names its beta."""
        if any(t.get("defer_loading") for t in body.get("tools") or ()):
            return {"anthropic-beta": DEFERRED_TOOLS_BETA}
        return {}

    # ------------------------------------------------------------- render

    def render(self, request: ChatRequest) -> dict[str, Any]:
        hints = request.cache
        for index in hints.breakpoints:
            if not 0 <= index < len(request.messages):
                raise InvalidInput(
                    f"anthropic: cache breakpoint {index} is not a message index (the request has "
                    f"{len(request.messages)} messages). Compute breakpoints from ChatRequest.messages."
                )
        body: dict[str, Any] = {"model": request.model, "max_tokens": request.max_tokens}
        budget = MAX_CACHE_BREAKPOINTS
        system: list[dict[str, Any]] = [{"type": "text", "text": request.system}] if request.system else []
        tools: list[dict[str, Any]] = [
            {"name": t.name, "description": t.description, "input_schema": t.input_schema}
            for t in request.tools
        ]
        # The cached prefix is tools, then system: a breakpoint on the last of them covers both.
        if hints.prefix and (system or tools):
            (system or tools)[-1]["cache_control"] = dict(EPHEMERAL)
            budget -= 1
        # Deferred tools are declared with defer_loading: the API keeps them out of the prompt (and of the
        # cached prefix) until a tool_reference in a find_tools result loads one, so the tool list, and
        # with it the prefix, stays byte-identical for the whole session.
        loaded = {t.name for t in request.tools}
        deferred = [t for t in request.deferred_tools if t.name not in loaded]
        tools += [{"name": t.name, "description": t.description, "input_schema": t.input_schema,
                   "defer_loading": True} for t in deferred]
        if system:
            body["system"] = system
        if tools:
            body["tools"] = tools
        referable = {t.name for t in deferred}
        messages = [self.render_message(m, referable) for m in request.messages]
        # The latest breakpoints save the most; earlier ones only help when a later one misses.
        for index in sorted(set(hints.breakpoints), reverse=True)[:budget]:
            cacheable = [
                b for b in messages[index]["content"] if b["type"] not in ("thinking", "redacted_thinking")
            ]
            if cacheable:
                cacheable[-1]["cache_control"] = dict(EPHEMERAL)
        body["messages"] = messages
        if request.tool_choice is not None:
            body["tool_choice"] = _TOOL_CHOICE[request.tool_choice]
        if request.temperature is not None:
            body["temperature"] = request.temperature
        body.update(request.extra)
        return body

    def render_message(self, message: Message, referable: set[str] | frozenset[str] = frozenset()) -> dict[str, Any]:
        blocks: list[dict[str, Any]] = []
        for part in message.content:
            if isinstance(part, TextBlock):
                if part.text:  # the API rejects empty text blocks
                    blocks.append({"type": "text", "text": part.text})
            elif isinstance(part, ImageBlock):
                blocks.append(self._render_image(part))
            elif isinstance(part, ThinkingBlock):
                # A thinking block without its signature is rejected; one from another provider has none.
                if part.signature:
                    blocks.append(
                        {"type": "thinking", "thinking": part.thinking, "signature": part.signature}
                    )
            elif isinstance(part, ToolUseBlock):
                blocks.append({"type": "tool_use", "id": part.id, "name": part.name, "input": part.input})
            elif isinstance(part, ToolResultBlock):
                block: dict[str, Any] = {
                    "type": "tool_result",
                    "tool_use_id": part.tool_use_id,
                    "content": part.content,
                }
                if part.loads and set(part.loads) <= referable:
                    # A find_tools result of deferred tools: references the API expands into their schemas.
                    block["content"] = [{"type": "tool_reference", "tool_name": n} for n in part.loads]
                if part.is_error:
                    block["is_error"] = True
                blocks.append(block)
        return {"role": message.role, "content": blocks}

    def _render_image(self, part: ImageBlock) -> dict[str, Any]:
        require_loaded_image(part, self.name)
        inline = split_data_url(part.ref)
        if inline is not None:
            media_type, data = inline
            return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}
        return {"type": "image", "source": {"type": "url", "url": part.ref}}

    def count_tokens_body(self, request: ChatRequest) -> dict[str, Any]:
        """The body for ``COUNT_TOKENS_PATH``: the one ``render`` sends, less what is not input.

        A text block of whitespace only is one the API rejects ("text content blocks must contain
        non-whitespace text"); the assembler sizes the stable prefix with a one-space user message, so that
        block is counted as one ``.`` (one token either way)."""
        body = {k: v for k, v in self.render(request).items() if k in COUNTED_FIELDS}
        for message in body.get("messages") or ():
            for block in message["content"]:
                if block["type"] == "text" and not block["text"].strip():
                    block["text"] = "."
        return body

    # ------------------------------------------------------------- parse

    def parse(self, body: dict[str, Any], *, latency_ms: float) -> ChatResult:
        texts: list[str] = []
        thinking: list[str] = []
        calls: list[NativeCall] = []
        for block in body.get("content") or []:
            kind = block.get("type")
            if kind == "text":
                texts.append(str(block.get("text", "")))
            elif kind == "thinking":
                thinking.append(str(block.get("thinking", "")))
            elif kind == "tool_use":
                arguments = block.get("input") if isinstance(block.get("input"), dict) else {}
                calls.append(
                    NativeCall(
                        id=str(block.get("id", "")), name=str(block.get("name", "")), arguments=arguments
                    )
                )
        return ChatResult(
            provider=self.name,
            model=str(body.get("model") or ""),
            text="".join(texts),
            thinking="\n".join(thinking),
            tool_calls=tuple(calls),
            usage=self.parse_usage(body.get("usage") or {}),
            stop_reason=body.get("stop_reason"),
            latency_ms=latency_ms,
            raw=body,
        )

    @staticmethod
    def parse_usage(usage: dict[str, Any]) -> Usage:
        return Usage(
            input_tokens=int_or_none(usage.get("input_tokens")) or 0,
            cache_read_tokens=int_or_none(usage.get("cache_read_input_tokens")) or 0,
            cache_write_tokens=int_or_none(usage.get("cache_creation_input_tokens")) or 0,
            output_tokens=int_or_none(usage.get("output_tokens")) or 0,
        )

    # ------------------------------------------------------------- errors

    def overflow(self, status: int, body: Any) -> ContextOverflow | None:
        """HTTP 400 invalid_request_error "prompt is too long: 208310 tokens > 200000 maximum"."""
        over = super().overflow(status, body)
        if over is not None or status != 400:
            return over
        message = self._redact(error_message(body))
        if "prompt is too long" not in message.lower():
            return None
        prompt = first_int(r"([\d,]+) tokens >", message)
        limit = first_int(r"> ([\d,]+) maximum", message)
        return overflow_error(self.name, status, message, prompt, limit)

    # ------------------------------------------------------------- metadata rung

    async def model_context(self, model: str) -> ModelContext:
        """``GET /models/{id}``: ``max_input_tokens`` (the window) and ``max_tokens`` (the output cap)."""
        info = await self.request_json("GET", self.url(f"/models/{model}"))
        info = info if isinstance(info, dict) else {}
        window = int_or_none(info.get("max_input_tokens"))
        output = int_or_none(info.get("max_tokens"))
        detail = {k: info[k] for k in ("id", "display_name", "max_input_tokens", "max_tokens") if k in info}
        source = (
            "/v1/models/{id} max_input_tokens and max_tokens"
            if window is not None
            else "none: /v1/models/{id} carried no max_input_tokens; the probe ladder measures the window"
        )
        return ModelContext(
            provider=self.name,
            model=model,
            declared_window=window,
            output_limit=output,
            source=source,
            detail=detail,
        )
