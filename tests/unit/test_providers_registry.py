"""`provider:model` specs -> adapters, keys from the environment, clear errors for the rest."""

from __future__ import annotations

import httpx
import pytest

from vak_context.errors import ConfigError, InvalidInput
from vak_context.providers.anthropic import AnthropicProvider
from vak_context.providers.bedrock import BedrockProvider
from vak_context.providers.gemini import GeminiProvider
from vak_context.providers.ollama import OllamaProvider
from vak_context.providers.openai_compat import OpenAICompatProvider
from vak_context.providers.registry import known_providers, make_provider, parse_spec

CLIENT = httpx.AsyncClient()


def test_known_providers_cover_every_wire_protocol() -> None:
    assert known_providers() == [
        "anthropic",
        "bedrock",
        "gemini",
        "ollama",
        "openai",
        "openai-compat",
        "openai-responses",
        "openrouter",
    ]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("anthropic:claude-sonnet-4-5", ("anthropic", "claude-sonnet-4-5")),
        ("ollama:gemma4:e2b-mlx", ("ollama", "gemma4:e2b-mlx")),
        ("openrouter:anthropic/claude-sonnet-4", ("openrouter", "anthropic/claude-sonnet-4")),
        ("google:gemini-2.5-flash", ("gemini", "gemini-2.5-flash")),
        ("llama.cpp", ("openai-compat", "")),
        ("OpenAI-Compat:smollm2", ("openai-compat", "smollm2")),
    ],
)
def test_parse_spec(spec: str, expected: tuple[str, str]) -> None:
    assert parse_spec(spec) == expected


def test_unknown_provider_lists_the_known_ones() -> None:
    with pytest.raises(InvalidInput, match=r"unknown provider 'claude'.*anthropic, bedrock"):
        parse_spec("claude:sonnet")


def test_key_comes_from_the_environment_and_goes_to_headers() -> None:
    bound = make_provider("anthropic:claude-x", CLIENT, env={"ANTHROPIC_API_KEY": "sk-ant-from-env-123"})
    assert isinstance(bound.provider, AnthropicProvider) and bound.model == "claude-x"
    assert bound.provider.headers()["x-api-key"] == "sk-ant-from-env-123"
    gemini, _ = make_provider("gemini:g", CLIENT, env={"GOOGLE_API_KEY": "AIza-fallback-123"})
    assert isinstance(gemini, GeminiProvider) and gemini.headers() == {"x-goog-api-key": "AIza-fallback-123"}


def test_a_hosted_provider_without_a_key_names_the_variable() -> None:
    with pytest.raises(ConfigError, match="set OPENROUTER_API_KEY"):
        make_provider("openrouter:x", CLIENT, env={})


def test_local_servers_need_no_key_and_have_loopback_defaults() -> None:
    local, model = make_provider("openai-compat:smollm2", CLIENT, env={})
    assert isinstance(local, OpenAICompatProvider) and local.base_url == "http://127.0.0.1:8080/v1"
    assert local.headers() == {} and model == "smollm2"
    ollama, _ = make_provider("ollama:llama3.2", CLIENT, env={"OLLAMA_HOST": "127.0.0.1:11500"}, num_ctx=8192)
    assert isinstance(ollama, OllamaProvider) and ollama.base_url == "http://127.0.0.1:11500"
    assert ollama.num_ctx == 8192
    explicit, _ = make_provider("openai-compat", CLIENT, base_url="http://127.0.0.1:9999/v1", env={})
    assert explicit.base_url == "http://127.0.0.1:9999/v1"


def test_bedrock_region_from_the_environment_or_a_clear_error() -> None:
    env = {"AWS_BEARER_TOKEN_BEDROCK": "bedrock-key-123", "AWS_REGION": "eu-west-1"}
    bedrock, _ = make_provider("bedrock:openai.gpt-oss-20b-1:0", CLIENT, env=env)
    assert isinstance(bedrock, BedrockProvider)
    assert bedrock.base_url == "https://bedrock-runtime.eu-west-1.amazonaws.com/openai/v1"
    with pytest.raises(ConfigError, match="AWS_REGION"):
        make_provider("bedrock:m", CLIENT, env={"AWS_BEARER_TOKEN_BEDROCK": "bedrock-key-123"})


def test_unknown_option_lists_the_accepted_ones() -> None:
    with pytest.raises(InvalidInput, match=r"unknown option\(s\) \['num_ctx'\].*anthropic_version"):
        make_provider("anthropic:m", CLIENT, api_key="sk-ant-123456789", num_ctx=4)
