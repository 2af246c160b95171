"""Canonical JSON: the one byte encoding that entry ids are hashed over.

The rules (also in docs/LEDGER_FORMAT.md):

* UTF-8, no byte-order mark, no whitespace outside strings (separators ``,`` and ``:``).
* Object keys are strings, sorted by Unicode code point; duplicate keys cannot occur.
* Strings are written as-is except ``"``, ``\\`` and the control characters U+0000-U+001F,
  which are escaped (``\\n``, ``\\r``, ``\\t``, ``\\b``, ``\\f``, else ``\\u00XX`` in lower-case hex).
  Non-ASCII characters are written as their UTF-8 bytes, never as ``\\u`` escapes.
  A lone surrogate is not valid UTF-8 and is rejected.
* ``true``, ``false``, ``null``.
* Integers in plain decimal. Floats in the shortest form that round-trips (Python's ``repr``),
  always with a ``.`` or an exponent so they stay floats; ``-0.0`` is written ``0.0``;
  NaN and the infinities are rejected.
* Lists and tuples are arrays. Anything else (bytes, sets, objects) is rejected: raw bytes
  travel in an entry's blob, hashed separately.

So ``encode(decode(b)) == b`` for every canonical ``b``, and equal values give equal bytes.
"""

from __future__ import annotations

import json
import math
from typing import Any

from pydantic_core import PydanticSerializationError
from pydantic_core import to_json as _compiled_to_json

from vak_context.errors import InvalidUtf8, NonCanonicalValue

_encoder = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, sort_keys=True, separators=(",", ":"), check_circular=True
)


def _reject(value: Any) -> Any:
    raise NonCanonicalValue(f"{type(value).__name__} is not JSON")


# The C scanner behind json.dumps, built once: JSONEncoder.encode builds a new one per call, which
# costs as much as encoding a small payload. No circular check: pydantic's dumps are trees.
_c_make_encoder: Any = getattr(json.encoder, "c_make_encoder", None)  # not in typeshed; None without _json
_c_encode: Any = (
    _c_make_encoder(None, _reject, json.encoder.encode_basestring, None, ":", ",", True, False, False)
    if _c_make_encoder is not None else None
)


def _normalise(value: Any, path: str) -> Any:
    """Check a value is canonical-encodable and normalise -0.0; returns a JSON-ready value."""
    if value is None or isinstance(value, bool | int | str):
        if isinstance(value, str):
            _check_text(value, path)
        return value
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise NonCanonicalValue(f"{path}: {value!r} has no JSON encoding; use null or a string")
        return 0.0 if value == 0.0 else value
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise NonCanonicalValue(f"{path}: object key {k!r} is not a string")
            _check_text(k, f"{path}.<key>")
            out[k] = _normalise(v, f"{path}.{k}")
        return out
    if isinstance(value, list | tuple):
        return [_normalise(v, f"{path}[{i}]") for i, v in enumerate(value)]
    raise NonCanonicalValue(
        f"{path}: {type(value).__name__} is not JSON; store bytes as an entry blob, "
        "and convert other values to str, int, float, bool, None, list or dict"
    )


def _check_text(text: str, path: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidUtf8(path, f"lone surrogate at index {exc.start}") from exc


def encode(value: Any) -> bytes:
    """The canonical bytes of a JSON value."""
    return _encoder.encode(_normalise(value, "$")).encode("utf-8")


def encode_str_keyed(value: Any) -> bytes:
    """``encode`` for values whose object keys are all strings (pydantic's JSON-mode dumps).

    Runs the C encoder directly and falls back to the checked path only when something needs it
    (NaN, a lone surrogate, -0.0, a non-JSON type), so both paths give the same bytes.
    """
    try:
        if _c_encode is not None and type(value) is dict:
            text = "".join(_c_encode(value, 0))
        else:
            text = _encoder.encode(value)
        data = text.encode("utf-8")
    except (NonCanonicalValue, ValueError, TypeError, UnicodeEncodeError):  # the checked path says why
        return encode(value)
    if b"-0.0" in data:
        return encode(value)
    return data


def encode_plain_object(obj: dict[str, Any]) -> bytes | None:
    """``encode(obj)`` through pydantic-core's compiled JSON writer, for the common flat payload:
    keys already in sorted order, each value a str, an int, a bool, None, or a list or tuple of str.

    On those, pydantic-core writes what ``encode`` writes (the same escapes, raw UTF-8, big ints in
    decimal: tests/unit/test_canonical_fast.py checks it on adversarial input) in about a third of the
    time. Anything else (a float, a nested object, a subclass, unsorted keys, a lone surrogate)
    returns None, and the caller uses ``encode_str_keyed``, which gives today's bytes or error.
    """
    last = ""
    first = True
    for key, value in obj.items():
        if type(key) is not str or (not first and key <= last):
            return None
        first, last = False, key
        t = type(value)
        if t is str or t is int or t is bool or value is None:
            continue
        if t is tuple or t is list:
            for item in value:
                if type(item) is not str:
                    return None
            continue
        return None
    try:
        return _compiled_to_json(obj)
    except (PydanticSerializationError, ValueError, TypeError):  # a lone surrogate: not UTF-8
        return None


def decode(data: bytes) -> Any:
    """Parse UTF-8 JSON bytes. Raises InvalidUtf8 or NonCanonicalValue on bad input."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidUtf8("JSON bytes", f"bad byte at offset {exc.start}") from exc
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise NonCanonicalValue(f"not JSON: {exc.msg} at offset {exc.pos}") from exc


def is_canonical(data: bytes) -> bool:
    """True when ``data`` is exactly the canonical encoding of the value it holds."""
    try:
        return encode(decode(data)) == data
    except (InvalidUtf8, NonCanonicalValue):
        return False


def _reject_constant(name: str) -> Any:
    raise NonCanonicalValue(f"{name} has no canonical JSON encoding")
