"""OpenAI-compatible chat: ``POST {base_url}/chat/completions``.

One adapter for every server that speaks this shape: OpenAI itself, llama.cpp's server, vLLM, LM Studio and
gateways. OpenRouter (``providers/openrouter.py``) and Bedrock (``providers/bedrock.py``) subclass it.

``base_url`` is the API root including the version, as in the OpenAI SDK: ``https://api.openai.com/v1``,
``http://127.0.0.1:8080/v1``. (llama.cpp also serves the unversioned paths, so its bare root works too.)

Usage: ``prompt_tokens`` counts cached tokens too, so ``input_tokens = prompt_tokens - cached_tokens``
(minus ``cache_write_tokens`` where a gateway reports them). llama.cpp's ``timings`` go into
``ChatResult.timings``. Thinking parts are not sent back (chat has no field for them); received reasoning
(``reasoning_content`` from llama.cpp / DeepSeek / vLLM, ``reasoning`` from OpenRouter) becomes ``thinking``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, ClassVar, Unpack

import httpx

from vak_context.coerce import int_or_none
from vak_context.context.request.messages import ChatRequest, ChatResult, Message, ModelContext, input_json
from vak_context.errors import ContextOverflow
from vak_context.events.blocks import ImageBlock, TextBlock, ToolResultBlock, ToolUseBlock
from vak_context.events.payloads import Usage
from vak_context.providers.base import (
    Provider,
    ProviderOptions,
    error_message,
    first_int,
    load_images,
    openai_tool_calls,
    overflow_error,
    require_loaded_image,
)
from vak_context.providers.streaming import ShownText, StreamAssembler

OPENAI_BASE_URL = "https://api.openai.com/v1"  # OpenAI's own API root (chat completions and Responses)
_USER_PARTS = (TextBlock, ImageBlock)  # what a user message carries beside tool results
OPENAI_PUBLISHES_NO_WINDOW = (
    "none: OpenAI publishes no context length in its API (its /models entries carry only id, created and "
    "owned_by); the probe ladder and turn feedback measure the window"
)

# Each message's rendered dicts as JSON, by identity, holding the message (so its id is not reused while it is a
# key) and the adapter class that rendered it; a frozen message never changes.
_ENCODED: dict[int, tuple[Message, type, list[bytes]]] = {}
# The same, by the message's role and its parts' identities (holding the parts).
_BY_PARTS: dict[tuple[Any, ...], tuple[tuple[Any, ...], list[bytes]]] = {}
# The tools' JSON, by the adapter's and the specs' identities (holding them).
_TOOLS: dict[tuple[int, ...], tuple[Any, Any, str]] = {}
# A system message's JSON by its text.
_SYSTEM: dict[str, bytes] = {}
# A text part's JSON by its text: a run of cards is a new message whenever the plan regroups the runs (each
# turn's first step), but its cards are the same texts. Bounded by the texts' characters.
_TEXT_PARTS: dict[str, bytes] = {}
_TEXT_PARTS_CHARS = [0]
TEXT_PARTS_MAX_CHARS = 32 << 20
# What encoded_body stands in for: a subclass that overrides any of them renders its own way.
_RENDERS = ("render", "render_message", "_render_assistant", "_render_content")


def _dumps(value: Any) -> str:
    """As httpx encodes a ``json=`` body (``httpx._content.encode_json``)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _encode_rendered(rendered: dict[str, Any]) -> bytes:
    """One rendered message as UTF-8 JSON, ``_dumps``'s bytes: a content list of text parts only (a run of
    cards) is joined from each part's JSON, kept by its text."""
    content = rendered.get("content")
    if (type(content) is not list or len(content) < 2 or list(rendered) != ["role", "content"]
            or not all(type(c) is dict and len(c) == 2 and c.get("type") == "text" and type(c.get("text")) is str
                       and next(iter(c)) == "type" for c in content)):
        return _dumps(rendered).encode()
    head = _dumps({"role": rendered["role"]})[:-1].encode()  # '{"role":"user"'
    return b"".join((head, b',"content":[', b",".join(_text_part(c["text"]) for c in content), b"]}"))


def _system_part(rendered: dict[str, Any]) -> bytes:
    """A rendered system message as ``_dumps`` encodes it, kept by its text (the same prompt every step)."""
    text = rendered.get("content")
    if list(rendered) != ["role", "content"] or rendered["role"] != "system" or type(text) is not str:
        return _dumps(rendered).encode()
    hit = _SYSTEM.get(text)
    if hit is None:
        if len(_SYSTEM) >= 64:
            _SYSTEM.clear()
        hit = _SYSTEM[text] = _dumps(rendered).encode()
    return hit


def _text_part(text: str) -> bytes:
    hit = _TEXT_PARTS.get(text)
    if hit is None:
        hit = _dumps({"type": "text", "text": text}).encode()
        if _TEXT_PARTS_CHARS[0] + len(text) > TEXT_PARTS_MAX_CHARS:
            _TEXT_PARTS.clear()
            _TEXT_PARTS_CHARS[0] = 0
        _TEXT_PARTS[text] = hit
        _TEXT_PARTS_CHARS[0] += len(text)
    return hit


_OVERFLOW_WORDS = (
    "maximum context length",
    "context_length_exceeded",
    "exceeds the available context size",
    "exceeds the context window",
    "context window of this model",
)


def openai_overflow_sizes(message: str) -> tuple[int | None, int | None]:
    """(prompt tokens, limit) out of the over-length messages of OpenAI, vLLM and OpenRouter.

    OpenAI: "This model's maximum context length is 8192 tokens. However, your messages resulted in
    8765 tokens" or "... you requested 9000 tokens (8000 in the messages, 1000 in the completion)".
    OpenRouter: "This endpoint's maximum context length is 8192 tokens. However, you requested about 9000 tokens".
    """
    limit = first_int(r"maximum context length is ([\d,]+)", message)
    prompt = first_int(r"([\d,]+) in the messages", message)
    if prompt is None:
        prompt = first_int(r"(?:resulted in|requested(?: about)?) ([\d,]+) tokens", message)
    return prompt, limit


def openai_overflow(
    provider: str, status: int, body: Any, redact: Callable[[str], str] = str
) -> ContextOverflow | None:
    """The OpenAI-shaped over-length errors as ContextOverflow with the sizes, else None.

    llama.cpp: HTTP 400 ``{"error": {"type": "exceed_context_size_error", "n_prompt_tokens": N, "n_ctx": M}}``.
    OpenAI / OpenRouter: HTTP 400 ``{"error": {"code": "context_length_exceeded", "message": "..."}}``;
    vLLM and others say "maximum context length" in the message without the code.
    """
    if status != 400:
        return None
    err = body.get("error") if isinstance(body, dict) else None
    err = err if isinstance(err, dict) else {}
    message = redact(error_message(body))
    if err.get("type") == "exceed_context_size_error":  # llama.cpp: the sizes are fields
        prompt, limit = int_or_none(err.get("n_prompt_tokens")), int_or_none(err.get("n_ctx"))
    elif err.get("code") == "context_length_exceeded" or any(w in message.lower() for w in _OVERFLOW_WORDS):
        prompt, limit = openai_overflow_sizes(message)
    else:
        return None
    return overflow_error(provider, status, message, prompt, limit)


class OpenAICompatProvider(Provider):
    name: ClassVar[str] = "openai-compat"
    chat_path: ClassVar[str] = "/chat/completions"
    key_hint: ClassVar[str] = "the API key (OPENAI_API_KEY, or the server's --api-key)"
    # OpenAI's newer models want max_completion_tokens; llama.cpp, vLLM and gateways take max_tokens.
    max_tokens_field: ClassVar[str] = "max_tokens"
    # Only OpenAI (and gateways that forward it) know prompt_cache_key; strict servers may reject it.
    prompt_cache_key_default: ClassVar[bool] = False

    def __init__(
        self,
        client: httpx.AsyncClient,
        *,
        prompt_cache_key: bool | None = None,  # None: the adapter's prompt_cache_key_default
        **options: Unpack[ProviderOptions],  # base_url required: a self-hosted server has no default
    ) -> None:
        super().__init__(client, **options)
        self.prompt_cache_key = self.prompt_cache_key_default if prompt_cache_key is None else prompt_cache_key

    # ------------------------------------------------------------- render

    def render(self, request: ChatRequest) -> dict[str, Any]:
        messages: list[dict[str, Any]] = []
        if request.system:
            messages.append({"role": "system", "content": request.system})
        for message in request.messages:
            messages.extend(self.render_message(message))
        body: dict[str, Any] = {"model": request.model, "messages": messages}
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {"name": t.name, "description": t.description, "parameters": t.input_schema},
                }
                for t in request.tools
            ]
        if request.tool_choice is not None:
            body["tool_choice"] = request.tool_choice
        body[self.max_tokens_field] = request.max_tokens
        if request.temperature is not None:
            body["temperature"] = request.temperature
        body.update(self.render_cache(request))
        body.update(request.extra)
        return body

    def encoded_body(self, request: ChatRequest) -> bytes | None:
        """``render(request)`` as httpx encodes it, each message's JSON encoded once per (frozen) message: a
        closed turn's messages are the same objects step after step, and encoding the whole body (every
        message of a 1,000-turn session's window) was the largest part of sending a step. Byte for byte what
        ``json=render(request)`` sends. None (render, then encode) where a subclass renders its own way."""
        cls = type(self)
        if any(getattr(cls, name) is not getattr(OpenAICompatProvider, name) for name in _RENDERS) or (
                cls.body_headers is not Provider.body_headers or "messages" in request.extra):
            return None
        head = self.render(request.model_copy(update={"messages": ()}))  # the system prompt, tools and options
        if list(head)[:2] != ["model", "messages"]:
            return None
        # UTF-8 pieces joined as bytes: one encoding of a whole ~120 KB body cost more than the join.
        parts = [_system_part(m) for m in head["messages"]]
        known = _ENCODED.get
        for message in request.messages:  # _encoded's own lookup, inline: a call per message cost more than it
            hit = known(id(message))
            parts.extend(hit[2] if hit is not None and hit[0] is message and hit[1] is cls else self._encoded(message))
        rest = {k: v for k, v in head.items() if k != "model" and k != "messages"}
        tools = self._tools_json(request, rest) if "tools" in rest and "tools" not in request.extra else None
        if tools is None:
            tail = ("," + _dumps(rest)[1:] if rest else "}").encode()
        else:  # the tools' JSON kept from the last step (the same frozen specs), the options encoded around it
            tail = ("," + ",".join(f"{_dumps(k)}:{tools if k == 'tools' else _dumps(v)}"
                                   for k, v in rest.items()) + "}").encode()
        return b"".join((b'{"model":', _dumps(head["model"]).encode(), b',"messages":[', b",".join(parts), b"]",
                         tail))

    def _tools_json(self, request: ChatRequest, rest: dict[str, Any]) -> str:
        """``_dumps(rest["tools"])``, kept per adapter and tool specs (by identity: frozen, the same objects each
        step of a session, in a new tuple each request), holding them so no id is reused while kept."""
        key = (id(self), *map(id, request.tools))
        hit = _TOOLS.get(key)
        if hit is not None:
            return hit[2]
        if len(_TOOLS) >= 64:
            _TOOLS.clear()
        _TOOLS[key] = (request.tools, self, text := _dumps(rest["tools"]))
        return text

    def _encoded(self, message: Message) -> list[bytes]:
        hit = _ENCODED.get(id(message))
        if hit is not None and hit[0] is message and hit[1] is type(self):
            return hit[2]
        if any(isinstance(p, ImageBlock) for p in message.content):  # an image is loaded (or refused) per request
            return [_encode_rendered(d) for d in self.render_message(message)]
        # A new message of parts already encoded (a turn shown whole again: its blocks are kept, the message
        # around them is new each plan) reads them by the parts' identities, held so no id is reused.
        key = (type(self), message.role, *map(id, message.content))
        kept = _BY_PARTS.get(key)
        encoded = kept[1] if kept is not None else [_encode_rendered(d) for d in self.render_message(message)]
        if len(_ENCODED) >= 16_384:  # the messages of a few sessions' windows
            _ENCODED.clear()
            _BY_PARTS.clear()
        _ENCODED[id(message)] = (message, type(self), encoded)
        _BY_PARTS[key] = (message.content, encoded)
        return encoded

    def render_cache(self, request: ChatRequest) -> dict[str, Any]:
        """OpenAI caches by prefix on its own; the session key routes requests to the same cache."""
        if self.prompt_cache_key and request.cache.session_key:
            return {"prompt_cache_key": request.cache.session_key}
        return {}

    def render_message(self, message: Message) -> list[dict[str, Any]]:
        if message.role == "assistant":
            return [self._render_assistant(message)]
        # Tool results are their own "tool" messages and must directly follow the assistant's tool_calls,
        # so they go first; any other user content follows as one user message.
        # One pass over the parts (a long session's request has ~200 messages, a run of cards hundreds of parts).
        out: list[dict[str, Any]] = []
        rest: list[TextBlock | ImageBlock] = []
        for p in message.content:
            if isinstance(p, ToolResultBlock):
                out.append({"role": "tool", "tool_call_id": p.tool_use_id, "content": p.content})
            elif isinstance(p, _USER_PARTS):
                rest.append(p)
        if rest:
            out.append({"role": "user", "content": self._render_content(rest)})
        return out

    def _render_content(self, parts: list[TextBlock | ImageBlock]) -> str | list[dict[str, Any]]:
        if len(parts) == 1 and isinstance(parts[0], TextBlock):
            return parts[0].text
        content: list[dict[str, Any]] = []
        for part in parts:
            if isinstance(part, TextBlock):
                content.append({"type": "text", "text": part.text})
            else:
                require_loaded_image(part, self.name)
                content.append({"type": "image_url", "image_url": {"url": part.ref}})
        return content

    def _render_assistant(self, message: Message) -> dict[str, Any]:
        texts: list[str] = []
        calls: list[dict[str, Any]] = []
        for p in message.content:  # one pass
            if isinstance(p, TextBlock):
                texts.append(p.text)
            elif isinstance(p, ToolUseBlock):
                calls.append({"id": p.id, "type": "function", "function": {"name": p.name, "arguments": input_json(p)}})
        text = "".join(texts)
        out: dict[str, Any] = {"role": "assistant", "content": text if text or not calls else None}
        if calls:
            out["tool_calls"] = calls
        # Thinking parts are dropped on purpose: chat completions has no request field for them.
        return out

    # ------------------------------------------------------------- streaming

    async def complete_streaming(self, request: ChatRequest, on_text: Callable[[str], None]) -> ChatResult:
        """The request with ``"stream": true``: text deltas go to ``on_text`` (key-scrubbed, see
        ``vak_context.providers.streaming``) and the assembled reply is parsed as a plain one, usage and timings
        included. A failure before the first delta is retried as ``complete`` retries; after it, not
        (part of the answer was shown)."""
        request = load_images(request)
        body = {**self.render(request), "stream": True, "stream_options": {"include_usage": True}}
        url = self.chat_url(request)
        shown = ShownText(self._redactor)
        start = time.perf_counter()

        async def attempt() -> StreamAssembler:
            nonlocal shown, start
            shown, start = ShownText(self._redactor), time.perf_counter()
            return await self._stream_once(url, body, shown, on_text)

        assembled = await self.with_retries(attempt, may_retry=lambda: not shown.received)
        rest = shown.finish()
        if rest:
            on_text(rest)
        result = self.parse_checked(self._redactor.value(assembled.body()), (time.perf_counter() - start) * 1000)
        if not result.model:
            result = result.model_copy(update={"model": request.model})
        return self._redact_result(result)

    async def _stream_once(self, url: str, body: dict[str, Any], shown: ShownText,
                           on_text: Callable[[str], None]) -> StreamAssembler:
        assembled = StreamAssembler(self.name)
        with self.transport_errors("POST", url):
            async with self.client.stream("POST", url, json=body, headers=self.headers(),
                                          timeout=self.timeout_s) as response:
                if not response.is_success:
                    await response.aread()
                    raise self.response_error(response)
                async for line in response.aiter_lines():
                    if not line.startswith("data:"):
                        continue  # comments, event names and keep-alives
                    delta = assembled.feed(line[5:].strip())
                    if delta:
                        safe = shown.add(delta)
                        if safe:
                            on_text(safe)
                    if assembled.done:
                        break
        return assembled

    # ------------------------------------------------------------- parse

    def parse(self, body: dict[str, Any], *, latency_ms: float) -> ChatResult:
        choices = body.get("choices") or [{}]
        choice = choices[0] if isinstance(choices[0], dict) else {}
        message = choice.get("message") or {}
        content = message.get("content")
        if isinstance(content, list):  # some gateways return content parts
            content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        thinking = message.get("reasoning_content") or message.get("reasoning") or ""
        calls = openai_tool_calls(message)
        timings = body.get("timings")
        return ChatResult(
            provider=self.name,
            model=str(body.get("model") or ""),
            text=content or "",
            thinking=thinking if isinstance(thinking, str) else "",
            tool_calls=calls,
            usage=self.parse_usage(body.get("usage") or {}),
            stop_reason=choice.get("finish_reason"),
            latency_ms=latency_ms,
            timings=timings if isinstance(timings, dict) else {},
            raw=body,
        )

    @staticmethod
    def parse_usage(usage: dict[str, Any]) -> Usage:
        prompt = int_or_none(usage.get("prompt_tokens")) or 0
        details = usage.get("prompt_tokens_details") or {}
        cached = int_or_none(details.get("cached_tokens")) or 0
        # OpenRouter reports cache writes inside prompt_tokens too (prompt_tokens_details.cache_write_tokens).
        written = (
            int_or_none(details.get("cache_write_tokens"))
            or int_or_none(usage.get("cache_write_tokens"))
            or 0
        )
        completion_details = usage.get("completion_tokens_details") or {}
        return Usage(
            input_tokens=max(0, prompt - cached - written),
            cache_read_tokens=cached,
            cache_write_tokens=written,
            output_tokens=int_or_none(usage.get("completion_tokens")) or 0,
            reasoning_tokens=int_or_none(completion_details.get("reasoning_tokens")) or 0,
        )

    # ------------------------------------------------------------- errors

    def overflow(self, status: int, body: Any) -> ContextOverflow | None:
        return super().overflow(status, body) or openai_overflow(self.name, status, body, self._redact)

    # ------------------------------------------------------------- metadata rung

    def server_root(self) -> str:
        """The server root, for llama.cpp's unversioned ``/props``."""
        return self.base_url.removesuffix("/v1")

    async def model_context(self, model: str) -> ModelContext:
        """llama.cpp ``/props`` (the window the server accepts per request), then ``/models`` metadata.

        ``/props`` ``default_generation_settings.n_ctx`` is the per-slot window, which is what one request may
        use; ``/models`` ``data[].meta`` has ``n_ctx_train`` (what the model was trained on) and, on newer
        servers, ``n_ctx``. vLLM puts ``max_model_len`` on the model entry. OpenAI itself publishes none.
        """
        detail: dict[str, Any] = {}
        props = await self.get_json_or_none(f"{self.server_root()}/props")
        if isinstance(props, dict):
            settings = props.get("default_generation_settings") or {}
            n_ctx = int_or_none(settings.get("n_ctx")) or int_or_none(props.get("n_ctx"))
            if n_ctx:
                detail["props_n_ctx"] = n_ctx
        models = await self.get_json_or_none(self.url("/models"))
        entry = self._model_entry(models, model)
        meta = entry.get("meta") or {}
        for key in ("n_ctx", "n_ctx_train", "n_params", "size"):
            if int_or_none(meta.get(key)) is not None:
                detail[f"meta_{key}"] = int_or_none(meta.get(key))
        if int_or_none(entry.get("max_model_len")):
            detail["max_model_len"] = int_or_none(entry.get("max_model_len"))
        for key, source in (
            ("props_n_ctx", "/props default_generation_settings.n_ctx"),
            ("meta_n_ctx", "/models data[].meta.n_ctx"),
            ("max_model_len", "/models data[].max_model_len (vLLM)"),
            (
                "meta_n_ctx_train",
                "/models data[].meta.n_ctx_train (trained window; the server may serve less)",
            ),
        ):
            if key in detail:
                return ModelContext(
                    provider=self.name, model=model, declared_window=detail[key], source=source, detail=detail
                )
        return ModelContext(
            provider=self.name,
            model=model,
            declared_window=None,
            source="none: this server publishes no context length (no /props n_ctx, no /models meta); "
            "the probe ladder measures it",
            detail=detail,
        )

    @staticmethod
    def _model_entry(models: Any, model: str) -> dict[str, Any]:
        data = models.get("data") if isinstance(models, dict) else None
        if not isinstance(data, list) or not data:
            return {}
        for entry in data:
            if isinstance(entry, dict) and entry.get("id") == model:
                return entry
        first = data[0]
        return first if isinstance(first, dict) else {}


class OpenAIChatProvider(OpenAICompatProvider):
    """OpenAI's own chat completions at api.openai.com: ``prompt_cache_key`` on, ``max_completion_tokens``."""

    name: ClassVar[str] = "openai"
    key_hint: ClassVar[str] = "OPENAI_API_KEY"
    max_tokens_field: ClassVar[str] = "max_completion_tokens"
    default_base_url: ClassVar[str | None] = OPENAI_BASE_URL
    prompt_cache_key_default: ClassVar[bool] = True

    async def model_context(self, model: str) -> ModelContext:
        return ModelContext(
            provider=self.name,
            model=model,
            declared_window=None,
            source=OPENAI_PUBLISHES_NO_WINDOW,
        )
