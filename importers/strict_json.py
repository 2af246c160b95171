"""Strict JSON for the importers: values the ledger can hold, and where each record sits in its file.

``json.loads`` accepts things the ledger cannot store: ``NaN`` and ``Infinity`` (pydantic would
quietly turn them into ``null``), numbers too large to be a float (``1e400`` becomes infinity), an
integer past Python's 4,300-digit limit (a ``ValueError`` with no position) and ``\\ud800``
escapes, which decode to lone surrogates that no UTF-8 file can hold. ``loads`` parses with hooks
that mark each of these, and ``first_bad_value`` finds the first one in document order, so an
import rejects the record that holds it, naming its line, before anything is written.

Recordings that are one JSON document (tau-bench, mini-swe-agent, SWE-agent, a chat array) say
where a record is as a path of keys and indexes (a ``Where``); ``line_of_path`` turns a path into
its line in the file. It re-scans the text, so it runs only to report an error. JSON Lines
recordings use ``(line number, ...)``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

Where = tuple[int | str, ...]

# Errors a parser hits when a record has the wrong shape (a string where an object belongs, a
# missing key, a number that is not one). ``record_at`` turns them into a RecordShapeError.
SHAPE_ERRORS = (AttributeError, TypeError, KeyError, ValueError, IndexError, OverflowError, RecursionError)


class RecordShapeError(ValueError):
    """A record that does not have the shape its format needs, and where it is.

    Internal to the importers: ``vak_context.importers`` turns it into ``InvalidRecording`` with the
    file and line (only it knows the file).
    """

    def __init__(self, where: Where, message: str) -> None:
        self.where, self.message = where, one_line(message)
        super().__init__(self.message)


def one_line(text: str, limit: int = 300) -> str:
    """``text`` on one line (pydantic's errors span several), cut to ``limit`` characters."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


@contextmanager
def record_at(where: Where, what: str) -> Iterator[None]:
    """Errors parsing the record at ``where`` become a RecordShapeError naming it."""
    try:
        yield
    except RecordShapeError:
        raise
    except SHAPE_ERRORS as exc:
        raise RecordShapeError(
            where, f"{what} does not have the expected shape ({type(exc).__name__}: {exc})"
        ) from exc


def kind_of(value: Any) -> str:
    """How an error names a JSON value's type: "an object", "an array", "a string", "null", "a int"..."""
    if value is None:
        return "null"
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    return names.get(type(value), f"a {type(value).__name__}")


def nested(prefix: Where) -> Callable[[int], Where]:
    """``where`` for a list of records at ``prefix``: record ``i`` is at ``(*prefix, i)``."""
    return lambda i: (*prefix, i)


def obj(value: Any, where: Where, what: str) -> dict[str, Any]:
    """``value`` when it is an object (``None`` counts as empty), else a RecordShapeError."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise RecordShapeError(where, f"{what} is {kind_of(value)}, not an object")
    return value


def array(value: Any, where: Where, what: str) -> list[Any]:
    """``value`` when it is an array (``None`` counts as empty), else a RecordShapeError."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise RecordShapeError(where, f"{what} is {kind_of(value)}, not an array")
    return value


# The largest token count a recording may claim: past 2^53 a count is no longer exact as a float.
MAX_COUNT = 2**53


def count(value: Any, where: Where, what: str) -> int:
    """A token count: a whole number from 0 to 2^53 (``None`` counts as 0)."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RecordShapeError(where, f"{what} is {kind_of(value)}, not a number")
    if not (0 <= value <= MAX_COUNT) or value != int(value):
        raise RecordShapeError(where, f"{what} is {value!r}, not a whole number from 0 to 2^53")
    return int(value)


# ------------------------------------------------------------------ values the ledger cannot hold


class BadNumber:
    """Stands in for a number the ledger cannot store; ``first_bad_value`` reports it."""

    def __init__(self, text: str, why: str) -> None:
        self.text, self.why = text, why


def _parse_constant(name: str) -> BadNumber:
    return BadNumber(name, f"{name} is not JSON and the ledger cannot store it")


def _parse_float(text: str) -> float | BadNumber:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        return BadNumber(text, f"{text[:40]} is too large to be a number the ledger can store")
    return value


def _parse_int(text: str) -> int | BadNumber:
    if len(text.lstrip("-")) > 4000:  # Python refuses past 4,300 digits, with no position
        return BadNumber(text, f"an integer with {len(text):,} digits is too large to store")
    return int(text)


DECODER = json.JSONDecoder(parse_constant=_parse_constant, parse_float=_parse_float, parse_int=_parse_int)


def loads(text: str) -> Any:
    """``json.loads`` with every value the ledger cannot hold replaced by a BadNumber (see the module doc)."""
    return DECODER.decode(text)


def _text_problem(text: str) -> str | None:
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (
            f"a string holds a lone surrogate (\\u{ord(text[exc.start]):04x} at character {exc.start}), "
            "which is not Unicode text and cannot be stored as UTF-8"
        )
    return None


def first_bad_value(value: Any) -> tuple[Where, str] | None:
    """(path, what is wrong) of the first value in document order the ledger cannot hold, else None.

    Iterative, so a deeply nested record cannot exhaust the stack.
    """
    stack: list[tuple[Where, Any]] = [((), value)]
    while stack:
        path, v = stack.pop()
        if isinstance(v, BadNumber):
            return path, v.why
        if isinstance(v, str):
            problem = _text_problem(v)
            if problem:
                return path, problem
        elif isinstance(v, dict):
            children: list[tuple[Where, Any]] = []
            for k, child in v.items():
                problem = _text_problem(k)
                if problem:
                    return path, f"an object key: {problem}"
                children.append(((*path, k), child))
            stack.extend(reversed(children))
        elif isinstance(v, list):
            stack.extend(((*path, i), child) for i, child in reversed(list(enumerate(v))))
    return None


# ------------------------------------------------------------------ where a path is in the text

_WS = re.compile(r"[ \t\n\r]*")


def _skip_ws(text: str, pos: int) -> int:
    m = _WS.match(text, pos)
    return m.end() if m else pos


def offset_of_path(text: str, path: Where) -> int | None:
    """The offset in ``text`` (one JSON document) of the value at ``path``, or None if it is not there.

    Duplicate keys resolve to the last one, as ``json.loads`` does.
    """
    pos = _skip_ws(text, 0)
    try:
        for step in path:
            if isinstance(step, int):
                if text[pos] != "[":
                    return None
                pos = _skip_ws(text, pos + 1)
                for _ in range(step):
                    _, pos = DECODER.raw_decode(text, pos)
                    pos = _skip_ws(text, pos)
                    if text[pos] != ",":
                        return None
                    pos = _skip_ws(text, pos + 1)
            else:
                if text[pos] != "{":
                    return None
                pos = _skip_ws(text, pos + 1)
                found = None
                while text[pos] != "}":
                    key, pos = DECODER.raw_decode(text, pos)
                    pos = _skip_ws(text, pos)
                    pos = _skip_ws(text, pos + 1)  # the ':'
                    if key == step:
                        found = pos
                    _, pos = DECODER.raw_decode(text, pos)
                    pos = _skip_ws(text, pos)
                    if text[pos] == ",":
                        pos = _skip_ws(text, pos + 1)
                if found is None:
                    return None
                pos = found
    except (IndexError, ValueError, RecursionError):
        return None
    return pos


def line_of_path(text: str, path: Where) -> int | None:
    """The 1-based line of the value at ``path`` in ``text``, or None if it is not there."""
    pos = offset_of_path(text, path)
    return None if pos is None else text.count("\n", 0, pos) + 1


_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def line_of_depth(text: str, limit: int = 500) -> int | None:
    """The line where nesting in ``text`` first goes deeper than ``limit`` (a RecursionError names
    no position), or None if it never does."""
    depth = 0
    for m in _TOKEN.finditer(text):
        c = m.group()
        if c in "[{":
            depth += 1
            if depth > limit:
                return text.count("\n", 0, m.start()) + 1
        elif c in "]}":
            depth -= 1
    return None
