"""What every provider adapter shares: the interface, retries with backoff, and error plumbing.

An adapter is four things over an injected ``httpx.AsyncClient``:

* ``render(request) -> dict``: pure; the JSON body to send. API keys never go in it (headers only).
* ``parse(body, latency_ms=) -> ChatResult``: pure; text, tool calls, thinking, usage with every cache tier.
* ``model_context(model) -> ModelContext``: the metadata rung, from the provider's catalogue.
* ``map_error(status, body) -> ProviderError``: pure; over-length becomes ``ContextOverflow`` with the sizes,
  429/5xx become ``RetryableProviderError``, anything else ``ProviderRequestError`` with a next step.

``complete(request)`` ties them together: POST, retry retryable failures with exponential backoff
(honouring ``Retry-After``), parse. A provider may echo the key back (OpenAI's "Incorrect API key provided:
sk-..."), plain or escaped, so the key is scrubbed at this edge (``providers/redaction.py``): from the decoded
JSON (every string and object key, after ``json.loads`` has undone ``\\u`` and ``\\/`` escapes), from a body that
is not JSON, from every error message, from the parsed ``ChatResult`` once more, and from httpx/httpcore
DEBUG log records (which carry response headers). Response headers themselves are never kept.
"""

from __future__ import annotations

import asyncio
import base64
import inspect
import json
import mimetypes
import random
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol, TypedDict, TypeVar

import httpx

from vak_context.context.request.messages import ChatRequest, ChatResult, Message, ModelContext, NativeCall
from vak_context.errors import (
    ContextOverflow,
    InvalidInput,
    ProviderError,
    ProviderRequestError,
    RetryableProviderError,
)
from vak_context.events.blocks import ImageBlock
from vak_context.providers.httperrors import (
    error_body,
    error_message,
    parse_retry_after,
    status_error,
    transport_errors,
)
from vak_context.providers.redaction import MIN_SECRET_CHARS, REDACTED, Redactor, scrub_library_logs

Sleep = Callable[[float], Awaitable[None]]
T = TypeVar("T")

# re-exported: callers import them from here
__all__ = ["MIN_SECRET_CHARS", "REDACTED", "error_message", "parse_retry_after"]


class Complete(Protocol):
    """Anything that answers a ChatRequest: a provider adapter (``Provider``), or a test's scripted model.
    What the turn loop sends through and the packet summariser calls."""

    async def complete(self, request: ChatRequest) -> ChatResult: ...


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff for retryable failures (429, 5xx, timeouts, dropped connections).

    Attempt ``k`` (0-based) waits ``min(max_delay_s, base_delay_s * 2**k)`` scaled by a random factor in
    ``[1 - jitter, 1 + jitter]`` (so many clients do not retry in lockstep). A provider's ``Retry-After``
    replaces the computed delay; one longer than ``max_retry_after_s`` is not waited out: the error is
    raised at once so the caller can choose another leg. ``sleep`` and ``rng`` are injectable for tests.
    """

    attempts: int = 3
    base_delay_s: float = 0.5
    max_delay_s: float = 8.0
    jitter: float = 0.2
    max_retry_after_s: float = 60.0
    sleep: Sleep = field(default=asyncio.sleep, compare=False)
    rng: random.Random = field(default_factory=random.Random, compare=False)

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise InvalidInput(f"RetryPolicy.attempts must be at least 1, got {self.attempts}")
        if not 0.0 <= self.jitter <= 1.0:
            raise InvalidInput(f"RetryPolicy.jitter must be in [0, 1], got {self.jitter}")

    def delay(self, attempt: int, retry_after: float | None = None) -> float | None:
        """Seconds to wait before retry number ``attempt + 1``; None means do not retry."""
        if attempt + 1 >= self.attempts:
            return None
        if retry_after is not None:
            return None if retry_after > self.max_retry_after_s else max(0.0, retry_after)
        backoff = min(self.max_delay_s, self.base_delay_s * (2**attempt))
        return backoff * (1.0 + self.jitter * (2.0 * self.rng.random() - 1.0))


def first_int(pattern: str, text: str) -> int | None:
    match = re.search(pattern, text, flags=re.IGNORECASE)
    return int(match.group(1).replace(",", "")) if match else None


def overflow_error(
    provider: str, status: int, message: str, prompt: int | None, limit: int | None
) -> ContextOverflow:
    """One ContextOverflow wording for every provider, with the sizes when the provider said them."""
    sizes = f" ({prompt} prompt tokens > {limit} limit)" if prompt is not None and limit is not None else ""
    return ContextOverflow(
        f"{provider}: the prompt is over the model's context window{sizes}: {message}. "
        "Send fewer tokens (compact or digest older turns) or use a model with a larger window.",
        provider=provider,
        status=status,
        prompt_tokens=prompt,
        limit_tokens=limit,
    )


def parse_json_arguments(raw: Any) -> tuple[dict[str, Any], str]:
    """Tool-call arguments as (dict, the raw string). Malformed JSON (or JSON nested too deep to decode)
    gives ``{}`` and keeps the raw text."""
    if isinstance(raw, dict):
        return raw, json.dumps(raw, ensure_ascii=False)
    if not isinstance(raw, str):
        return {}, "" if raw is None else str(raw)
    if not raw.strip():
        return {}, raw
    try:
        value = json.loads(raw)
    except (json.JSONDecodeError, RecursionError):  # nesting too deep to decode is malformed too
        return {}, raw
    return (value if isinstance(value, dict) else {}), raw


def openai_tool_calls(message: Mapping[str, Any]) -> tuple[NativeCall, ...]:
    """The ``tool_calls`` of an OpenAI-shaped chat message (OpenAI-compatible servers, Ollama) as
    ``NativeCall``s. A call with no id (Ollama's; newer versions may send one) is named by its position,
    which keeps the ids unique within the reply."""
    calls = []
    for i, call in enumerate(message.get("tool_calls") or []):
        fn = call.get("function") or {}
        arguments, raw = parse_json_arguments(fn.get("arguments"))
        calls.append(NativeCall(id=str(call.get("id") or f"call_{i}"), name=str(fn.get("name", "")),
                              arguments=arguments, raw_arguments=raw))
    return tuple(calls)


def split_data_url(ref: str) -> tuple[str, str] | None:
    """(media_type, base64 data) of a ``data:`` URL, or None for anything else."""
    match = re.match(r"data:([^;,]+)?(;base64)?,(.*)$", ref, flags=re.DOTALL)
    if not match or not match.group(2):
        return None
    return match.group(1) or "application/octet-stream", match.group(3)


def is_remote_url(ref: str) -> bool:
    return ref.startswith(("http://", "https://", "gs://"))


def require_loaded_image(part: ImageBlock, provider: str) -> None:
    """Render is pure, so it cannot read an image from disk; ``complete()`` loads paths first."""
    if not (is_remote_url(part.ref) or part.ref.startswith("data:")):
        raise InvalidInput(
            f"{provider}: image {part.ref!r} is a file path, which render() cannot read (it does no I/O). "
            "Call complete(), which loads paths, or pass load_images(request) to render()."
        )


# Messages seen to hold no image, by identity (holding the message, so its id is not reused while it is a
# key): a long session's closed turns are the same frozen messages step after step, hundreds of parts each.
_NO_IMAGE: dict[int, Message] = {}


def _has_image(messages: tuple[Message, ...]) -> bool:
    for m in messages:
        if _NO_IMAGE.get(id(m)) is m:
            continue
        if any(isinstance(p, ImageBlock) for p in m.content):
            return True
        if len(_NO_IMAGE) >= 16_384:
            _NO_IMAGE.clear()
        _NO_IMAGE[id(m)] = m
    return False


_URLS: dict[str, httpx.URL] = {}  # an endpoint's URL parsed once (httpx parses a str each request)


def _parsed_url(url: str) -> httpx.URL:
    hit = _URLS.get(url)
    if hit is None:
        if len(_URLS) >= 256:
            _URLS.clear()
        hit = _URLS[url] = httpx.URL(url)
    return hit


def load_images(request: ChatRequest) -> ChatRequest:
    """Replace image file paths with ``data:`` URLs so render() stays pure. URLs are left as they are."""
    if not _has_image(request.messages):
        return request
    messages: list[Message] = []
    for message in request.messages:
        parts = []
        for part in message.content:
            if isinstance(part, ImageBlock) and not (is_remote_url(part.ref) or part.ref.startswith("data:")):
                path = Path(part.ref)
                try:
                    data = path.read_bytes()
                except OSError as exc:
                    raise InvalidInput(
                        f"cannot read image {part.ref!r}: {exc.strerror}. Pass an existing file, a URL or a data: URL."
                    ) from exc
                media_type = part.media_type or mimetypes.guess_type(path.name)[0] or "image/png"
                encoded = base64.b64encode(data).decode("ascii")
                part = ImageBlock(ref=f"data:{media_type};base64,{encoded}", media_type=media_type)
            parts.append(part)
        messages.append(message.model_copy(update={"content": tuple(parts)}))
    return request.model_copy(update={"messages": tuple(messages)})


class ProviderOptions(TypedDict, total=False):
    """The keyword options every adapter takes (an adapter's own come before ``**options``)."""

    base_url: str | None  # the API root; None: the adapter's default_base_url
    api_key: str | None  # sent in headers only, scrubbed from everything that comes back
    retry: RetryPolicy | None  # None: RetryPolicy()
    timeout_s: float | None  # per request; None: the adapter's default_timeout_s


class Provider(ABC):
    """One wire protocol over an injected ``httpx.AsyncClient``. Subclasses set ``name`` and ``chat_path``.

    The one constructor: ``Adapter(client, **ProviderOptions)``; an adapter with options of its own takes
    them as keywords before ``**options: Unpack[ProviderOptions]`` and passes the rest on.
    """

    name: ClassVar[str]
    chat_path: ClassVar[str]
    # Where to get a key, said in auth errors (an env var name); never the key itself.
    key_hint: ClassVar[str] = "the provider's API key"
    # The API root used when no base_url is given: the hosted endpoint, or a local server's usual address
    # (Ollama); written only here, never again as a constructor default. None: the caller must say.
    default_base_url: ClassVar[str | None] = None
    default_timeout_s: ClassVar[float] = 120.0

    def __init__(
        self,
        client: httpx.AsyncClient,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        retry: RetryPolicy | None = None,
        timeout_s: float | None = None,
    ) -> None:
        base_url = base_url or self.default_base_url
        if base_url is None:
            raise InvalidInput(
                f"{self.name}: pass base_url= (the server's API root, e.g. http://127.0.0.1:8080/v1)"
            )
        if not base_url.startswith(("http://", "https://")):
            raise InvalidInput(f"{self.name}: base_url {base_url!r} must start with http:// or https://")
        self.client = client
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key or None
        self._redactor = Redactor(self._api_key)
        scrub_library_logs(self._redactor)
        self.retry = retry or RetryPolicy()
        self.timeout_s = self.default_timeout_s if timeout_s is None else timeout_s

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """An adapter's ``__init__(client, *, own..., **options)`` shows the options by name to ``inspect``
        and ``help()``, as if it had written them out: its own keywords, then the shared ones."""
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is None:
            return
        own = [p for p in inspect.signature(init).parameters.values() if p.kind is not p.VAR_KEYWORD]
        shared = [p for p in inspect.signature(Provider.__init__).parameters.values() if p.kind is p.KEYWORD_ONLY]
        init.__signature__ = inspect.signature(init).replace(parameters=[*own, *shared])

    def __repr__(self) -> str:  # never the key
        key = "set" if self._api_key else "none"
        return f"{type(self).__name__}(base_url={self.base_url!r}, api_key={key})"

    # ------------------------------------------------------------- the four pure-ish parts

    @abstractmethod
    def render(self, request: ChatRequest) -> dict[str, Any]:
        """The JSON body for ``chat_path``. Pure; holds no API key."""

    @abstractmethod
    def parse(self, body: dict[str, Any], *, latency_ms: float) -> ChatResult:
        """The normalized result of one successful response body. Pure."""

    @abstractmethod
    async def model_context(self, model: str) -> ModelContext:
        """The metadata rung: what the provider's catalogue says about ``model``."""

    def overflow(self, status: int, body: Any) -> ContextOverflow | None:
        """This provider's documented over-length error as ContextOverflow with the sizes, else None."""
        if status == 413:
            return ContextOverflow(
                f"{self.name}: the request is too large for the provider (HTTP 413: "
                f"{self._redact(error_message(body))}). Send a smaller request.",
                provider=self.name,
                status=413,
            )
        return None

    def map_error(self, status: int, body: Any, *, retry_after: float | None = None) -> ProviderError:
        """Pure: a non-2xx response as the one typed error callers catch."""
        over = self.overflow(status, body)
        if over is not None:
            return over
        return status_error(self.name, status, self._redact(error_message(body)), retry_after=retry_after,
                            key_hint=self.key_hint, base_url=self.base_url)

    # ------------------------------------------------------------- I/O

    def headers(self) -> dict[str, str]:
        """Auth and version headers. Default: a bearer token when a key is set."""
        return {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    def url(self, path: str) -> str:
        return f"{self.base_url}{path}"

    def chat_url(self, request: ChatRequest) -> str:
        return self.url(self.chat_path)

    async def complete(self, request: ChatRequest) -> ChatResult:
        """POST the rendered request (retrying retryable failures) and parse the reply."""
        request = load_images(request)
        encoded = self.encoded_body(request)
        body = self.render(request) if encoded is None else None
        headers = self.body_headers(body) if body is not None else {"Content-Type": "application/json"}
        start = time.perf_counter()
        reply = await self.request_json("POST", self.chat_url(request), json_body=body, headers=headers,
                                        content=encoded)
        latency_ms = (time.perf_counter() - start) * 1000.0
        if not isinstance(reply, dict):
            raise ProviderRequestError(
                f"{self.name}: expected a JSON object from {self.chat_path}, got {type(reply).__name__}. "
                "Check that base_url points at the provider's API.",
                provider=self.name,
            )
        result = self.parse_checked(reply, latency_ms)
        if not result.model:
            result = result.model_copy(update={"model": request.model})
        return self._redact_result(result)

    def parse_checked(self, reply: dict[str, Any], latency_ms: float) -> ChatResult:
        """``parse``, with a body whose fields have the wrong types (a list where the API documents an
        object, ``null`` for a message) translated to ProviderRequestError at this edge."""
        try:
            return self.parse(reply, latency_ms=latency_ms)
        except (AttributeError, TypeError, KeyError, IndexError, ValueError) as exc:
            raise ProviderRequestError(
                f"{self.name}: the reply from {self.chat_path} does not have the documented shape "
                f"({type(exc).__name__}: {str(exc)[:200]}). Check that base_url points at the provider's API "
                "and that the server speaks this provider's protocol.",
                provider=self.name,
            ) from exc

    async def complete_streaming(self, request: ChatRequest, on_text: Callable[[str], None]) -> ChatResult:
        """``complete``, showing the answer's text through ``on_text`` as it arrives. Adapters that cannot
        stream show it whole when it is done; the result is the same either way."""
        result = await self.complete(request)
        if result.text:
            on_text(result.text)
        return result

    def encoded_body(self, request: ChatRequest) -> bytes | None:
        """``render(request)`` as the bytes httpx's ``json=`` sends (compact, ``ensure_ascii=False``), for an
        adapter that can encode them cheaper than rendering and encoding the whole body every step; None
        (the default) renders and lets httpx encode. Used by ``complete`` only, where nobody sees the body."""
        return None

    def body_headers(self, body: dict[str, Any]) -> dict[str, str]:
        """Headers a particular body needs beyond ``headers()`` (a beta feature it uses). Default: none."""
        return {}

    async def request_json(self, method: str, url: str, *, json_body: Any = None,
                           headers: Mapping[str, str] | None = None, content: bytes | None = None) -> Any:
        """One call with retries. Returns the decoded JSON body of a 2xx reply; raises a ProviderError.
        ``content``: the body already encoded (then ``json_body`` is None)."""
        return await self.with_retries(lambda: self._request_once(method, url, json_body, headers, content))

    async def with_retries(self, attempt: Callable[[], Awaitable[T]], *,
                           may_retry: Callable[[], bool] = lambda: True) -> T:
        """``attempt()`` again after each ``RetryableProviderError`` while the policy allows and ``may_retry()``
        (a stream may not once part of its answer was shown)."""
        tried = 0
        while True:
            try:
                return await attempt()
            except RetryableProviderError as exc:
                wait = self.retry.delay(tried, exc.retry_after)
                if wait is None or not may_retry():
                    raise
                await self.retry.sleep(wait)
                tried += 1

    def transport_errors(self, method: str, url: str) -> AbstractContextManager[None]:
        """Around an httpx call: its timeouts and connection failures as this project's typed errors."""
        return transport_errors(self.name, f"{method} {self._path(url)}", base_url=self.base_url,
                                timeout_s=self.timeout_s, redact=self._redact)

    def response_error(self, response: httpx.Response) -> ProviderError:
        """A non-2xx response (its body read) as the typed error, the key scrubbed from the body first."""
        body = error_body(self._decode(response.text), response.text, self._redact)
        return self.map_error(response.status_code, body, retry_after=parse_retry_after(response.headers))

    async def _request_once(self, method: str, url: str, json_body: Any,
                            headers: Mapping[str, str] | None = None, content: bytes | None = None) -> Any:
        with self.transport_errors(method, url):
            response = await self.client.request(
                method, _parsed_url(url), json=json_body, content=content,
                headers={**self.headers(), **(headers or {})}, timeout=self.timeout_s
            )
        if not response.is_success:
            raise self.response_error(response)
        body = self._decode(response.text)
        if body is None:  # not JSON: the text itself, scrubbed, is all there is to report
            raise ProviderRequestError(
                f"{self.name}: {method} {self._path(url)} returned HTTP {response.status_code} "
                f"with a body that is not JSON: {self._redact(response.text)[:200]!r}. "
                "Check that base_url points at the API.",
                provider=self.name,
                status=response.status_code,
            )
        return body

    def _decode(self, text: str) -> Any:
        r"""The body as JSON with the key scrubbed from every decoded string and object key; None if not JSON.

        Scrubbing after decoding, not before, is what catches a key echoed as ``\u0073k-...`` or ``a\/b``.
        The caller raises only after this returns: a JSONDecodeError carries the whole raw text (``doc``), and
        an error raised while handling it would keep it as its ``__context__``. Nesting too deep to decode or
        walk counts as not JSON.
        """
        if not text.strip():
            return {}
        try:
            return self._redactor.value(json.loads(text))
        except (json.JSONDecodeError, RecursionError):
            return None

    async def get_json_or_none(self, url: str) -> Any:
        """GET for optional catalogue endpoints: a 404/405 (no such endpoint on this server) is None."""
        try:
            return await self.request_json("GET", url)
        except ProviderRequestError as exc:
            if exc.status in (404, 405, 501):
                return None
            raise

    def _path(self, url: str) -> str:
        return url.removeprefix(self.base_url) or "/"

    def _redact(self, text: str) -> str:
        """``text`` without the key in any form the redactor covers (a no-op for placeholder keys)."""
        return self._redactor.text(text)

    def _redact_result(self, result: ChatResult) -> ChatResult:
        """The parsed result scrubbed once more: tool-call arguments decoded from JSON strings are new values."""
        if not self._redactor.active:
            return result
        scrub = self._redactor.value
        calls = tuple(
            call.model_copy(
                update={
                    "id": scrub(call.id),
                    "name": scrub(call.name),
                    "arguments": scrub(call.arguments),
                    "raw_arguments": scrub(call.raw_arguments),
                }
            )
            for call in result.tool_calls
        )
        return result.model_copy(
            update={
                "model": scrub(result.model),
                "text": scrub(result.text),
                "thinking": scrub(result.thinking),
                "tool_calls": calls,
                "stop_reason": scrub(result.stop_reason),
                "timings": scrub(result.timings),
                "raw": scrub(result.raw),
            }
        )
