"""The client's generation settings reach the upstream as it sent them (serve/params.py): passed whole
within a protocol, the shared ones translated between OpenAI and Anthropic, the engine's own tool_choice
kept, and the engine's default temperature left out where the client chose none."""

from __future__ import annotations

from vak_context.serve.params import OWNED, client_params, with_client_params
from vak_context.serve.protocol import read_anthropic, read_openai

SMOLAGENTS = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 256, "stream": False,
              "stop": ["Observation:", "Calling tools:"], "tool_choice": "required", "top_k": 20, "seed": 7}
ENGINE = {"model": "m", "messages": [{"role": "user", "content": "<tail>hi"}], "max_tokens": 256,
          "temperature": 0.0}


def test_openai_client_settings_pass_whole_to_an_openai_compatible_upstream() -> None:
    params = read_openai(SMOLAGENTS).params
    assert params == {"stop": ["Observation:", "Calling tools:"], "tool_choice": "required", "top_k": 20, "seed": 7}
    body = with_client_params(ENGINE, "openai-compat", "openai", params)
    assert body == {"model": "m", "messages": ENGINE["messages"], "max_tokens": 256,
                    "stop": ["Observation:", "Calling tools:"], "tool_choice": "required", "top_k": 20, "seed": 7}
    # the client's temperature wins over the engine's default; without one the default is not sent
    assert with_client_params(ENGINE, "openai", "openai", {"temperature": 0.7})["temperature"] == 0.7
    assert "temperature" not in with_client_params(ENGINE, "openai", "openai", {})


def test_what_the_server_owns_never_passes() -> None:
    body = {**SMOLAGENTS, "stream": True, "stream_options": {"include_usage": True}, "n": 3,
            "functions": [{"name": "f"}], "max_completion_tokens": 9}
    assert not set(client_params("openai", body)) & OWNED["openai"]
    merged = with_client_params(ENGINE, "openai-compat", "openai", client_params("openai", body))
    assert merged["messages"] == ENGINE["messages"] and merged["max_tokens"] == 256 and "n" not in merged


def test_the_engines_own_tool_choice_stays() -> None:
    masked = {**ENGINE, "tool_choice": "none"}  # a rule the operator enforces asked for an answer without calls
    assert with_client_params(masked, "openai", "openai", {"tool_choice": "required"})["tool_choice"] == "none"


def test_shared_settings_are_translated_between_protocols() -> None:
    to_anthropic = with_client_params(ENGINE, "anthropic", "openai",
                                      {"temperature": 0.2, "top_p": 0.9, "stop": "END", "seed": 1,
                                       "tool_choice": {"type": "function", "function": {"name": "get"}}})
    assert {k: to_anthropic[k] for k in ("temperature", "top_p", "stop_sequences", "tool_choice")} == {
        "temperature": 0.2, "top_p": 0.9, "stop_sequences": ["END"], "tool_choice": {"type": "tool", "name": "get"}}
    assert "seed" not in to_anthropic
    params = read_anthropic({"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}],
                             "stop_sequences": ["\n\nHuman:"], "tool_choice": {"type": "any"}, "top_k": 5}).params
    to_openai = with_client_params(ENGINE, "openai-compat", "anthropic", params)
    assert to_openai["stop"] == ["\n\nHuman:"] and to_openai["tool_choice"] == "required" and "top_k" not in to_openai
    # another wire (Gemini's body has its own places for these): nothing carried, the engine's body as it was
    assert with_client_params(ENGINE, "gemini", "openai", {"seed": 3, "temperature": 0.5}) == ENGINE
