"""Google Gemini: ``POST {base_url}/models/{model}:generateContent`` with the ``x-goog-api-key`` header.

Rendering: ``systemInstruction``, ``contents`` with roles ``user`` / ``model``, ``functionCall`` /
``functionResponse`` parts (a response names its function, so the name is looked up from the call with the
same id earlier in the request), ``inlineData`` for ``data:`` images and ``fileData`` for URLs. A thinking
part's signature goes back as ``thoughtSignature`` on the part after it, which is where Gemini put it.
Gemini caches implicitly by prefix: there is nothing to render for cache hints.

Usage: ``promptTokenCount`` includes ``cachedContentTokenCount``, so ``input_tokens`` is the difference;
``output_tokens`` counts ``candidatesTokenCount`` plus ``thoughtsTokenCount`` (both billed as output).
The key is sent in a header, never in the URL, so it cannot leak through a logged URL.
"""

from __future__ import annotations

import re
import uuid
from typing import Any, ClassVar

from vak_context.coerce import int_or_none
from vak_context.context.request.messages import ChatRequest, ChatResult, Message, ModelContext, NativeCall
from vak_context.errors import ContextOverflow, ProviderError
from vak_context.events.blocks import ImageBlock, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock
from vak_context.events.payloads import Usage
from vak_context.providers.base import (
    Provider,
    error_message,
    first_int,
    overflow_error,
    require_loaded_image,
    split_data_url,
)

_MODE = {"auto": "AUTO", "required": "ANY", "none": "NONE"}


def model_path(model: str) -> str:
    """``models/<id>`` whether or not the caller wrote the prefix."""
    return model if model.startswith(("models/", "tunedModels/")) else f"models/{model}"


class GeminiProvider(Provider):
    name: ClassVar[str] = "gemini"
    chat_path: ClassVar[str] = ":generateContent"
    key_hint: ClassVar[str] = "GEMINI_API_KEY"
    default_base_url: ClassVar[str | None] = "https://generativelanguage.googleapis.com/v1beta"

    def headers(self) -> dict[str, str]:
        return {"x-goog-api-key": self._api_key} if self._api_key else {}

    def chat_url(self, request: ChatRequest) -> str:
        return self.url(f"/{model_path(request.model)}:generateContent")

    # ------------------------------------------------------------- render

    def render(self, request: ChatRequest) -> dict[str, Any]:
        names = {p.id: p.name for m in request.messages for p in m.content if isinstance(p, ToolUseBlock)}
        body: dict[str, Any] = {}
        if request.system:
            body["systemInstruction"] = {"parts": [{"text": request.system}]}
        body["contents"] = [self.render_message(m, names) for m in request.messages]
        if request.tools:
            body["tools"] = [
                {
                    "functionDeclarations": [
                        {"name": t.name, "description": t.description, "parameters": t.input_schema}
                        for t in request.tools
                    ]
                }
            ]
        if request.tool_choice is not None:
            body["toolConfig"] = {"functionCallingConfig": {"mode": _MODE[request.tool_choice]}}
        config: dict[str, Any] = {"maxOutputTokens": request.max_tokens}
        if request.temperature is not None:
            config["temperature"] = request.temperature
        body["generationConfig"] = config
        body.update(request.extra)
        return body

    def render_message(self, message: Message, names: dict[str, str]) -> dict[str, Any]:
        parts: list[dict[str, Any]] = []
        signature: str | None = None
        for part in message.content:
            rendered: dict[str, Any] | None = None
            if isinstance(part, TextBlock):
                rendered = {"text": part.text}
            elif isinstance(part, ImageBlock):
                rendered = self._render_image(part)
            elif isinstance(part, ThinkingBlock):
                # Thought text is never sent back; its signature rides on the next part.
                signature = part.signature or signature
            elif isinstance(part, ToolUseBlock):
                rendered = {"functionCall": {"id": part.id, "name": part.name, "args": part.input}}
            elif isinstance(part, ToolResultBlock):
                key = "error" if part.is_error else "result"
                rendered = {
                    "functionResponse": {
                        "id": part.tool_use_id,
                        "name": names.get(part.tool_use_id, part.tool_use_id),
                        "response": {key: part.content},
                    }
                }
            if rendered is not None:
                if signature:
                    rendered["thoughtSignature"], signature = signature, None
                parts.append(rendered)
        return {"role": "model" if message.role == "assistant" else "user", "parts": parts}

    def _render_image(self, part: ImageBlock) -> dict[str, Any]:
        require_loaded_image(part, self.name)
        inline = split_data_url(part.ref)
        if inline is not None:
            return {"inlineData": {"mimeType": inline[0], "data": inline[1]}}
        return {"fileData": {"mimeType": part.media_type, "fileUri": part.ref}}

    def count_tokens_url(self, request: ChatRequest) -> str:
        """``POST models/{model}:countTokens`` (https://ai.google.dev/api/tokens)."""
        return self.url(f"/{model_path(request.model)}:countTokens")

    def count_tokens_body(self, request: ChatRequest) -> dict[str, Any]:
        """The body for ``count_tokens_url``: ``{"generateContentRequest": <the body render sends>}``.

        The plain ``{"contents": [...]}`` form would count the messages only; the documented
        ``generateContentRequest`` form counts the system instruction and the function declarations too,
        and carries the ``model`` a GenerateContentRequest requires. The reply is ``{"totalTokens": N}``."""
        return {"generateContentRequest": {"model": model_path(request.model), **self.render(request)}}

    # ------------------------------------------------------------- parse

    def parse(self, body: dict[str, Any], *, latency_ms: float) -> ChatResult:
        candidates = body.get("candidates") or [{}]
        candidate = candidates[0] if isinstance(candidates[0], dict) else {}
        texts: list[str] = []
        thoughts: list[str] = []
        calls: list[NativeCall] = []
        stem = re.sub(r"[^A-Za-z0-9_-]", "", str(body.get("responseId") or ""))[:32] or uuid.uuid4().hex[:12]
        for part in (candidate.get("content") or {}).get("parts") or []:
            if "functionCall" in part:
                call = part["functionCall"] or {}
                args = call.get("args") if isinstance(call.get("args"), dict) else {}
                # Older models send no id. The position alone would repeat in every step ("call_0" each time),
                # and the request's functionResponse names are looked up by id: the reply's responseId (or a
                # random stem without one) keeps ids unique across the turn's steps.
                call_id = str(call.get("id") or f"call_{stem}_{len(calls)}")
                calls.append(NativeCall(id=call_id, name=str(call.get("name", "")), arguments=args))
            elif part.get("thought"):
                thoughts.append(str(part.get("text", "")))
            elif "text" in part:
                texts.append(str(part["text"]))
        return ChatResult(
            provider=self.name,
            model=str(body.get("modelVersion") or ""),
            text="".join(texts),
            thinking="\n".join(thoughts),
            tool_calls=tuple(calls),
            usage=self.parse_usage(body.get("usageMetadata") or {}),
            stop_reason=candidate.get("finishReason"),
            latency_ms=latency_ms,
            raw=body,
        )

    @staticmethod
    def parse_usage(meta: dict[str, Any]) -> Usage:
        prompt = int_or_none(meta.get("promptTokenCount")) or 0
        tool_prompt = int_or_none(meta.get("toolUsePromptTokenCount")) or 0
        cached = int_or_none(meta.get("cachedContentTokenCount")) or 0
        thoughts = int_or_none(meta.get("thoughtsTokenCount")) or 0
        return Usage(
            input_tokens=max(0, prompt + tool_prompt - cached),
            cache_read_tokens=cached,
            output_tokens=(int_or_none(meta.get("candidatesTokenCount")) or 0) + thoughts,
            reasoning_tokens=thoughts,
        )

    # ------------------------------------------------------------- errors

    def overflow(self, status: int, body: Any) -> ContextOverflow | None:
        """400 INVALID_ARGUMENT "The input token count (N) exceeds the maximum number of tokens allowed (M)."."""
        over = super().overflow(status, body)
        if over is not None or status != 400:
            return over
        message = self._redact(error_message(body))
        if not re.search(
            r"token count.*exceeds|exceeds the maximum number of tokens", message, re.IGNORECASE
        ):
            return None
        prompt = first_int(r"input token count \(?([\d,]+)", message)
        limit = first_int(r"tokens allowed \(?([\d,]+)", message)
        return overflow_error(self.name, status, message, prompt, limit)

    def map_error(self, status: int, body: Any, *, retry_after: float | None = None) -> ProviderError:
        if retry_after is None:
            retry_after = _retry_info_delay(body)
        return super().map_error(status, body, retry_after=retry_after)

    # ------------------------------------------------------------- metadata rung

    async def model_context(self, model: str) -> ModelContext:
        """``models.get``: ``inputTokenLimit`` and ``outputTokenLimit``."""
        info = await self.request_json("GET", self.url(f"/{model_path(model)}"))
        info = info if isinstance(info, dict) else {}
        window = int_or_none(info.get("inputTokenLimit"))
        detail = {
            k: info[k]
            for k in ("name", "version", "displayName", "inputTokenLimit", "outputTokenLimit")
            if k in info
        }
        return ModelContext(
            provider=self.name,
            model=model,
            declared_window=window,
            output_limit=int_or_none(info.get("outputTokenLimit")),
            source="models.get inputTokenLimit and outputTokenLimit"
            if window is not None
            else "none: models.get carried no inputTokenLimit; the probe ladder measures the window",
            detail=detail,
        )


def _retry_info_delay(body: Any) -> float | None:
    """Seconds from a ``google.rpc.RetryInfo`` detail (``"retryDelay": "37s"``) on a 429, if any."""
    if isinstance(body, list) and body:
        body = body[0]
    err = body.get("error") if isinstance(body, dict) else None
    details = err.get("details") if isinstance(err, dict) else None
    for detail in details if isinstance(details, list) else []:
        if isinstance(detail, dict) and str(detail.get("@type", "")).endswith("google.rpc.RetryInfo"):
            match = re.fullmatch(r"([\d.]+)s", str(detail.get("retryDelay", "")))
            if match:
                return float(match.group(1))
    return None
