"""The ``json`` shape: a JSON object or array. Its digest gives the top-level keys (an object's
members' keys, an array's length) and each array's first element in full, clipped to fit.

Named ``json_shape`` so that it never shadows the standard library's ``json``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import vak_context.context.evidence.shapes.text as text
from vak_context.context.evidence.shapes.base import Analysis, DigestShape
from vak_context.context.evidence.shapes.jsonscan import DeepJson, scan_members
from vak_context.context.evidence.shapes.quoting import clip, fit, more_note, plural

_FIRST_ITEM_TOO_LONG = "  [… the first item is too long to show here; the evidence id below recalls it …]"
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(", ", ": "))


def claims(seen: Analysis) -> bool:
    """The body parses as a JSON object or array (or is one nested too deep to parse)."""
    return seen.json is not None


def render(seen: Analysis, evidence_id: str, budget: int) -> str:
    value = seen.json
    if isinstance(value, DeepJson):
        return _deep_json(value, budget)
    if value is None:  # the caller forced shape="json" on something that is not
        return text.render(seen, evidence_id, budget)
    if isinstance(value, list):
        return fit(lambda width: _json_lines(value, width), budget, lambda kept: _FIRST_ITEM_TOO_LONG)
    return fit(lambda width: _json_lines(value, width), budget, more_note(len(value), "keys"))


def _dump(value: Any, width: int) -> str:
    """``value`` as compact JSON, clipped to ``width``; encodes only about ``width`` characters of it."""
    parts: list[str] = []
    size = 0
    try:
        for chunk in _ENCODER.iterencode(value):
            parts.append(chunk)
            size += len(chunk)
            if size > width:
                break
    except (RecursionError, ValueError):
        parts.append(" …")
    dumped = "".join(parts)
    if size <= width:
        return dumped
    return f"{dumped[:width]} … [continues]"


def _key(key: str, width: int = 80) -> str:
    """A key as a digest names it: bare when plain, else JSON-quoted; a long one by its start and size."""
    shown = key[:width]
    plain = shown.isprintable() and shown.strip() == shown and shown
    quoted = shown if plain else json.dumps(shown, ensure_ascii=False)
    return quoted if len(key) <= width else f"{quoted} … [a {len(key)}-char key]"


def _keys(keys: Iterator[str], total: int, width: int) -> str:
    """Keys joined by ", " up to about ``width`` characters, then how many more there are."""
    parts: list[str] = []
    size = 0
    for k in keys:
        if size > width:
            return ", ".join(parts) + f", … {total - len(parts)} more"
        parts.append(_key(k))
        size += len(parts[-1]) + 2
    return ", ".join(parts)


def _json_lines(value: Any, width: int) -> Iterator[str]:
    if isinstance(value, list):
        if not value:
            yield "JSON array, empty"
            return
        yield f"JSON array of {plural(len(value), 'item')}; first item in full:"
        yield "  " + _dump(value[0], width)
        return
    yield f"JSON object, {plural(len(value), 'key')}:"
    for key, member in value.items():
        name = _key(key)
        if isinstance(member, dict):
            inner = f": {_keys(iter(member), len(member), width)}" if member else ""
            yield f"  {name}: object, {plural(len(member), 'key')}{inner}"
        elif isinstance(member, list):
            first = f"; first in full: {_dump(member[0], width)}" if member else ""
            yield f"  {name}: array of {len(member)}{first}"
        else:
            yield f"  {name}: {_dump(member, width)}"


def _deep_json(value: DeepJson, budget: int) -> str:
    kind, members = value.kind, value.members
    note = "nested deeper than the parser goes; values shown as written"
    if kind == "array":
        if not members:
            return f"JSON array, empty ({note})"

        def array_lines(width: int) -> Iterator[str]:
            yield f"JSON array of {plural(len(members), 'item')} ({note}); first item in full:"
            yield "  " + clip(members[0][1], width)

        return fit(array_lines, budget, lambda kept: _FIRST_ITEM_TOO_LONG)

    def object_lines(width: int) -> Iterator[str]:
        yield f"JSON object, {plural(len(members), 'key')} ({note}):"
        for key, raw in members:
            name = _key(key or "")
            inner = scan_members(raw) if raw[:1] in ("[", "{") else None
            if inner is not None and inner[0] == "array":
                first = f"; first in full: {clip(inner[1][0][1], width)}" if inner[1] else ""
                yield f"  {name}: array of {len(inner[1])}{first}"
            elif inner is not None:
                names = _keys((k or "" for k, _ in inner[1]), len(inner[1]), width)
                yield f"  {name}: object, {plural(len(inner[1]), 'key')}: {names}"
            else:
                yield f"  {name}: {clip(raw, width)}"

    return fit(object_lines, budget, more_note(len(members), "keys"))


SHAPE = DigestShape("json", render)
