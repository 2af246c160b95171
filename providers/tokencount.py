"""How many tokens a request is, before it is sent: exactly where the server can say, else estimated.

The planner sizes everything as ``chars × tokens_per_char``. That ratio is a prior until receipts
calibrate it, and it differs by what the request carries (JSON and tool schemas cost more tokens per
char than prose; ``bench/tokens.py`` measures by how much). A server that exposes its own chat
template and tokenizer can size a request exactly instead:

* llama.cpp ``POST /apply-template`` takes the same body as ``/v1/chat/completions`` (messages,
  tools, tool_choice) and returns ``{"prompt": "..."}``: the text the chat endpoint would evaluate,
  rendered with the server's template (its own, or the one it was started with);
* ``POST /tokenize`` takes ``{"content": prompt, "add_special": true, "parse_special": true}`` and
  returns ``{"tokens": [ids]}``. Those two flags are the ones the chat endpoint tokenizes its prompt
  with, so a BOS token the model adds is counted here too.

The count therefore equals the ``usage.prompt_tokens`` the server reports for the same request
(``tests/unit/test_tokencount.py`` checks it against the real server). Both endpoints are unversioned:
they live at the server root, not under ``/v1``, and need the API key like every other path.

Two hosted APIs count too, each given the body its adapter's ``render`` sends, so the count is of
exactly what the chat call will carry:

* Anthropic ``POST /v1/messages/count_tokens`` takes the Messages body without its generation settings
  (``model``, ``messages``, ``system``, ``tools``, ``tool_choice``, ``thinking``; no ``max_tokens``) with
  the same ``x-api-key`` and ``anthropic-version`` headers, and answers ``{"input_tokens": N}``
  (https://platform.claude.com/docs/en/api/messages/count_tokens, and the token-counting guide:
  "accepts the same structured list of inputs for creating a message, including support for system
  prompts, tools, images, and PDFs"). ``AnthropicProvider.count_tokens_body`` makes that body.
* Gemini ``POST models/{model}:countTokens`` takes ``{"contents": [...]}`` or, mutually exclusive with it,
  ``{"generateContentRequest": {...}}``, the overall input "including system instructions and/or function
  declarations"; it answers ``{"totalTokens": N}`` (https://ai.google.dev/api/tokens). The
  ``generateContentRequest`` form is the one used, so the system instruction and the tools are counted.

The count is an optimisation, never a reason to fail a turn: the chat call is what must work. Any failure
of an exact count falls back to ``chars × tokens_per_char`` (the calibrated estimate) for the rest of the
counter's life: a server without the endpoint (an older llama.cpp, vLLM, a proxy in front of a hosted API:
404, 405 or 501), one that refuses it (401 or 403 on the count where the chat call is allowed, 400), fails
it (5xx, a timeout, a dropped connection, after the adapter's retries) or answers something that is not the
documented count (HTML, other JSON: a TokenCountError inside). It is said once per endpoint in the process
(a log warning on ``vak.tokencount``; sessions on the same server do not repeat it) and once per counter
through the ``on_fallback`` callback, which the turn loop can turn into an activity. The warning names the
URL and the HTTP status or error, never the key (keys travel in headers only; the adapter scrubs bodies).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from vak_context.context.capacity.profile import request_chars
from vak_context.context.capacity.tokens import PRIOR_TOKENS_PER_CHAR, estimate_tokens
from vak_context.context.request.messages import ChatRequest
from vak_context.errors import ProviderError, TokenCountError
from vak_context.providers.anthropic import COUNT_TOKENS_PATH, AnthropicProvider
from vak_context.providers.base import Provider, load_images
from vak_context.providers.gemini import GeminiProvider
from vak_context.providers.openai_compat import OpenAICompatProvider

log = logging.getLogger("vak.tokencount")

APPLY_TEMPLATE_PATH = "/apply-template"
TOKENIZE_PATH = "/tokenize"
# The statuses a server answers for an endpoint it does not have.
NO_SUCH_ENDPOINT = frozenset({404, 405, 501})
# (server, endpoint) pairs whose fallback was logged: one warning per endpoint per process, however many
# sessions (each with its own counter) size requests for the same server.
_warned: set[tuple[str, str]] = set()


@runtime_checkable
class TokenCounter(Protocol):
    """Sizes a request in the bound model's tokens before it is sent."""

    async def count(self, request: ChatRequest) -> int: ...


class CharRatioCounter:
    """``ceil(request_chars × tokens_per_char)``: the planner's own estimate, as a counter.

    ``tokens_per_char`` is a number or a callable read at every count, so a counter built once
    follows a profile that receipts keep calibrating (``lambda: loop.profile.tokens_per_char.value``).
    """

    exact = False

    def __init__(self, tokens_per_char: float | Callable[[], float] = PRIOR_TOKENS_PER_CHAR) -> None:
        self._tokens_per_char = tokens_per_char

    @property
    def tokens_per_char(self) -> float:
        value = self._tokens_per_char
        return float(value() if callable(value) else value)

    async def count(self, request: ChatRequest) -> int:
        return estimate_tokens(request_chars(request), self.tokens_per_char)


class UsageCounter:
    """The prompt size the provider bills, from a usage-only request (the same request with
    ``max_tokens: 1``): exact for any provider, at the price of one call. For what is counted once and
    reused, such as the stable prefix (system + tools) per digest; never for every step."""

    exact = True

    def __init__(self, provider: Any) -> None:
        self.provider = provider
        self.calls = 0

    def __repr__(self) -> str:
        return f"UsageCounter({self.provider!r}, calls={self.calls})"

    async def count(self, request: ChatRequest) -> int:
        self.calls += 1
        result = await self.provider.complete(request.model_copy(update={"max_tokens": 1}))
        return int(result.usage.prompt_tokens)


class EndpointTokenCounter:
    """What the exact counters share: sizing through the provider's own endpoint, with one fallback.

    ``provider`` is the adapter that sends the chat requests: a counter renders with the adapter's own
    ``render`` and sends with its client, key, retries and error mapping. ``fallback`` sizes requests
    once an exact count has failed in any way (see the module docstring): a count never fails a turn.

    ``exact`` is None until the first count, then True, or False after the fallback was taken.
    """

    endpoint = "the token-count endpoint"  # said in the fallback notice

    def __init__(
        self,
        provider: Provider,
        *,
        fallback: TokenCounter | None = None,
        on_fallback: Callable[[str], None] | None = None,
    ) -> None:
        self.provider = provider
        self.fallback = fallback or CharRatioCounter()
        self.on_fallback = on_fallback
        self.exact: bool | None = None
        self.notice: str | None = None  # why the fallback is in use, once it is

    def __repr__(self) -> str:  # the provider's repr never shows the key
        return f"{type(self).__name__}({self.provider!r}, exact={self.exact})"

    @property
    def where(self) -> str:
        """The server the endpoint is on, for the fallback notice."""
        return self.provider.base_url

    async def count(self, request: ChatRequest) -> int:
        if self.exact is False:
            return await self.fallback.count(request)
        try:
            tokens = await self.count_exact(load_images(request))
        except ProviderError as exc:  # every failure of the count, typed at the adapter's edge
            self._fall_back(exc)
            return await self.fallback.count(request)
        self.exact = True
        return tokens

    async def count_exact(self, request: ChatRequest) -> int:
        """The server's count of ``request`` (its images already loaded)."""
        raise NotImplementedError

    async def _answer_field(self, url: str, body: dict[str, Any], field: str, kind: type, said: str,
                            headers: dict[str, str] | None = None) -> Any:
        """``field`` of the server's answer to ``url``, which must be a ``kind`` (an integer is not a
        bool); else TokenCountError."""
        reply = await self.provider.request_json("POST", url, json_body=body, headers=headers)
        path = url.removeprefix(self.where) or url
        value = reply.get(field) if isinstance(reply, dict) else None
        if not isinstance(value, kind) or isinstance(value, bool):
            raise TokenCountError(
                f"{self.provider.name}: {path} answered {_shape(reply)}, not an object "
                f'with a "{field}" {said}. Check that {self.where} serves {self.endpoint}.',
                provider=self.provider.name,
            )
        return value

    def _fall_back(self, exc: ProviderError) -> None:
        self.exact = False
        status = exc.status
        if status in NO_SUCH_ENDPOINT:
            what = f"has no {self.endpoint}: HTTP {status}"
        else:
            why = (str(exc).splitlines() or [""])[0][:240] or type(exc).__name__  # the key scrubbed by the adapter
            if status and f"HTTP {status}" not in why:
                why = f"HTTP {status}: {why}"
            what = f"did not count with its {self.endpoint} ({why})"
        self.notice = (f"{self.where} {what}; requests are sized as chars × tokens_per_char, calibrated by "
                       "receipts, from now on")
        if (self.where, self.endpoint) not in _warned:
            _warned.add((self.where, self.endpoint))
            log.warning("%s", self.notice)
        if self.on_fallback is not None:
            self.on_fallback(self.notice)


class LlamaCppTokenCounter(EndpointTokenCounter):
    """The exact prompt size from a llama.cpp server's ``/apply-template`` and ``/tokenize``.

    ``provider`` is ``OpenAICompatProvider`` for the server's ``base_url`` with its ``api_key``: the
    server templates exactly what the chat call will send.
    """

    endpoint = f"tokenizer endpoint ({APPLY_TEMPLATE_PATH} or {TOKENIZE_PATH})"
    provider: OpenAICompatProvider

    def __init__(
        self,
        provider: OpenAICompatProvider,
        *,
        fallback: TokenCounter | None = None,
        on_fallback: Callable[[str], None] | None = None,
    ) -> None:
        super().__init__(provider, fallback=fallback, on_fallback=on_fallback)

    @property
    def root(self) -> str:
        return self.provider.server_root()

    @property
    def where(self) -> str:
        return self.root

    async def count_exact(self, request: ChatRequest) -> int:
        return await self.tokenize(await self.render_prompt(request))

    async def render_prompt(self, request: ChatRequest) -> str:
        """The prompt text the chat endpoint would evaluate for ``request``."""
        body = self.provider.render(load_images(request))
        url = f"{self.root}{APPLY_TEMPLATE_PATH}"
        prompt: str = await self._answer_field(url, body, "prompt", str, "string")
        return prompt

    async def tokenize(self, prompt: str) -> int:
        """How many tokens the server's tokenizer makes of ``prompt``, as the chat endpoint tokenizes it."""
        body = {"content": prompt, "add_special": True, "parse_special": True}
        tokens: list[Any] = await self._answer_field(f"{self.root}{TOKENIZE_PATH}", body, "tokens", list, "list")
        return len(tokens)


class AnthropicTokenCounter(EndpointTokenCounter):
    """Anthropic's ``POST /v1/messages/count_tokens`` on the body the Messages call sends (less
    ``max_tokens`` and the other generation settings): ``{"input_tokens": N}``. A body with deferred tools
    carries their beta header, as the Messages call does."""

    endpoint = f"token-count endpoint ({COUNT_TOKENS_PATH})"
    provider: AnthropicProvider

    def __init__(
        self,
        provider: AnthropicProvider,
        *,
        fallback: TokenCounter | None = None,
        on_fallback: Callable[[str], None] | None = None,
    ) -> None:
        super().__init__(provider, fallback=fallback, on_fallback=on_fallback)

    async def count_exact(self, request: ChatRequest) -> int:
        body = self.provider.count_tokens_body(request)
        tokens: int = await self._answer_field(self.provider.url(COUNT_TOKENS_PATH), body, "input_tokens", int,
                                               "integer", headers=self.provider.body_headers(body))
        return tokens


class GeminiTokenCounter(EndpointTokenCounter):
    """Gemini's ``POST models/{model}:countTokens`` with ``{"generateContentRequest": <the body
    generateContent is sent>}``, so the system instruction and tools count too: ``{"totalTokens": N}``."""

    endpoint = "token-count endpoint (models/{model}:countTokens)"
    provider: GeminiProvider

    def __init__(
        self,
        provider: GeminiProvider,
        *,
        fallback: TokenCounter | None = None,
        on_fallback: Callable[[str], None] | None = None,
    ) -> None:
        super().__init__(provider, fallback=fallback, on_fallback=on_fallback)

    async def count_exact(self, request: ChatRequest) -> int:
        body = self.provider.count_tokens_body(request)
        tokens: int = await self._answer_field(self.provider.count_tokens_url(request), body, "totalTokens", int,
                                               "integer")
        return tokens


def token_counter(
    provider: object,
    tokens_per_char: float | Callable[[], float] = PRIOR_TOKENS_PER_CHAR,
    *,
    on_fallback: Callable[[str], None] | None = None,
) -> TokenCounter:
    """The best counter for ``provider``: exact where the provider can say (a self-hosted
    OpenAI-compatible server, which llama.cpp serves the endpoints for; Anthropic's count endpoint;
    Gemini's ``countTokens``), each falling back to the estimate after any failure; else
    ``chars × tokens_per_char``.

    The other hosted APIs (OpenAI and the adapters that subclass ``OpenAICompatProvider``, Ollama) publish
    no such endpoint, so they are not asked. Pass the profile's calibrated rate as a callable
    (``lambda: loop.profile.tokens_per_char.value``) so the estimate follows the receipts.
    """
    estimate = CharRatioCounter(tokens_per_char)
    # The exact type, not isinstance: a subclass (OpenAI, OpenRouter) is a hosted API without the endpoints.
    if type(provider) is OpenAICompatProvider:
        return LlamaCppTokenCounter(provider, fallback=estimate, on_fallback=on_fallback)
    if isinstance(provider, AnthropicProvider):
        return AnthropicTokenCounter(provider, fallback=estimate, on_fallback=on_fallback)
    if isinstance(provider, GeminiProvider):
        return GeminiTokenCounter(provider, fallback=estimate, on_fallback=on_fallback)
    return estimate


def _shape(reply: Any) -> str:
    if isinstance(reply, dict):
        return f"an object with keys {sorted(reply)[:8]}"
    return f"a {type(reply).__name__}"
