"""The two client protocols (OpenAI chat completions, Anthropic Messages) read into one neutral history, and
replies, server-sent event streams and errors written back in each protocol's own shape.

A client's history is a list of :class:`Item` (a user message, an assistant reply with its calls, one tool
result); each has a digest over what identifies it (a reply with calls by its call ids and names, a text
reply by its text, a result by its call id and text), which is how a later request's history is matched
against what the session already holds.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from vak_context.errors import InvalidInput
from vak_context.serve.bodies import loads_json
from vak_context.serve.params import client_params

Protocol = Literal["openai", "anthropic"]


@dataclass(frozen=True)
class ClientCall:
    id: str
    name: str
    arguments: Mapping[str, Any]


@dataclass(frozen=True)
class Item:
    """One message of the client's history, as the server matches and ingests it."""

    role: Literal["user", "assistant", "tool"]
    text: str = ""
    calls: tuple[ClientCall, ...] = ()
    call_id: str = ""  # a tool result's call
    is_error: bool = False

    def digest(self) -> str:
        if self.role == "assistant" and self.calls:
            # A reply with calls is ours when its call ids are: clients re-serialise arguments and text freely.
            key: Any = ["assistant", [[c.id, c.name] for c in self.calls]]
        elif self.role == "tool":
            key = ["tool", self.call_id, self.text]
        else:
            key = [self.role, " ".join(self.text.split())]
        return hashlib.sha256(json.dumps(key).encode()).hexdigest()[:32]


class DigestMemo:
    """The digests of each session key's last request's items, for the most recent ``keys`` keys: a client
    resends its whole history with every request, so all but its new items are looked up (by role, text,
    call id and calls: everything ``Item.digest`` reads) instead of encoded and hashed again, which cost
    about a tenth of the server's own CPU at 100 turns (bench/serve.py). A history that begins with the last
    request's items (the same objects, as ``serve/reading.py`` hands them on, or equal ones) takes their
    digests whole: only what follows is looked up."""

    def __init__(self, keys: int = 64) -> None:
        self._keys = keys
        self._memo: OrderedDict[str, dict[tuple[Any, ...], str]] = OrderedDict()
        self._last: dict[str, tuple[tuple[Item, ...], list[str]]] = {}  # the key's last items and their digests

    def digests(self, key: str, items: Sequence[Item]) -> list[str]:
        known, last = self._memo.pop(key, {}), self._last.pop(key, None)
        if last is not None and len(items) >= len(last[0]) and tuple(items[:len(last[0])]) == last[0]:
            # The same items first (compared by identity first, then by value): the same digests.
            memo, out, rest = known, list(last[1]), items[len(last[0]):]
        else:
            memo, out, rest = dict[tuple[Any, ...], str](), [], items
        for item in rest:
            k = (item.role, item.text, item.call_id, tuple((c.id, c.name) for c in item.calls))
            digest = memo.get(k) or known.get(k) or item.digest()
            memo[k] = digest
            out.append(digest)
        self._memo[key] = memo
        self._last[key] = (tuple(items), out)
        while len(self._memo) > self._keys:
            self._last.pop(self._memo.popitem(last=False)[0], None)
        return list(out)

    def forget(self, key: str) -> None:
        self._memo.pop(key, None)
        self._last.pop(key, None)


@dataclass(frozen=True)
class ClientTool:
    name: str
    description: str
    schema: Mapping[str, Any]


@dataclass(frozen=True)
class ClientRequest:
    protocol: Protocol
    model: str
    system: str
    items: tuple[Item, ...]
    tools: tuple[ClientTool, ...]
    stream: bool = False
    max_tokens: int | None = None
    # The client's generation settings, passed to the upstream (``vak_context.serve.params``).
    params: Mapping[str, Any] = field(default_factory=dict, compare=False)
    # The client writes its tool exchanges as text (``vak_context.serve.textform``): the model is shown them so.
    text_exchanges: bool = False


@dataclass
class Usage:
    """Summed over every upstream call made for one client request."""

    prompt: int = 0
    completion: int = 0
    cached: int = 0

    def add(self, other: Usage) -> None:
        self.prompt += other.prompt
        self.completion += other.completion
        self.cached += other.cached


@dataclass(frozen=True)
class Reply:
    """What goes back to the client: the answer, or calls of the client's own tools (never the engine's)."""

    model: str
    text: str = ""
    calls: tuple[ClientCall, ...] = ()
    usage: Usage = field(default_factory=Usage)

    def item(self) -> Item:
        return Item("assistant", self.text, self.calls)


# ---------------------------------------------------------------- reading requests


def _text_of(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, Mapping) and p.get("type", "text") == "text")
    raise InvalidInput(f"a message's content is {type(content).__name__}; send a string or a list of text parts")


def _arguments(raw: Any) -> Mapping[str, Any]:
    if isinstance(raw, Mapping):
        return raw
    try:
        value = loads_json(raw or "{}")
    except (TypeError, ValueError):
        value = None
    if not isinstance(value, Mapping):
        raise InvalidInput(f"a tool call's arguments are not a JSON object: {str(raw)[:80]!r}")
    return value


def _messages(body: Mapping[str, Any], start: int = 0) -> list[Mapping[str, Any]]:
    """The body's messages from ``start`` (those before it were read from an earlier body)."""
    messages = body.get("messages")
    rest = messages[start:] if isinstance(messages, list) else []
    if (not isinstance(messages, list) or not messages
            or not all(type(m) is dict or isinstance(m, Mapping) for m in rest)):  # a dict: no ABC check
        raise InvalidInput("'messages' must be a non-empty list of message objects")
    return rest


@dataclass(frozen=True)
class Read:
    """What reading a body's first messages gave: the system prompt's parts (OpenAI: its system and developer
    messages before the history) and the history's items. A later request whose messages begin with the
    same ones reads on from here (``serve/reading.py``) and gets what reading them all would give."""

    system: tuple[str, ...] = ()
    items: tuple[Item, ...] = ()


def read_openai(body: Mapping[str, Any]) -> ClientRequest:
    """A chat-completions request: the system/developer messages before the history are the system prompt;
    the rest the history. One that comes later is a message of the client's in the history, read as the
    user's: pydantic-ai asks again after a reply it cannot use with "Please return text or call a tool." as
    a system message at the end; read into the system prompt it changed the conversation's key (its session)
    and the prompt of every later request."""
    return openai_from(body, Read(), 0)[0]


def openai_from(body: Mapping[str, Any], prior: Read, start: int) -> tuple[ClientRequest, Read]:
    """``read_openai`` of a body whose first ``start`` messages read as ``prior``: only the rest are read."""
    system, items = list(prior.system), list(prior.items)
    for m in _messages(body, start):
        role = m.get("role")
        if role in ("system", "developer") and items:
            items.append(Item("user", _text_of(m.get("content"))))
        elif role in ("system", "developer"):
            system.append(_text_of(m.get("content")))
        elif role == "user":
            items.append(Item("user", _text_of(m.get("content"))))
        elif role == "assistant":
            calls = tuple(ClientCall(str(c.get("id", "")), str(c["function"]["name"]), _arguments(c["function"].get("arguments")))
                          for c in m.get("tool_calls") or ())
            items.append(Item("assistant", _text_of(m.get("content")), calls))
        elif role == "tool":
            items.append(Item("tool", _text_of(m.get("content")), call_id=str(m.get("tool_call_id", ""))))
        else:
            raise InvalidInput(f"message role {role!r} is not one of system, developer, user, assistant, tool")
    tools = []
    for t in body.get("tools") or ():
        f = t.get("function") or {}
        if not f.get("name"):
            raise InvalidInput("each tool needs function.name")
        tools.append(ClientTool(f["name"], f.get("description") or "", f.get("parameters") or {"type": "object", "properties": {}}))
    read = Read(tuple(system), tuple(items))
    return ClientRequest("openai", str(body.get("model", "")), "\n\n".join(s for s in system if s), read.items,
                         tuple(tools), bool(body.get("stream")), body.get("max_completion_tokens") or body.get("max_tokens"),
                         client_params("openai", body)), read


def read_anthropic(body: Mapping[str, Any]) -> ClientRequest:
    """A Messages request: ``system`` is the system prompt; a user message's tool_result blocks are results,
    its text the user's words."""
    return anthropic_from(body, Read(), 0)[0]


def anthropic_from(body: Mapping[str, Any], prior: Read, start: int) -> tuple[ClientRequest, Read]:
    """``read_anthropic`` of a body whose first ``start`` messages read as ``prior``: only the rest are read."""
    system = body.get("system")
    items = list(prior.items)
    for m in _messages(body, start):
        role, content = m.get("role"), m.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or ())
        if role == "user":
            for b in blocks:
                if b.get("type") == "tool_result":
                    items.append(Item("tool", _text_of(b.get("content")), call_id=str(b.get("tool_use_id", "")),
                                      is_error=bool(b.get("is_error"))))
            text = "".join(b.get("text", "") for b in blocks if b.get("type") == "text")
            if text or not any(b.get("type") == "tool_result" for b in blocks):
                items.append(Item("user", text))
        elif role == "assistant":
            calls = tuple(ClientCall(str(b["id"]), str(b["name"]), _arguments(b.get("input")))
                          for b in blocks if b.get("type") == "tool_use")
            items.append(Item("assistant", "".join(b.get("text", "") for b in blocks if b.get("type") == "text"), calls))
        else:
            raise InvalidInput(f"message role {role!r} is not user or assistant (the system prompt is 'system')")
    tools = [ClientTool(t["name"], t.get("description") or "", t.get("input_schema") or {"type": "object", "properties": {}})
             for t in body.get("tools") or () if t.get("name")]
    read = Read((), tuple(items))
    return ClientRequest("anthropic", str(body.get("model", "")), _text_of(system), read.items, tuple(tools),
                         bool(body.get("stream")), body.get("max_tokens"), client_params("anthropic", body)), read


# ---------------------------------------------------------------- writing replies


def _id(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:24]}"


def openai_reply(reply: Reply) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    if reply.calls:
        message["tool_calls"] = [{"id": c.id, "type": "function",
                                  "function": {"name": c.name, "arguments": json.dumps(dict(c.arguments))}}
                                 for c in reply.calls]
    return {"id": _id("chatcmpl-"), "object": "chat.completion", "created": int(time.time()), "model": reply.model,
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": "tool_calls" if reply.calls else "stop"}],
            "usage": _openai_usage(reply.usage)}


def _openai_usage(u: Usage) -> dict[str, Any]:
    return {"prompt_tokens": u.prompt, "completion_tokens": u.completion, "total_tokens": u.prompt + u.completion,
            "prompt_tokens_details": {"cached_tokens": u.cached}}


def anthropic_reply(reply: Reply) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": reply.text}] if reply.text else []
    content += [{"type": "tool_use", "id": c.id, "name": c.name, "input": dict(c.arguments)} for c in reply.calls]
    return {"id": _id("msg_"), "type": "message", "role": "assistant", "model": reply.model, "content": content,
            "stop_reason": "tool_use" if reply.calls else "end_turn", "stop_sequence": None,
            "usage": _anthropic_usage(reply.usage)}


def _anthropic_usage(u: Usage) -> dict[str, Any]:
    return {"input_tokens": u.prompt - u.cached, "cache_read_input_tokens": u.cached,
            "cache_creation_input_tokens": 0, "output_tokens": u.completion}


def _sse(data: Any, event: str | None = None) -> str:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n"


class OpenAIEvents:
    """A reply as chat.completion.chunk events, written as it is driven: a first chunk with the role, text
    deltas as they come, the client's calls once the step ended, the finish, a chunk with ``usage`` (every
    upstream call of the request) and, from :meth:`last` once the server noted the reply, [DONE]; an error
    after the start is a chunk with an ``error`` object."""

    def __init__(self, model: str) -> None:
        self.model = model
        self._base = {"id": _id("chatcmpl-"), "object": "chat.completion.chunk", "created": int(time.time()),
                      "model": model}

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> str:
        return _sse(self._base | {"choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]})

    def start(self, usage: Usage) -> Iterator[str]:
        yield self._chunk({"role": "assistant", "content": ""})

    def text(self, delta: str) -> Iterator[str]:
        yield self._chunk({"content": delta})

    def end(self, reply: Reply) -> Iterator[str]:
        for i, c in enumerate(reply.calls):
            yield self._chunk({"tool_calls": [{"index": i, "id": c.id, "type": "function",
                                               "function": {"name": c.name, "arguments": json.dumps(dict(c.arguments))}}]})
        yield self._chunk({}, "tool_calls" if reply.calls else "stop")
        yield _sse(self._base | {"choices": [], "usage": _openai_usage(reply.usage)})

    def last(self) -> Iterator[str]:
        """The stream's last event: the client reads the request's ledger entries once it has it."""
        yield "data: [DONE]\n\n"

    def error(self, body: dict[str, Any]) -> Iterator[str]:
        yield _sse(body)
        yield "data: [DONE]\n\n"


class AnthropicEvents:
    """A reply as Messages stream events, written as it is driven: ``message_start``, one text block whose
    deltas come as they arrive, the client's tool_use blocks once the step ended, ``message_delta`` with
    ``usage`` (every upstream call of the request) and, from :meth:`last` once the server noted the reply,
    ``message_stop``; an error after the start is an ``event: error``."""

    def __init__(self, model: str) -> None:
        self.model = model
        self._index = 0
        self._text_open = False

    def start(self, usage: Usage) -> Iterator[str]:
        start = anthropic_reply(Reply(self.model, usage=Usage(usage.prompt, 0, usage.cached)))
        yield _sse({"type": "message_start", "message": start | {"content": [], "stop_reason": None}}, "message_start")

    def text(self, delta: str) -> Iterator[str]:
        if not self._text_open:
            self._text_open = True
            yield _sse({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                       "content_block_start")
        yield _sse({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": delta}},
                   "content_block_delta")

    def end(self, reply: Reply) -> Iterator[str]:
        index = 0
        if self._text_open:
            yield _sse({"type": "content_block_stop", "index": 0}, "content_block_stop")
            index = 1
        for c in reply.calls:
            yield _sse({"type": "content_block_start", "index": index,
                        "content_block": {"type": "tool_use", "id": c.id, "name": c.name, "input": {}}},
                       "content_block_start")
            yield _sse({"type": "content_block_delta", "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": json.dumps(dict(c.arguments))}},
                       "content_block_delta")
            yield _sse({"type": "content_block_stop", "index": index}, "content_block_stop")
            index += 1
        yield _sse({"type": "message_delta", "delta": {"stop_reason": "tool_use" if reply.calls else "end_turn",
                                                       "stop_sequence": None},
                    "usage": _anthropic_usage(reply.usage)}, "message_delta")

    def last(self) -> Iterator[str]:
        """The stream's last event: the client reads the request's ledger entries once it has it."""
        yield _sse({"type": "message_stop"}, "message_stop")

    def error(self, body: dict[str, Any]) -> Iterator[str]:
        yield _sse(body, "error")


Events = OpenAIEvents | AnthropicEvents


# ---------------------------------------------------------------- errors

# (status, OpenAI type, Anthropic type) by the kind of failure.
_KINDS = {
    "invalid": (400, "invalid_request_error", "invalid_request_error"),
    "overflow": (400, "invalid_request_error", "invalid_request_error"),
    "too_large": (413, "invalid_request_error", "request_too_large"),
    "auth": (401, "authentication_error", "authentication_error"),
    "not_found": (404, "not_found_error", "not_found_error"),
    "rate_limit": (429, "rate_limit_error", "rate_limit_error"),
    "upstream": (502, "api_error", "api_error"),
    "overloaded": (529, "api_error", "overloaded_error"),
    "internal": (500, "api_error", "api_error"),
}


def error_body(protocol: Protocol, kind: str, message: str, status: int | None = None) -> tuple[int, dict[str, Any]]:
    """(status, body) of an error in the client's protocol: OpenAI ``{"error": {message, type, code}}``,
    Anthropic ``{"type": "error", "error": {type, message}}``."""
    default, openai_type, anthropic_type = _KINDS[kind]
    status = status or default
    if protocol == "anthropic":
        return status, {"type": "error", "error": {"type": anthropic_type, "message": message}}
    code = "context_length_exceeded" if kind == "overflow" else None
    return status, {"error": {"message": message, "type": openai_type, "param": None, "code": code}}
