"""The shape of a request body in each client protocol, checked before ``serve/protocol.py`` reads it: a
field of the wrong type, a required one missing or a number out of range is an
:class:`~vak_context.errors.InvalidBody` (400) that names the field by its path, as
``messages[2].tool_calls[0].function: required``. Only the fields the server reads are checked; the
others (``temperature``, ``tool_choice``, ...) pass through unread, as before.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from vak_context.checks import MAX_TOKENS
from vak_context.errors import InvalidBody
from vak_context.serve.protocol import Protocol

OPENAI_ROLES = ("system", "developer", "user", "assistant", "tool")
ANTHROPIC_ROLES = ("user", "assistant")


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list",
            dict: "an object"}.get(type(value), type(value).__name__)


def _fail(path: str, what: str) -> InvalidBody:
    return InvalidBody(f"{path}: {what}")


def _object(body: Mapping[str, Any], key: str, path: str, *, required: bool = False) -> Mapping[str, Any] | None:
    value = body.get(key)
    if value is None:
        if required:
            raise _fail(path, "required")
        return None
    if not isinstance(value, dict):
        raise _fail(path, f"must be an object, not {_kind(value)}")
    return value


def _string(body: Mapping[str, Any], key: str, path: str, *, required: bool = False, empty: bool = False) -> None:
    """``empty``: a required string may be "" (a text part); a name or an id may not."""
    value = body.get(key)
    if value is None:
        if required:
            raise _fail(path, "required")
        return
    if not isinstance(value, str):
        raise _fail(path, f"must be a string, not {_kind(value)}")
    if required and not empty and not value:
        raise _fail(path, "must not be empty")


def _list(body: Mapping[str, Any], key: str, path: str) -> list[Any]:
    value = body.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise _fail(path, f"must be a list, not {_kind(value)}")
    return value


def _bool(body: Mapping[str, Any], key: str) -> None:
    value = body.get(key)
    if value is not None and not isinstance(value, bool):
        raise _fail(key, f"must be true or false, not {_kind(value)}")


def _tokens(body: Mapping[str, Any], key: str) -> None:
    value = body.get(key)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(key, f"must be a whole number of tokens, not {_kind(value)}")
    if not 1 <= value <= MAX_TOKENS:
        raise _fail(key, f"must be within 1..{MAX_TOKENS:,}, not {value}")


def _messages(body: Mapping[str, Any], roles: tuple[str, ...], check: Callable[[Mapping[str, Any], str], None],
              start: int) -> None:
    messages = body.get("messages")
    if messages is None:
        raise _fail("messages", "required")
    if not isinstance(messages, list):
        raise _fail("messages", f"must be a list of message objects, not {_kind(messages)}")
    if not messages:
        raise _fail("messages", "must hold at least one message")
    for i, m in enumerate(messages[start:], start):
        path = f"messages[{i}]"
        if not isinstance(m, dict):
            raise _fail(path, f"must be a message object, not {_kind(m)}")
        role = m.get("role")
        if role is None:
            raise _fail(f"{path}.role", "required")
        if role not in roles:
            raise _fail(f"{path}.role", f"must be one of {', '.join(roles)}, not {role!r}")
        check(m, path)


# ---------------------------------------------------------------- OpenAI chat completions


def _openai_content(m: Mapping[str, Any], path: str) -> None:
    content = m.get("content")
    if content is None or isinstance(content, str):
        return
    if not isinstance(content, list):
        raise _fail(f"{path}.content", f"must be a string or a list of content parts, not {_kind(content)}")
    for j, part in enumerate(content):
        where = f"{path}.content[{j}]"
        if not isinstance(part, dict):
            raise _fail(where, f"must be a content part object, not {_kind(part)}")
        _string(part, "type", f"{where}.type")
        if part.get("type", "text") == "text":
            _string(part, "text", f"{where}.text", required=True, empty=True)


def _openai_message(m: Mapping[str, Any], path: str) -> None:
    _openai_content(m, path)
    _string(m, "name", f"{path}.name")
    if m["role"] == "assistant":
        for j, call in enumerate(_list(m, "tool_calls", f"{path}.tool_calls")):
            where = f"{path}.tool_calls[{j}]"
            if not isinstance(call, dict):
                raise _fail(where, f"must be a tool call object, not {_kind(call)}")
            _string(call, "id", f"{where}.id")
            function = _object(call, "function", f"{where}.function", required=True)
            assert function is not None
            _string(function, "name", f"{where}.function.name", required=True)
            arguments = function.get("arguments")
            if arguments is not None and not isinstance(arguments, str | dict):
                raise _fail(f"{where}.function.arguments", f"must be a JSON object's text, not {_kind(arguments)}")
    elif m["role"] == "tool":
        _string(m, "tool_call_id", f"{path}.tool_call_id", required=True)


def check_openai(body: Mapping[str, Any], start: int = 0) -> None:
    """A chat-completions body's shape, as ``read_openai`` reads it; ``start``: its first messages are known
    to pass (``serve/reading.py``), only the rest are checked."""
    _string(body, "model", "model")
    _messages(body, OPENAI_ROLES, _openai_message, start)
    for i, t in enumerate(_list(body, "tools", "tools")):
        where = f"tools[{i}]"
        if not isinstance(t, dict):
            raise _fail(where, f"must be a tool object ({{'type': 'function', 'function': {{'name': ...}}}}), not {_kind(t)}")
        _string(t, "type", f"{where}.type")
        function = _object(t, "function", f"{where}.function", required=True)
        assert function is not None
        _string(function, "name", f"{where}.function.name", required=True)
        _string(function, "description", f"{where}.function.description")
        _object(function, "parameters", f"{where}.function.parameters")
    _tokens(body, "max_tokens")
    _tokens(body, "max_completion_tokens")
    _bool(body, "stream")


# ---------------------------------------------------------------- Anthropic Messages


def _blocks(value: Any, path: str, *, results: bool) -> None:
    """A content list's blocks; ``results``: tool_result blocks may hold blocks in turn."""
    if not isinstance(value, list):
        raise _fail(path, f"must be a string or a list of content blocks, not {_kind(value)}")
    for j, block in enumerate(value):
        where = f"{path}[{j}]"
        if not isinstance(block, dict):
            raise _fail(where, f"must be a content block object ({{'type': 'text', 'text': ...}}), not {_kind(block)}")
        kind = block.get("type")
        if kind is None:
            raise _fail(f"{where}.type", "required")
        if not isinstance(kind, str):
            raise _fail(f"{where}.type", f"must be a string, not {_kind(kind)}")
        if kind == "text":
            _string(block, "text", f"{where}.text", required=True, empty=True)
        elif kind == "tool_use":
            _string(block, "id", f"{where}.id", required=True)
            _string(block, "name", f"{where}.name", required=True)
            _object(block, "input", f"{where}.input")
        elif kind == "tool_result" and results:
            _string(block, "tool_use_id", f"{where}.tool_use_id", required=True)
            inner = block.get("content")
            if inner is not None and not isinstance(inner, str):
                _blocks(inner, f"{where}.content", results=False)
            _bool_at(block, "is_error", f"{where}.is_error")


def _bool_at(body: Mapping[str, Any], key: str, path: str) -> None:
    value = body.get(key)
    if value is not None and not isinstance(value, bool):
        raise _fail(path, f"must be true or false, not {_kind(value)}")


def _anthropic_message(m: Mapping[str, Any], path: str) -> None:
    content = m.get("content")
    if content is None:
        raise _fail(f"{path}.content", "required")
    if not isinstance(content, str):
        _blocks(content, f"{path}.content", results=m["role"] == "user")


def check_anthropic(body: Mapping[str, Any], start: int = 0) -> None:
    """A Messages body's shape, as ``read_anthropic`` reads it; ``start`` as for ``check_openai``."""
    _string(body, "model", "model")
    system = body.get("system")
    if system is not None and not isinstance(system, str):
        _blocks(system, "system", results=False)
    _messages(body, ANTHROPIC_ROLES, _anthropic_message, start)
    for i, t in enumerate(_list(body, "tools", "tools")):
        where = f"tools[{i}]"
        if not isinstance(t, dict):
            raise _fail(where, f"must be a tool object ({{'name': ..., 'input_schema': {{...}}}}), not {_kind(t)}")
        _string(t, "name", f"{where}.name", required=True)
        _string(t, "description", f"{where}.description")
        _object(t, "input_schema", f"{where}.input_schema")
    _tokens(body, "max_tokens")
    _bool(body, "stream")


CHECKS: dict[Protocol, Callable[[Mapping[str, Any], int], None]] = {"openai": check_openai, "anthropic": check_anthropic}
