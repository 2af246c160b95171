"""What a format module gives the registry: a ``Document`` to sniff and parse, and its ``ImportFormat``.

A format module (``importers/<format>.py``) has ``sniff(doc)``: does this file look like mine?
(cheap, reads only the first records, never raises) and ``parse(doc)``: its recordings (raises
``RecordShapeError`` naming where a record with the wrong shape is). ``vak_context.importers.registry``
asks each format's ``sniff`` in a fixed order; the first to claim the file parses it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vak_context.importers.recording import Recording


@dataclass(frozen=True)
class Document:
    """A recorded-session file as read, before its format is known: JSON Lines objects, or one JSON value."""

    stem: str  # the file name up to its first dot: a recording's name starts with it
    rows: list[tuple[int, dict[str, Any]]] | None = None  # JSON Lines: (line number, object), never empty
    data: Any = None  # JSON: the whole document

    @property
    def first_row(self) -> dict[str, Any]:
        """The first object of a JSON Lines file (``{}`` for a JSON document)."""
        return self.rows[0][1] if self.rows else {}

    @property
    def first_item(self) -> dict[str, Any] | None:
        """The first element of a JSON document that is a non-empty array of objects at its start,
        else None. (The parsers refuse a later element that is not an object.)"""
        data = self.data
        if self.rows is None and isinstance(data, list) and data and isinstance(data[0], dict):
            return data[0]
        return None

    @property
    def object(self) -> dict[str, Any] | None:
        """The document when it is one JSON object, else None."""
        return self.data if self.rows is None and isinstance(self.data, dict) else None

    def describe(self) -> str:
        """What the file holds, for the error that says no format claimed it."""
        if self.rows is not None:
            return f"JSONL objects with keys {sorted(self.first_row)[:8]}"
        if isinstance(self.data, dict):
            return f"a JSON object with keys {sorted(self.data)[:8]}"
        return f"JSON {type(self.data).__name__}" + (" (empty)" if not self.data else "")


@dataclass(frozen=True)
class ImportFormat:
    """One recorded-session format: its name (as ``vak import`` reports it), its sniff and its parser."""

    name: str
    sniff: Callable[[Document], bool]
    parse: Callable[[Document], list[Recording]]
