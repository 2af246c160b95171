"""Ollama's native chat: ``POST {base_url}/api/chat`` (``base_url`` is the server root, e.g. ``http://127.0.0.1:11434``).

Native rather than Ollama's OpenAI-compatible path, because only ``/api/chat`` honours ``keep_alive`` (the
default 5 minutes unloads the model between turns) and ``options.num_ctx`` (spec §8). Both are sent on every
request. ``stream`` is false: one JSON object back.

Rendering: tool calls carry ``arguments`` as objects, tool results are ``role: "tool"`` messages with
``tool_name``, images are base64 strings in the message's ``images`` (Ollama fetches no URLs).
Parsing: ``prompt_eval_count`` / ``eval_count`` are the token counts; the durations (nanoseconds) go into
``timings`` in milliseconds. Ollama reports no cache tier: the probe infers cache behaviour from timing.
``truncate: false`` is sent too: without it Ollama silently drops the front of an over-long prompt; with it,
over-length is an HTTP 400 (spec §8) carrying the runner's token counts.
"""

from __future__ import annotations

import json
import re
from typing import Any, ClassVar, Unpack

import httpx

from vak_context.coerce import int_or_none
from vak_context.context.request.messages import ChatRequest, ChatResult, Message, ModelContext
from vak_context.errors import ContextOverflow, InvalidInput, ProviderError, ProviderRequestError
from vak_context.events.blocks import ImageBlock, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock
from vak_context.events.payloads import Usage
from vak_context.providers.base import (
    Provider,
    ProviderOptions,
    error_message,
    first_int,
    openai_tool_calls,
    overflow_error,
    require_loaded_image,
    split_data_url,
)
from vak_context.providers.openai_compat import openai_overflow

_NS_PER_MS = 1_000_000
_OVERFLOW = re.compile(r"context (length|window|size)|(prompt|input) (is )?too long", re.IGNORECASE)


class OllamaProvider(Provider):
    name: ClassVar[str] = "ollama"
    chat_path: ClassVar[str] = "/api/chat"
    key_hint: ClassVar[str] = "OLLAMA_API_KEY (only a proxied or cloud Ollama needs one)"
    default_base_url: ClassVar[str | None] = "http://127.0.0.1:11434"  # a local Ollama's own default
    default_timeout_s: ClassVar[float] = 300.0  # local models load on the first request

    def __init__(
        self,
        client: httpx.AsyncClient,
        *,
        keep_alive: str | int | None = "30m",
        num_ctx: int | None = None,
        **options: Unpack[ProviderOptions],
    ) -> None:
        super().__init__(client, **options)
        if num_ctx is not None and num_ctx < 1:
            raise InvalidInput(f"ollama: num_ctx must be a positive token count, got {num_ctx}")
        self.keep_alive = keep_alive
        self.num_ctx = num_ctx

    # ------------------------------------------------------------- render

    def render(self, request: ChatRequest) -> dict[str, Any]:
        names = {p.id: p.name for m in request.messages for p in m.content if isinstance(p, ToolUseBlock)}
        messages: list[dict[str, Any]] = []
        if request.system:
            messages.append({"role": "system", "content": request.system})
        for message in request.messages:
            messages.extend(self.render_message(message, names))
        # truncate=false: without it Ollama silently drops the front of an over-long prompt (spec §2: no blind
        # cuts); with it, over-length is an HTTP 400 that carries the token counts.
        body: dict[str, Any] = {
            "model": request.model,
            "messages": messages,
            "stream": False,
            "truncate": False,
        }
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {"name": t.name, "description": t.description, "parameters": t.input_schema},
                }
                for t in request.tools
            ]
        if self.keep_alive is not None:
            body["keep_alive"] = self.keep_alive
        options: dict[str, Any] = {"num_predict": request.max_tokens}
        if self.num_ctx is not None:
            options["num_ctx"] = self.num_ctx
        if request.temperature is not None:
            options["temperature"] = request.temperature
        extra = dict(request.extra)
        options.update(extra.pop("options", None) or {})
        body["options"] = options
        body.update(extra)
        return body

    def render_message(self, message: Message, names: dict[str, str]) -> list[dict[str, Any]]:
        if message.role == "assistant":
            out: dict[str, Any] = {
                "role": "assistant",
                "content": "".join(p.text for p in message.content if isinstance(p, TextBlock)),
            }
            thinking = "".join(p.thinking for p in message.content if isinstance(p, ThinkingBlock))
            if thinking:
                out["thinking"] = thinking
            calls = [
                {"function": {"name": p.name, "arguments": p.input}}
                for p in message.content
                if isinstance(p, ToolUseBlock)
            ]
            if calls:
                out["tool_calls"] = calls
            return [out]
        rendered: list[dict[str, Any]] = [
            {"role": "tool", "content": p.content, "tool_name": names.get(p.tool_use_id, p.tool_use_id)}
            for p in message.content
            if isinstance(p, ToolResultBlock)
        ]
        text = "".join(p.text for p in message.content if isinstance(p, TextBlock))
        images = [self._image_base64(p) for p in message.content if isinstance(p, ImageBlock)]
        if text or images:
            user: dict[str, Any] = {"role": "user", "content": text}
            if images:
                user["images"] = images
            rendered.append(user)
        return rendered

    def _image_base64(self, part: ImageBlock) -> str:
        require_loaded_image(part, self.name)
        inline = split_data_url(part.ref)
        if inline is None:
            raise InvalidInput(
                f"ollama: image {part.ref!r} is a URL, and Ollama fetches no URLs. "
                "Download it and pass the file path or a data: URL."
            )
        return inline[1]

    # ------------------------------------------------------------- parse

    def parse(self, body: dict[str, Any], *, latency_ms: float) -> ChatResult:
        message = body.get("message") or {}
        calls = openai_tool_calls(message)
        timings = {
            "prompt_n": int_or_none(body.get("prompt_eval_count")),
            "predicted_n": int_or_none(body.get("eval_count")),
            **{
                name: body[key] / _NS_PER_MS
                for key, name in (
                    ("prompt_eval_duration", "prompt_ms"),
                    ("eval_duration", "predicted_ms"),
                    ("load_duration", "load_ms"),
                    ("total_duration", "total_ms"),
                )
                if isinstance(body.get(key), int | float)
            },
        }
        return ChatResult(
            provider=self.name,
            model=str(body.get("model") or ""),
            text=str(message.get("content") or ""),
            thinking=str(message.get("thinking") or ""),
            tool_calls=calls,
            usage=Usage(
                input_tokens=int_or_none(body.get("prompt_eval_count")) or 0,
                output_tokens=int_or_none(body.get("eval_count")) or 0,
            ),
            stop_reason=body.get("done_reason"),
            latency_ms=latency_ms,
            timings={k: v for k, v in timings.items() if v is not None},
            raw=body,
        )

    # ------------------------------------------------------------- errors

    def overflow(self, status: int, body: Any) -> ContextOverflow | None:
        """HTTP 400 over-length. With ``truncate: false`` Ollama passes on its runner's llama.cpp error as a JSON
        string inside ``error`` (``exceed_context_size_error`` with ``n_prompt_tokens`` and ``n_ctx``)."""
        over = super().overflow(status, body)
        if over is not None or status != 400:
            return over
        message = self._redact(error_message(body))
        nested = _nested_json(message)
        if nested is not None:
            llama = openai_overflow(self.name, status, nested, self._redact)
            if llama is not None:
                return llama
        if not _OVERFLOW.search(message):
            return None
        prompt = first_int(r"request \(([\d,]+) tokens\)", message) or first_int(
            r"prompt[=: ]+([\d,]+)", message
        )
        limit = first_int(r"context size \(([\d,]+) tokens\)", message) or first_int(
            r"limit[=: ]+([\d,]+)", message
        )
        return overflow_error(self.name, status, message, prompt, limit)

    def map_error(self, status: int, body: Any, *, retry_after: float | None = None) -> ProviderError:
        message = self._redact(error_message(body))
        if status == 404 and "not found" in message.lower():
            return ProviderRequestError(
                f"ollama: {message}. Next step: pull it (`ollama pull <model>`) or check `ollama list`.",
                provider=self.name,
                status=status,
            )
        return super().map_error(status, body, retry_after=retry_after)

    # ------------------------------------------------------------- metadata rung

    async def model_context(self, model: str) -> ModelContext:
        """``POST /api/show``: ``model_info["<arch>.context_length"]`` and ``num_ctx`` from ``parameters``.

        The window a request gets is ``num_ctx`` (this adapter's, else the Modelfile's), capped by the trained
        ``context_length``. Without either num_ctx the server default applies, which may be far smaller than
        the trained window: the source says so.
        """
        show = await self.request_json("POST", self.url("/api/show"), json_body={"model": model})
        show = show if isinstance(show, dict) else {}
        info = show.get("model_info") or {}
        arch = info.get("general.architecture")
        trained = int_or_none(info.get(f"{arch}.context_length")) if arch else None
        modelfile_ctx = _parameter(show.get("parameters"), "num_ctx")
        detail = {
            "architecture": arch,
            "context_length": trained,
            "parameters_num_ctx": modelfile_ctx,
            "adapter_num_ctx": self.num_ctx,
        }
        configured = self.num_ctx or modelfile_ctx
        window: int | None
        if configured is not None:
            window = min(configured, trained) if trained else configured
            which = "options.num_ctx sent by this adapter" if self.num_ctx else "/api/show parameters num_ctx"
            source = f"{which}, capped by /api/show model_info[{arch}.context_length]"
        else:
            window = trained
            source = (
                f"/api/show model_info[{arch}.context_length] (no num_ctx is set, so the server default applies "
                "and may be smaller: pass num_ctx)"
                if trained
                else "none: /api/show gave no context_length and no num_ctx; the probe ladder measures the window"
            )
        return ModelContext(
            provider=self.name,
            model=model,
            declared_window=window,
            source=source,
            detail={k: v for k, v in detail.items() if v is not None},
        )


def _nested_json(text: str) -> dict[str, Any] | None:
    if not text.lstrip().startswith("{"):
        return None
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _parameter(parameters: Any, name: str) -> int | None:
    """One integer from /api/show's ``parameters`` text ("num_ctx 8192\\nstop ...")."""
    if isinstance(parameters, dict):
        return int_or_none(parameters.get(name))
    if not isinstance(parameters, str):
        return None
    for line in parameters.splitlines():
        fields = line.split(None, 1)
        if len(fields) == 2 and fields[0] == name:
            try:
                return int_or_none(json.loads(fields[1].strip()))
            except json.JSONDecodeError:
                return int_or_none(fields[1].strip())
    return None
