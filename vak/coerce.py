"""The one lenient integer reading, for values that arrive as JSON from outside (a provider's usage and
catalogue fields, a model's tool arguments): both the provider adapters and recall use it, so it lives in
the base layer.
"""

from __future__ import annotations

import re
from typing import Any

# ASCII digits only: str.isdigit() also accepts "²" and "①", which int() then refuses with a ValueError.
_INTEGER_TEXT = re.compile(r"-?[0-9]+")


def int_or_none(value: Any) -> int | None:
    """``value`` as an int when it is one, else None; it never raises.

    * an ``int`` is itself, negative ones included; a ``bool`` is None (JSON ``true`` is not a count);
    * a finite ``float`` with no fractional part is that int (``3.0`` -> 3); any other float is None;
    * a ``str`` of ASCII digits with an optional leading ``-``, surrounded by any whitespace, is that
      number (``" -12\\n"`` -> -12); anything else (``"+3"``, ``"3.0"``, ``"1e3"``, ``"²"``, ``""``) is None;
    * every other type is None.

    Callers that need a count or a position check the sign themselves (recall says why a range that
    starts before 1 is refused; a provider's usage treats a missing field as 0).
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else None  # inf and nan are not integers
    if isinstance(value, str):
        text = value.strip()
        return int(text) if _INTEGER_TEXT.fullmatch(text) else None
    return None
