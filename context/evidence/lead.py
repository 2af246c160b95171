"""What a recall's result shows when it is too long to be sent as it came back (issue 36 item 3). Pure.

A result too long for its request is shown as its digest (headings, the first paragraph, the
``[evidence:<id> …]`` tag). For a ``recall`` result that is the wrong answer: the model asked to read the
body the digest stood for, and the digest of the recalled text is the digest it already had, so it can
never read past the first paragraph (a second identical recall is refused by the repeated-call rule).

So a recall's result, where a digest would stand for it, is its **lead** instead: whole lines from
where the recall asked (its ``range``'s first line, else line 1), as many as fit in ``limit``
characters, then one line naming exactly the rest and the recall call that returns it::

    [lines 1-28 of 153 shown; recall({"id": "d99fff25964f", "range": [29, 153]}) returns the rest]

A first line longer than that (a one-line JSON result) shows as much of its start as fits beside the note
naming the characters left out and the recall call that returns them (``window.continues_note``).

Following that call shows the next lines, so a recall of the same id never comes back as text the model
already had. The lead is never longer than ``limit`` (``DIGEST_CHARS`` where it replaces a digest, so
the current turn's planner, which prices a step at its digests, prices it the same).
"""

from __future__ import annotations

from typing import Any

from vak_context.context.evidence.recall import RecallRequest, parse_recall_args
from vak_context.context.evidence.window import clip_line, continues_note, line_count, recall_call

RECALL_NAME = "recall"


def rest_line(evidence_id: str, first: int, shown_last: int, last: int, total: str) -> str:
    """The line after a lead: which lines were shown, of how many, and the call for the rest."""
    call = recall_call(evidence_id, (shown_last + 1, last))
    return f"[lines {first}-{shown_last} of {total} shown; {call} returns the rest]"


def _note_chars(evidence_id: str, number: int, line: str) -> int:
    """The longest ``continues_note`` (and terminator) a clipped ``line`` can carry: every number at its widest.
    A first line over the room shows as much of its start as the room leaves beside that note."""
    return len(continues_note(evidence_id, number, len(line), len(line))) + 1


def recall_lead(tool_input: dict[str, Any], content: str, body_chars: int, limit: int) -> str | None:
    """The lead of a recall result (module docstring), or None where it has none: the call was not a
    recall of an evidence id by lines (a ``turn``, a ``presentation``, ``chars``, another session), or
    ``content`` is not the whole recalled text (``body_chars`` is the stored result's length: a recall
    over the window limit came back windowed, and its window already names what it leaves out).
    """
    request = parse_recall_args(tool_input)
    if not isinstance(request, RecallRequest) or request.id is None or request.chars is not None:
        return None
    if request.session is not None or len(content) != body_chars or not content:
        return None
    first, last = request.range or (1, line_count(content))
    total = str(last) if request.range is None else f"{first}-{last}"
    if len(content) <= limit:
        return content
    # the longest rest line this lead can need: every number at its widest
    room = limit - len(rest_line(request.id, last, last, last, total)) - 1
    shown: list[str] = []
    used, start, number = 0, 0, first
    while start < len(content):
        nl = content.find("\n", start)
        end = len(content) if nl < 0 else nl + 1
        line = content[start:end]
        if not shown and len(line) > room:  # a first line over the room: its start, and the call for the rest of it
            line = clip_line(line, number, line_limit=max(room - _note_chars(request.id, number, line), 1),
                             evidence_id=request.id)
        if used + len(line) > room:
            break
        shown.append(line if line.endswith("\n") else line + "\n")
        used += len(shown[-1])
        start, number = end, number + 1
    if not shown:  # not even a clipped first line fits: the digest stands for it
        return None
    if start >= len(content):
        return "".join(shown)
    return "".join(shown) + rest_line(request.id, first, number - 1, last, total)
