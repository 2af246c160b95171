"""Build a provider adapter from a ``provider:model`` spec, as the CLI and the config name them.

``make_provider("anthropic:claude-sonnet-4-5", client)`` returns ``(provider, model)``. The model is
everything after the first colon, so Ollama tags keep theirs (``ollama:gemma4:e2b-mlx``). Keys come from the
argument or from the provider's environment variable, and go only into the adapter's headers.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import httpx

from vak_context.errors import ConfigError, InvalidInput
from vak_context.providers.anthropic import AnthropicProvider
from vak_context.providers.base import Provider, RetryPolicy
from vak_context.providers.bedrock import BedrockProvider
from vak_context.providers.gemini import GeminiProvider
from vak_context.providers.ollama import OllamaProvider
from vak_context.providers.openai_compat import OpenAIChatProvider, OpenAICompatProvider
from vak_context.providers.openai_responses import OpenAIResponsesProvider
from vak_context.providers.openrouter import OpenRouterProvider

LLAMA_CPP_DEFAULT = "http://127.0.0.1:8080/v1"


@dataclass(frozen=True)
class ProviderInfo:
    cls: type[Provider]
    key_env: tuple[str, ...]  # the environment variables a key is read from, first set wins
    key_required: bool
    what: str  # one line for `vak` help and errors


PROVIDERS: dict[str, ProviderInfo] = {
    "openai-compat": ProviderInfo(
        OpenAICompatProvider,
        ("OPENAI_COMPAT_API_KEY",),
        False,
        "any OpenAI-compatible /chat/completions server: llama.cpp, vLLM, LM Studio, gateways",
    ),
    "openai": ProviderInfo(OpenAIChatProvider, ("OPENAI_API_KEY",), True, "OpenAI chat completions"),
    "openai-responses": ProviderInfo(OpenAIResponsesProvider, ("OPENAI_API_KEY",), True, "OpenAI Responses"),
    "anthropic": ProviderInfo(AnthropicProvider, ("ANTHROPIC_API_KEY",), True, "Anthropic Messages"),
    "gemini": ProviderInfo(GeminiProvider, ("GEMINI_API_KEY", "GOOGLE_API_KEY"), True, "Google Gemini API"),
    "openrouter": ProviderInfo(OpenRouterProvider, ("OPENROUTER_API_KEY",), True, "OpenRouter"),
    "ollama": ProviderInfo(OllamaProvider, ("OLLAMA_API_KEY",), False, "Ollama native /api/chat"),
    "bedrock": ProviderInfo(
        BedrockProvider, ("AWS_BEARER_TOKEN_BEDROCK",), True, "Amazon Bedrock's OpenAI-compatible endpoint"
    ),
}
ALIASES = {
    "google": "gemini",
    "llama.cpp": "openai-compat",
    "llamacpp": "openai-compat",
    "vllm": "openai-compat",
}


class BoundProvider(NamedTuple):
    provider: Provider
    model: str


def known_providers() -> list[str]:
    return sorted(PROVIDERS)


def parse_spec(spec: str) -> tuple[str, str]:
    """``"provider:model"`` -> (canonical provider name, model). The model may be empty or hold colons."""
    name, _, model = spec.strip().partition(":")
    name = ALIASES.get(name.lower(), name.lower())
    if name not in PROVIDERS:
        raise InvalidInput(
            f"unknown provider {spec.partition(':')[0]!r} in {spec!r}. Known providers: "
            f"{', '.join(known_providers())} (aliases: {', '.join(sorted(ALIASES))}). "
            "Write it as provider:model, e.g. anthropic:claude-sonnet-4-5 or ollama:llama3.2:3b."
        )
    return name, model


def key_from_environment(spec: str, env: Mapping[str, str] | None = None) -> str | None:
    """The API key of ``spec``'s provider from the environment (its variables, the first one set); None when
    none is set, or for a spec the registry does not name (``local:``: the bundled model's key is per run)."""
    name = spec.strip().partition(":")[0].lower()
    info = PROVIDERS.get(ALIASES.get(name, name))
    env = os.environ if env is None else env
    return next((env[k] for k in info.key_env if env.get(k)), None) if info is not None else None


def request_headers(wire: str, client: httpx.AsyncClient, base_url: str, api_key: str | None) -> dict[str, str]:
    """The auth and version headers adapter ``wire`` sends with each request it renders, for a caller that
    posts those requests with its own client (``vak serve``: the caller's loop gives out requests without a
    key). The key goes only into these headers."""
    return PROVIDERS[wire].cls(client, base_url=base_url, api_key=api_key).headers()


def make_provider(
    spec: str,
    client: httpx.AsyncClient,
    *,
    api_key: str | None = None,
    base_url: str | None = None,
    retry: RetryPolicy | None = None,
    timeout_s: float | None = None,
    env: Mapping[str, str] | None = None,
    **options: Any,
) -> BoundProvider:
    """The adapter for ``spec`` over ``client``, and the model it names.

    ``options`` are the adapter's own keywords (``prompt_cache_key``, ``keep_alive``, ``num_ctx``, ``region``,
    ``anthropic_version``); an unknown one is an error that lists the accepted ones.
    """
    name, model = parse_spec(spec)
    info = PROVIDERS[name]
    env = os.environ if env is None else env
    if api_key is None:
        api_key = key_from_environment(spec, env)
    if api_key is None and info.key_required:
        raise ConfigError(
            f"{name} needs an API key: set {' or '.join(info.key_env)} in the environment, or pass api_key=."
        )
    accepted = {
        p
        for p in inspect.signature(info.cls.__init__).parameters
        if p not in ("self", "client", "args", "kwargs")
    }
    unknown = sorted(set(options) - accepted)
    if unknown:
        raise InvalidInput(f"{name}: unknown option(s) {unknown}; it accepts {sorted(accepted)}.")
    kwargs: dict[str, Any] = dict(options)
    kwargs["api_key"] = api_key
    if retry is not None:
        kwargs["retry"] = retry
    if timeout_s is not None:
        kwargs["timeout_s"] = timeout_s
    url = base_url or _default_base_url(name, env)
    if url is not None:
        kwargs["base_url"] = url
    if name == "bedrock" and url is None and "region" not in kwargs:
        region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
        if not region:
            raise ConfigError("bedrock needs a region: set AWS_REGION, pass region=, or pass base_url=.")
        kwargs["region"] = region
    return BoundProvider(info.cls(client, **kwargs), model)


def _default_base_url(name: str, env: Mapping[str, str]) -> str | None:
    if name == "openai-compat":
        return env.get("OPENAI_COMPAT_BASE_URL") or LLAMA_CPP_DEFAULT
    if name == "ollama":
        host = env.get("OLLAMA_HOST")
        if not host:
            return OllamaProvider.default_base_url
        return host if host.startswith(("http://", "https://")) else f"http://{host}"
    return None  # hosted adapters carry their own default; bedrock derives it from the region
