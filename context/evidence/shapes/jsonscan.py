"""JSON for the digests: a body parsed once, and one nested too deep to parse read by a flat scan.

``parse_json`` is the one place a digest parses a body (``Analysis.json`` calls it, once). A body
nested deeper than Python's parser goes becomes a ``DeepJson``: its top-level members from
``scan_members``, one linear pass over the tokens, with no regex that can backtrack quadratically
(JSON strings are scanned possessively).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DeepJson:
    """JSON nested deeper than Python's parser goes: its top-level members from a flat scan."""

    kind: str  # "object" or "array"
    members: list[tuple[str | None, str]]


_JSON_START = re.compile(r"\s*[\[{]")


def parse_json(body: str) -> Any:
    """A JSON object or array, ``DeepJson`` for one too deep to parse, else None. Parses once."""
    if not _JSON_START.match(body) or body.rstrip()[-1:] not in ("]", "}"):
        return None
    try:
        value = json.loads(body)
    except RecursionError:
        scanned = scan_members(body)
        return None if scanned is None else DeepJson(*scanned)
    except ValueError:
        return None
    return value if isinstance(value, dict | list) else None


_JSON_TOKEN = re.compile(r'(?P<s>"(?:[^"\\]++|\\.)*+(?P<close>")?)|[\[\]{},:]', re.DOTALL)


def scan_members(
    text: str, start: int = 0, end: int | None = None
) -> tuple[str, list[tuple[str | None, str]]] | None:
    """The top-level members of a JSON container without recursion: ("object"|"array", [(key, raw)]).

    None when the brackets do not balance or a string is not closed. Keys are decoded; values stay
    raw text, stripped. One pass over the tokens: linear in the text.
    """
    end = len(text) if end is None else end
    m0 = re.compile(r"\s*([\[{])").match(text, start, end)
    if m0 is None:
        return None
    kind = "object" if m0.group(1) == "{" else "array"
    members: list[tuple[str | None, str]] = []
    depth, key, value_start = 1, None, m0.end()
    expecting_key = kind == "object"
    for tok in _JSON_TOKEN.finditer(text, m0.end(), end):
        t = tok.group()
        if t[0] == '"':
            if tok.group("close") is None:
                return None  # a string that never closes
            if depth == 1 and expecting_key:
                key, expecting_key = _decoded(t), False
        elif t in "[{":
            depth += 1
        elif t in "]}":
            depth -= 1
            if depth == 0:
                raw = text[value_start : tok.start()].strip()
                if raw or members:
                    members.append((key, raw))
                return kind, members
        elif depth == 1 and t == ":":
            value_start = tok.end()
        elif depth == 1 and t == ",":
            members.append((key, text[value_start : tok.start()].strip()))
            key, value_start, expecting_key = None, tok.end(), kind == "object"
    return None


def _decoded(token: str) -> str:
    try:
        value = json.loads(token)
    except ValueError:
        return token[1:-1]  # an escape JSON does not allow: show the key as written
    return value if isinstance(value, str) else token[1:-1]
