"""A tool's JSON schema from its Python signature, and its descriptions from its docstring. Pure.

Parameters map by their type hint: ``str`` -> string, ``int`` -> integer, ``float`` -> number, ``bool`` ->
boolean, ``list[X]``/``tuple[X, ...]`` -> array of X, ``dict``/``dict[str, X]`` -> object, ``Literal[...]``
-> enum, ``X | None``/``Optional[X]`` -> X or null; ``Annotated[X, "text"]`` gives the parameter's
description. A parameter with a default is optional and its default is recorded (when JSON can hold it).
Descriptions come from the docstring: the first paragraph describes the tool, and a Google-style
``Args:`` section or a numpy-style ``Parameters`` section describes each parameter.

A hint with no JSON counterpart (a class, ``Any``, no hint at all, ``*args``) is refused with
:class:`~vak_context.errors.InvalidInput` naming the parameter: the model can only be told what a schema says,
so a tool either says it or passes ``schema=`` explicitly.
"""

from __future__ import annotations

import inspect
import json
import re
import types
import typing
from collections.abc import Callable
from typing import Any, Literal, Union, get_args, get_origin

from vak_context.errors import InvalidInput

_SCALARS: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}
# Section headers that end an Args/Parameters section (Google and numpy spellings).
_SECTIONS = re.compile(r"^(Args|Arguments|Parameters|Params|Returns?|Yields?|Raises?|Examples?|Notes?|"
                       r"Attributes|See Also|References|Warnings?)\s*:?\s*$", re.IGNORECASE)
_GOOGLE_ARG = re.compile(r"^(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_NUMPY_ARG = re.compile(r"^(\*{0,2}\w+)\s*(?::.*)?$")


def describe_callable(fn: Callable[..., Any]) -> tuple[str, dict[str, str]]:
    """(the tool's description, each parameter's description) from ``fn``'s docstring."""
    doc = inspect.getdoc(fn) or ""
    return doc_description(doc), doc_params(doc)


def doc_description(doc: str) -> str:
    """The docstring's first paragraph, on one line."""
    first = re.split(r"\n\s*\n", doc.strip(), maxsplit=1)[0] if doc.strip() else ""
    return " ".join(first.split())


def doc_params(doc: str) -> dict[str, str]:
    """Parameter descriptions from a Google ``Args:`` or a numpy ``Parameters`` section."""
    lines = doc.expandtabs().splitlines()
    out: dict[str, str] = {}
    for i, line in enumerate(lines):
        head = line.strip()
        if not _SECTIONS.match(head) or head.rstrip(":").lower() not in ("args", "arguments", "parameters", "params"):
            continue
        numpy = i + 1 < len(lines) and set(lines[i + 1].strip()) == {"-"}
        body = lines[i + (2 if numpy else 1):]
        out.update(_numpy_params(body) if numpy else _google_params(body))
    return out


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _google_params(body: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    base, current = None, None  # the entries' indent; the entry a continuation line belongs to
    for line in body:
        if not line.strip():
            continue
        if _SECTIONS.match(line.strip()) and (base is None or _indent(line) < base):
            break
        if base is None:
            base = _indent(line)
        if _indent(line) < base:
            break
        m = _GOOGLE_ARG.match(line.strip())
        if _indent(line) == base and m:
            current = m.group(1).lstrip("*")
            out[current] = m.group(2).strip()
        elif current is not None:
            out[current] = f"{out[current]} {line.strip()}".strip()
    return out


def _numpy_params(body: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    base, current = None, None
    for line in body:
        if not line.strip():
            continue
        if base is None:
            base = _indent(line)
        if _indent(line) < base or (_indent(line) == base and _SECTIONS.match(line.strip())):
            break
        m = _NUMPY_ARG.match(line.strip())
        if _indent(line) == base and m:
            current = m.group(1).lstrip("*")
            out[current] = ""
        elif current is not None:
            out[current] = f"{out[current]} {line.strip()}".strip()
    return out


def schema_of(fn: Callable[..., Any], tool: str, descriptions: dict[str, str] | None = None) -> dict[str, Any]:
    """The JSON schema (an object) of ``fn``'s keyword parameters; ``tool`` names it in errors."""
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except (NameError, TypeError) as exc:
        raise InvalidInput(f"tool {tool!r}: its type hints cannot be read ({exc}); import the names they use "
                           "at module level or pass schema= explicitly") from exc
    descriptions = descriptions or {}
    properties: dict[str, Any] = {}
    required: list[str] = []
    for name, param in inspect.signature(fn).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise InvalidInput(f"tool {tool!r}: parameter {name!r} is {param.kind.description}; a tool is called "
                               "with named arguments only: use plain parameters or pass schema= explicitly")
        if name not in hints:
            raise InvalidInput(f"tool {tool!r}: parameter {name!r} has no type hint; annotate it (str, int, "
                               "float, bool, list[...], dict, Literal[...], X | None) or pass schema= explicitly")
        prop = _type_schema(hints[name], tool, name)
        if descriptions.get(name) and "description" not in prop:
            prop["description"] = descriptions[name]
        if param.default is param.empty:
            required.append(name)
        elif _jsonable(param.default):
            prop["default"] = param.default
        properties[name] = prop
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def _type_schema(hint: Any, tool: str, param: str) -> dict[str, Any]:
    origin, args = get_origin(hint), get_args(hint)
    if origin is typing.Annotated:
        inner = _type_schema(args[0], tool, param)
        text = next((a for a in args[1:] if isinstance(a, str)), None)
        return {**inner, "description": text} if text else inner
    if hint in _SCALARS:
        return {"type": _SCALARS[hint]}
    if origin is Literal:
        kinds = {_SCALARS.get(type(a)) for a in args}
        out: dict[str, Any] = {"enum": list(args)}
        if len(kinds) == 1 and None not in kinds:
            out = {"type": kinds.pop(), **out}
        return out
    if origin in (Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if len(rest) == len(args):
            return {"anyOf": [_type_schema(a, tool, param) for a in args]}
        inner = _type_schema(rest[0], tool, param) if len(rest) == 1 else \
            {"anyOf": [_type_schema(a, tool, param) for a in rest]}
        if isinstance(inner.get("type"), str) and "enum" not in inner:
            return {**inner, "type": [inner["type"], "null"]}
        return {"anyOf": [inner, {"type": "null"}]}
    if hint in (list, tuple) or origin in (list, tuple):
        item = args[0] if args and args[0] is not Ellipsis else None
        return {"type": "array", **({"items": _type_schema(item, tool, param)} if item is not None else {})}
    if hint is dict or origin is dict:
        value = args[1] if len(args) == 2 else None
        return {"type": "object", **({"additionalProperties": _type_schema(value, tool, param)} if value else {})}
    raise InvalidInput(f"tool {tool!r}: parameter {param!r} has type {hint!r}, which has no JSON schema here; use "
                       "str, int, float, bool, list[...], dict[str, ...], Literal[...] or X | None, or pass schema=")
