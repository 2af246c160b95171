"""The client's generation settings, carried to the upstream as the client sent them (pure).

A client's request holds more than its messages and tools: ``temperature``, ``top_p``, ``stop``,
``seed``, ``tool_choice``, ``response_format``, a server's own sampling fields (llama.cpp's ``top_k``,
``min_p``). They are the agent's choices about how its model answers, not history: the engine projects the
history and leaves them alone. smolagents sends ``stop: ["Observation:", "Calling tools:"]`` and
``tool_choice: "required"``; dropped, the model it drives ran on into text its parser could not read.

So every field of the client's body that the server does not itself read or own (``OWNED``) is sent to the
upstream as it came, when the upstream speaks the client's protocol (an OpenAI-shaped client in front of
an OpenAI-compatible upstream: the local model, OpenRouter, OpenAI, Bedrock's gateway; an Anthropic client
in front of Anthropic). Between protocols the settings both share are translated (``temperature``,
``top_p``, ``stop`` / ``stop_sequences``, the named ``tool_choice`` modes) and the rest left out.

What the engine itself chose for the request stays: a ``tool_choice`` the engine set (a rule the operator
enforces asked the model for an answer without calls) wins over the client's. A ``temperature`` the
engine put there only as its own default is taken out when the client sent none, so the upstream samples as
it would for the client directly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# What the server reads itself, or must not forward: the history and tools it projects, how it answers
# the client (stream, one choice), and the legacy function fields the projection's tools replace.
OWNED: dict[str, frozenset[str]] = {
    "openai": frozenset({"model", "messages", "tools", "functions", "function_call", "stream", "stream_options",
                         "max_tokens", "max_completion_tokens", "n"}),
    "anthropic": frozenset({"model", "messages", "system", "tools", "stream", "max_tokens"}),
}
# The upstream wires (``vak_context.providers``' adapter names) that speak each client protocol's body.
FAMILY: dict[str, frozenset[str]] = {
    "openai": frozenset({"openai", "openai-compat", "openrouter", "bedrock"}),
    "anthropic": frozenset({"anthropic"}),
}
_TO_ANTHROPIC_CHOICE = {"auto": {"type": "auto"}, "required": {"type": "any"}, "none": {"type": "none"}}
_TO_OPENAI_CHOICE = {"auto": "auto", "any": "required", "none": "none"}


def client_params(protocol: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of a client's ``body`` the server passes on (module docstring)."""
    owned = OWNED.get(protocol, frozenset())
    return {k: v for k, v in body.items() if k not in owned}


def with_client_params(body: Mapping[str, Any], wire: str, protocol: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """The upstream's ``body`` with the client's ``params`` (from a ``protocol`` client) for an upstream
    speaking ``wire``. A ``tool_choice`` already in ``body`` is the engine's own (it stays)."""
    out = dict(body)
    engine_choice = "tool_choice" in out
    if "temperature" not in params and "temperature" in out:
        del out["temperature"]  # the engine's own default, not the client's choice
    if wire in FAMILY.get(protocol, ()):
        carried = dict(params)
    elif protocol == "openai" and wire in FAMILY["anthropic"]:
        carried = _openai_to_anthropic(params)
    elif protocol == "anthropic" and wire in FAMILY["openai"]:
        carried = _anthropic_to_openai(params)
    else:
        carried = {}  # another wire (Gemini, Ollama, Responses): its body has its own places for these
    if engine_choice:
        carried.pop("tool_choice", None)
    out.update(carried)
    return out


def _openai_to_anthropic(params: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: params[k] for k in ("temperature", "top_p") if k in params}
    stop = params.get("stop")
    if isinstance(stop, str):
        out["stop_sequences"] = [stop]
    elif isinstance(stop, list):
        out["stop_sequences"] = list(stop)
    choice = params.get("tool_choice")
    if isinstance(choice, str) and choice in _TO_ANTHROPIC_CHOICE:
        out["tool_choice"] = _TO_ANTHROPIC_CHOICE[choice]
    elif isinstance(choice, Mapping) and isinstance(choice.get("function"), Mapping):
        out["tool_choice"] = {"type": "tool", "name": choice["function"].get("name")}
    return out


def _anthropic_to_openai(params: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: params[k] for k in ("temperature", "top_p") if k in params}
    if isinstance(params.get("stop_sequences"), list):
        out["stop"] = list(params["stop_sequences"])
    choice = params.get("tool_choice")
    if isinstance(choice, Mapping):
        kind = choice.get("type")
        if kind in _TO_OPENAI_CHOICE:
            out["tool_choice"] = _TO_OPENAI_CHOICE[kind]
        elif kind == "tool" and isinstance(choice.get("name"), str):
            out["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
    return out
