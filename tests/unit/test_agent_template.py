"""The chat template a local model is served under in front of an agent (``vak serve-local``,
``bench/agents.py``): the Qwen coders write their calls as ```json fences, and llama.cpp derives its call
parser from how the template renders a call, so the fence template must render a call exactly in the form
its instruction asks for (docs/INTEGRATIONS.md)."""

from __future__ import annotations

import json

import jinja2

from vak_context.providers.local.catalogue import (
    FENCE_TEMPLATE,
    MODELS,
    QWEN15_NAME,
    QWEN_NAME,
    TEMPLATES,
    TOOLS_TEMPLATE,
    agent_template,
)

TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Weather now",
                                         "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}


def _render(messages: list[dict[str, object]]) -> str:
    env = jinja2.Environment(undefined=jinja2.ChainableUndefined)
    env.filters["tojson"] = lambda value: json.dumps(value, ensure_ascii=False)
    template = env.from_string((TEMPLATES / FENCE_TEMPLATE).read_text(encoding="utf-8"))
    return template.render(messages=messages, tools=[TOOL], add_generation_prompt=True)


def test_each_model_has_the_template_an_agent_gets() -> None:
    """The Qwen coders (names and aliases) get the fence template; SmolLM2 keeps its tools template; Gemma and
    any other file their own; the engine's own path (``ModelSpec.template``) is unchanged."""
    for name in (QWEN_NAME, QWEN15_NAME, "qwen", "qwen1.5b"):
        assert agent_template(name) == FENCE_TEMPLATE
    assert MODELS[QWEN_NAME].template is None and MODELS[QWEN15_NAME].template is None
    assert agent_template("smollm2") == TOOLS_TEMPLATE
    assert agent_template("gemma3-270m") == "model"
    assert agent_template("/models/other.gguf") == "model"


def test_the_fence_template_renders_a_call_as_the_fence_it_asks_for() -> None:
    prompt = _render([
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "Snow, -3 C"},
    ])
    assert prompt.startswith("<|im_start|>system\nYou are terse.\n\n# Tools")
    assert json.dumps(TOOL) in prompt.split("\n</tools>")[0]
    asked = '```json\n{"name": <function-name>, "arguments": <args-json-object>}\n```'
    assert asked in prompt
    assert '<|im_start|>assistant\n```json\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n```<|im_end|>' in prompt
    assert ("<|im_start|>user\n<tool_response>\nSnow, -3 C\n</tool_response>\n\nIf these results answer my question, "
            "answer it now in plain text, with their values; otherwise call the next function.<|im_end|>") in prompt
    assert "<tool_call>" not in prompt
    assert prompt.endswith("<|im_start|>assistant\n")


def test_the_fence_template_without_tools_is_plain_chatml() -> None:
    env = jinja2.Environment(undefined=jinja2.ChainableUndefined)
    template = env.from_string((TEMPLATES / FENCE_TEMPLATE).read_text(encoding="utf-8"))
    prompt = template.render(messages=[{"role": "user", "content": "Hi"}], tools=None, add_generation_prompt=True)
    assert prompt == ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                      "<|im_start|>assistant\n")
