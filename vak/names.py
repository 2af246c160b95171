"""Validation of names that become paths (sessions, models, files)."""

from __future__ import annotations

import re

from vak_context.errors import InvalidName

# fullmatch, not match with "$": "$" also matches before a trailing newline ("s\n" would pass).
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def check_name(name: object, what: str = "session name") -> str:
    """Return ``name`` if it is safe as one path component, else raise InvalidName.

    Safe: 1-128 characters of letters, digits, '.', '_' and '-', starting with a letter or
    digit (so never '.', '..', a hidden file, or anything with a separator).
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name) or name in {".", ".."}:
        raise InvalidName(
            what,
            name,
            "use 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit",
        )
    return name
