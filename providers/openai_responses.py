"""OpenAI Responses: ``POST {base_url}/responses``.

Rendering: ``instructions`` carries the system prompt; ``input`` is a list of items: user messages with
``input_text`` / ``input_image`` parts, assistant messages, ``function_call`` items (arguments as a JSON string)
and ``function_call_output`` items. Tools are flat (``{"type": "function", "name", "parameters"}``).
``prompt_cache_key`` = ``CacheHints.session_key`` routes the request to the same prefix cache.
``store`` is false: the ledger is the one record of the conversation, so nothing is kept server-side.
Reasoning items are not replayed (they need server-side ids or encrypted content the ledger cannot audit).

Parsing: ``output`` items; ``reasoning`` summaries become ``thinking``. Usage: ``input_tokens`` counts cached
tokens too, so ``input_tokens - input_tokens_details.cached_tokens`` is the uncached part.

The metadata rung is honest about OpenAI: its API publishes no context length.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar, Unpack

import httpx

from vak_context.coerce import int_or_none
from vak_context.context.request.messages import ChatRequest, ChatResult, Message, ModelContext, NativeCall
from vak_context.errors import ContextOverflow
from vak_context.events.blocks import ImageBlock, TextBlock, ToolResultBlock, ToolUseBlock
from vak_context.events.payloads import Usage
from vak_context.providers.base import (
    Provider,
    ProviderOptions,
    parse_json_arguments,
    require_loaded_image,
)
from vak_context.providers.openai_compat import OPENAI_BASE_URL, OPENAI_PUBLISHES_NO_WINDOW, openai_overflow


class OpenAIResponsesProvider(Provider):
    name: ClassVar[str] = "openai-responses"
    chat_path: ClassVar[str] = "/responses"
    key_hint: ClassVar[str] = "OPENAI_API_KEY"
    default_base_url: ClassVar[str | None] = OPENAI_BASE_URL

    def __init__(
        self,
        client: httpx.AsyncClient,
        *,
        prompt_cache_key: bool = True,
        **options: Unpack[ProviderOptions],
    ) -> None:
        super().__init__(client, **options)
        self.prompt_cache_key = prompt_cache_key

    # ------------------------------------------------------------- render

    def render(self, request: ChatRequest) -> dict[str, Any]:
        body: dict[str, Any] = {"model": request.model}
        if request.system:
            body["instructions"] = request.system
        items: list[dict[str, Any]] = []
        for message in request.messages:
            items.extend(self.render_message(message))
        body["input"] = items
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.input_schema,
                }
                for t in request.tools
            ]
        if request.tool_choice is not None:
            body["tool_choice"] = request.tool_choice
        body["max_output_tokens"] = request.max_tokens
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if self.prompt_cache_key and request.cache.session_key:
            body["prompt_cache_key"] = request.cache.session_key
        body["store"] = False
        body.update(request.extra)
        return body

    def render_message(self, message: Message) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        content: list[dict[str, Any]] = []
        text_type = "output_text" if message.role == "assistant" else "input_text"

        def flush() -> None:
            if content:
                items.append({"type": "message", "role": message.role, "content": list(content)})
                content.clear()

        # Items keep the order of the parts, so a call and its output stay next to each other.
        for part in message.content:
            if isinstance(part, TextBlock):
                content.append({"type": text_type, "text": part.text})
            elif isinstance(part, ImageBlock):
                require_loaded_image(part, self.name)
                content.append({"type": "input_image", "image_url": part.ref})
            elif isinstance(part, ToolUseBlock):
                flush()
                items.append(
                    {
                        "type": "function_call",
                        "call_id": part.id,
                        "name": part.name,
                        "arguments": json.dumps(part.input, ensure_ascii=False),
                    }
                )
            elif isinstance(part, ToolResultBlock):
                flush()
                items.append(
                    {"type": "function_call_output", "call_id": part.tool_use_id, "output": part.content}
                )
        flush()
        return items

    # ------------------------------------------------------------- parse

    def parse(self, body: dict[str, Any], *, latency_ms: float) -> ChatResult:
        texts: list[str] = []
        summaries: list[str] = []
        calls: list[NativeCall] = []
        for item in body.get("output") or []:
            kind = item.get("type")
            if kind == "message":
                for part in item.get("content") or []:
                    if part.get("type") == "output_text":
                        texts.append(str(part.get("text", "")))
            elif kind == "reasoning":
                for part in item.get("summary") or []:
                    if part.get("type") == "summary_text":
                        summaries.append(str(part.get("text", "")))
            elif kind == "function_call":
                arguments, raw = parse_json_arguments(item.get("arguments"))
                calls.append(
                    NativeCall(
                        id=str(item.get("call_id") or item.get("id") or ""),
                        name=str(item.get("name", "")),
                        arguments=arguments,
                        raw_arguments=raw,
                    )
                )
        incomplete = body.get("incomplete_details") or {}
        return ChatResult(
            provider=self.name,
            model=str(body.get("model") or ""),
            text="".join(texts),
            thinking="\n".join(summaries),
            tool_calls=tuple(calls),
            usage=self.parse_usage(body.get("usage") or {}),
            stop_reason=incomplete.get("reason") or body.get("status"),
            latency_ms=latency_ms,
            raw=body,
        )

    @staticmethod
    def parse_usage(usage: dict[str, Any]) -> Usage:
        total_in = int_or_none(usage.get("input_tokens")) or 0
        cached = int_or_none((usage.get("input_tokens_details") or {}).get("cached_tokens")) or 0
        reasoning = int_or_none((usage.get("output_tokens_details") or {}).get("reasoning_tokens")) or 0
        return Usage(
            input_tokens=max(0, total_in - cached),
            cache_read_tokens=cached,
            output_tokens=int_or_none(usage.get("output_tokens")) or 0,
            reasoning_tokens=reasoning,
        )

    # ------------------------------------------------------------- errors and metadata

    def overflow(self, status: int, body: Any) -> ContextOverflow | None:
        return super().overflow(status, body) or openai_overflow(self.name, status, body, self._redact)

    async def model_context(self, model: str) -> ModelContext:
        return ModelContext(
            provider=self.name, model=model, declared_window=None, source=OPENAI_PUBLISHES_NO_WINDOW
        )
