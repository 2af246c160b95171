"""What the session's full-text index holds (issue 25): ledger entries as search documents. Pure.

A document is a window of lines of one evidence body (``WINDOW_LINES`` lines, the next window starting
``WINDOW_LINES - OVERLAP_LINES`` lines later, so a passage that straddles a window edge is whole in one of
them), keyed by session, turn, evidence id and line range; a turn card, a presentation and a directive
are one document each. Lines are the ones recall counts (``vak_context.context.evidence.window``: split on
``"\\n"``, 1-based, inclusive), so a hit's range is exactly the ``recall({"id", "range"})`` that returns it.

What is indexed of an evidence body: its text. A JSON body is indexed as text too, with its string
escapes decoded (``\\n``, ``\\u00e9``, ...), so the words inside its values are terms. Its digest
(``context/evidence/shapes``) is not what is indexed: a digest is capped at ``DIGEST_CHARS`` and would
drop the rare values deep in a result that search exists to find. A binary body (``encoding ==
"binary"``) has no documents, and neither has the result of ``recall`` or ``session_search``
(``COPY_TOOLS``): each is a copy of what the session already holds, and indexed it would crowd the
hits with the searches and recalls a model made, ahead of the results they point at.

``SessionDocs`` turns entries into documents in seq order, tracking the turn each falls in (the number of
directives so far, as ``TurnIndex`` numbers them; 0 before the first directive).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from vak_context.context.evidence.bodytext import body_text
from vak_context.context.evidence.window import recall_call
from vak_context.context.history.turncard import render_card
from vak_context.events.payloads import Directive, EvidenceBody, Presentation, TurnCard

WINDOW_LINES = 40
OVERLAP_LINES = 10
COPY_TOOLS = frozenset({"recall", "session_search"})  # their results copy indexed text: not indexed again
SHORT = 12  # evidence ids are shown by their first 12 hex digits, as cards show them (recall resolves a prefix)

_JSON_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|[\"\\/bfnrt])")
_SIMPLE = {'"': '"', "\\": "\\", "/": "/", "b": " ", "f": " ", "n": "\n", "r": " ", "t": " "}


@dataclass(frozen=True)
class SearchDoc:
    """One document. ``kind``: evidence | card | presentation | directive; ``ref``: the entry it comes
    from (the evidence body's id for evidence); ``start``/``end``: its lines (evidence only, else 0)."""

    key: str
    session: str
    turn: int
    kind: str
    ref: str
    seq: int
    start: int
    end: int
    text: str
    tool: str = ""

    def recall(self) -> str:
        """The exact recall call that returns what this document was made from."""
        if self.kind == "evidence":
            return recall_call(self.ref[:SHORT], (self.start, self.end))
        if self.kind == "presentation":
            return f"recall({json.dumps({'presentation': self.ref[:SHORT]})})"
        return f"recall({json.dumps({'turn': self.turn})})"


def _unescape(match: re.Match[str]) -> str:
    code = match.group(1)
    if code[0] == "u":
        ch = chr(int(code[1:], 16))
        return ch if not 0xD800 <= ord(ch) <= 0xDFFF else " "
    return _SIMPLE[code]


def _looks_json(text: str) -> bool:
    head = text.lstrip()[:1]
    return head in ("{", "[")


def windows(text: str, size: int = WINDOW_LINES, overlap: int = OVERLAP_LINES) -> Iterator[tuple[int, int, str]]:
    """(first line, last line, the lines' text) of each window of ``text``; none for an empty text."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # a body ending in "\n" has no empty last line (window.py counts lines the same way)
    step = max(size - overlap, 1)
    first = 0
    while first < len(lines):
        last = min(first + size, len(lines))
        yield first + 1, last, "\n".join(lines[first:last])
        if last == len(lines):
            break
        first += step


def evidence_docs(session: str, turn: int, seq: int, evidence_id: str, meta: EvidenceBody,
                  blob: bytes) -> list[SearchDoc]:
    """The windows of one evidence body (none for a binary one, nor for a copy: ``COPY_TOOLS``)."""
    if meta.encoding != "utf-8" or meta.tool_name in COPY_TOOLS:
        return []
    text = body_text(blob, meta.encoding)
    is_json = _looks_json(text)
    out = []
    for start, end, chunk in windows(text):
        indexed = _JSON_ESCAPE.sub(_unescape, chunk) if is_json else chunk
        out.append(SearchDoc(f"{evidence_id}:{start}", session, turn, "evidence", evidence_id, seq, start, end,
                             indexed, meta.tool_name))
    return out


def _presentation_text(p: Presentation) -> str:
    return f"{p.semantic_type}\n" + json.dumps(p.payload, ensure_ascii=False, sort_keys=True, indent=1)


@dataclass
class SessionDocs:
    """Entries of one session, in seq order, to documents. Keeps the turn count between calls."""

    session: str
    turn: int = 0
    turn_of: dict[str, int] = field(default_factory=dict)  # directive id -> its turn

    def add(self, seq: int, entry_id: str, payload: Any, blob: bytes | None) -> list[SearchDoc]:
        if isinstance(payload, Directive):
            self.turn += 1
            self.turn_of[entry_id] = self.turn
            return [SearchDoc(entry_id, self.session, self.turn, "directive", entry_id, seq, 0, 0, payload.text)]
        if isinstance(payload, EvidenceBody):
            return evidence_docs(self.session, self.turn, seq, entry_id, payload, blob or b"")
        if isinstance(payload, TurnCard):
            turn = self.turn_of.get(payload.turn_id, self.turn)
            return [SearchDoc(entry_id, self.session, turn, "card", entry_id, seq, 0, 0, render_card(payload, turn))]
        if isinstance(payload, Presentation):
            turn = self.turn_of.get(payload.turn_id, self.turn)
            return [SearchDoc(entry_id, self.session, turn, "presentation", entry_id, seq, 0, 0,
                              _presentation_text(payload))]
        return []

    def note(self, entry_id: str, kind: str) -> None:
        """An entry whose payload was not decoded (metadata only): only a directive changes the count."""
        if kind == "directive":
            self.turn += 1
            self.turn_of[entry_id] = self.turn
