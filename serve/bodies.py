"""A request body as ``vak serve`` reads it: bounded before it is parsed, so no body can cost more than the
limits say (issue 35).

* its content type must be JSON, or none (415 otherwise);
* its size is bounded while it streams in: a ``Content-Length`` over ``MAX_BODY_BYTES`` is refused before a
  byte is read, and a body sent without one is refused as soon as what was read passes the limit (413);
* a body that stops arriving for ``idle_s`` is refused (408), so a half-sent request holds nothing;
* it is parsed by ``orjson`` where that accepts it, else by ``json`` (``loads_json``: the same values, the same
  refusals);
* its nesting depth is bounded by the parser: ``json.loads`` (C) stops at the interpreter's recursion limit
  with a ``RecursionError``, refused here as a 400, and a parsed body deeper than ``MAX_DEPTH`` is refused
  before any field is read (a walk with its own stack). A byte pre-scan was measured and not kept: a body of
  small strings costs it seconds where the parser takes a fraction of one;
* it must be a JSON object; its fields' shapes are checked by ``serve/shapes.py``.

Every refusal is an :class:`~vak_context.errors.InvalidBody` whose status the app answers with.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from typing import Any

from vak_context.errors import InvalidBody

try:
    import orjson
except ImportError:  # pragma: no cover - a dependency; json alone parses every body the same
    orjson = None  # type: ignore[assignment]

MAX_BODY_BYTES = 16 * 1024 * 1024  # a long history with large tool results stays far below it
MAX_DEPTH = 64  # JSON nesting: a request's deepest part is a tool's schema or a call's arguments
BODY_IDLE_S = 30.0  # the longest pause between two parts of a body


def check_content_type(header: str | None) -> None:
    """JSON, or no content type at all (read as JSON, as before); any other type is refused (415)."""
    media = (header or "application/json").split(";", 1)[0].strip().lower()
    if media != "application/json":
        raise InvalidBody(f"the request's content type is {header or 'missing'!r}; send the body as JSON with "
                          "'Content-Type: application/json'", 415)


async def read_body(chunks: AsyncIterator[bytes], length: str | None, *, limit: int = MAX_BODY_BYTES,
                    idle_s: float = BODY_IDLE_S) -> bytes:
    """The body from ``chunks`` (the request's stream), refused once it passes ``limit`` bytes or pauses
    for ``idle_s``: never read whole first."""
    if length is not None:
        if not length.strip().isdigit():
            raise InvalidBody(f"the Content-Length header {length!r} is not a number of bytes")
        if int(length) > limit:
            raise InvalidBody(_too_large(int(length), limit), 413)
    parts: list[bytes] = []
    size = 0
    iterator = aiter(chunks)
    while True:
        try:
            async with asyncio.timeout(idle_s):  # no task per chunk, as wait_for would make
                chunk = await anext(iterator)
        except StopAsyncIteration:
            break
        except TimeoutError:
            raise InvalidBody(f"the request body stopped arriving for {idle_s:g} s after {size} bytes; send "
                              "the whole body at once", 408) from None
        size += len(chunk)
        if size > limit:
            raise InvalidBody(_too_large(size, limit, more=True), 413)
        parts.append(chunk)
    return b"".join(parts)


def _too_large(size: int, limit: int, *, more: bool = False) -> str:
    return (f"the request body is {'over ' if more else ''}{size:,} bytes, over vak serve's limit of {limit:,}; "
            "send less history (vak serve keeps the session: a client may send only what is new under the "
            "same x-vak-session) or start the server with a larger --max-body")


def depth(value: Any) -> int:
    """The deepest nesting of lists and objects in a parsed value, walked a level at a time (no recursion,
    so no depth can crash it; a list per level, not a tuple per node: a third of the walk's time)."""
    deepest, level = 0, [value] if isinstance(value, dict | list) else []
    while level:
        deepest += 1
        below: list[Any] = []
        for node in level:
            below += [c for c in (node.values() if isinstance(node, dict) else node) if isinstance(c, (dict, list))]
        level = below
    return deepest


def loads_json(data: bytes | str) -> Any:
    """``orjson.loads`` where it parses the body (a third of ``json.loads``'s time on a 100-turn history of
    700 kB); anything it refuses is parsed again by ``json.loads``, so what is accepted and every refusal's
    message stay ``json``'s (orjson also refuses NaN, integers over 64 bits and nesting past 1,024)."""
    if orjson is not None:
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    return json.loads(data)


def parse(data: bytes, *, max_depth: int = MAX_DEPTH) -> dict[str, Any]:
    """The body as a JSON object, its depth checked first."""
    value = load(data, max_depth=max_depth)
    check_depth(depth(value), max_depth)
    return value


def load(data: bytes, *, max_depth: int = MAX_DEPTH) -> dict[str, Any]:
    """The body as a JSON object, its depth not checked yet (``check_depth``)."""
    if not data.strip():
        raise InvalidBody("the request body is empty; send a JSON object")
    try:
        value = loads_json(data)
    except UnicodeDecodeError as exc:
        raise InvalidBody(f"the request body is not UTF-8 ({exc.reason} at byte {exc.start}); send JSON in UTF-8") from None
    except ValueError as exc:
        raise InvalidBody(f"the request body is not JSON: {exc}") from None
    except RecursionError:  # the C parser stops at the interpreter's recursion limit: refused, not a crash
        raise InvalidBody(_too_deep(f"over {sys.getrecursionlimit()}", max_depth)) from None
    if not isinstance(value, dict):
        raise InvalidBody(f"the request body is a JSON {type(value).__name__}; send a JSON object")
    return value


def check_depth(deepest: int, max_depth: int = MAX_DEPTH) -> None:
    """A body ``deepest`` levels deep (``depth``) is refused past ``max_depth``."""
    if deepest > max_depth:
        raise InvalidBody(_too_deep(str(deepest), max_depth))


def _too_deep(levels: str, limit: int) -> str:
    return (f"the request body nests {levels} levels deep, over vak serve's limit of {limit}; flatten its deepest "
            "part (a tool's schema or a call's arguments)")
