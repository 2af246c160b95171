"""Lines of a tool-result body, and the window a request carries for one result (spec §3). Pure.

Lines. A body's lines are split on ``"\\n"`` only; a line keeps its terminator (``"\\n"`` or
``"\\r\\n"``), so joining lines gives the body back byte for byte. A body ending in ``"\\n"`` has no
empty last line; an empty body has no lines. Line numbers are 1-based and ranges inclusive.

``window``: a current-turn result verbatim up to ``WINDOW_CHARS``; a longer one keeps whole lines
from its start and end, and one line naming the omitted range, its size, and the recall call.
Inside a window a line over ``LINE_CHARS`` shows its start, says how many characters it continues
for, and names the recall call (line and character range) that returns exactly those characters.
The line helpers here are what the digests (``vak_context.context.evidence.shapes``) and recall
(``vak_context.context.evidence.recall``) build on, so this module imports neither.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from vak_context.errors import InvalidInput

WINDOW_CHARS = 30_000
LINE_CHARS = 2_000


@dataclass(frozen=True)
class Window:
    """What the request carries for one result.

    ``windowed`` is False exactly when ``text`` is the body verbatim. ``omitted`` is the 1-based
    inclusive line range left out, or None when every line is shown (possibly with long lines
    clipped).
    """

    text: str
    windowed: bool
    omitted: tuple[int, int] | None


# ------------------------------------------------------------------ lines


def line_count(body: str) -> int:
    """How many lines ``body`` has (see the module docstring for what a line is)."""
    if not body:
        return 0
    n = body.count("\n")
    return n if body.endswith("\n") else n + 1


def recall_call(
    evidence_id: str, line_range: tuple[int, int] | None = None, chars: tuple[int, int] | None = None
) -> str:
    """The exact recall call a model can copy: ``recall({"id": "<id>", "range": [a, b]})``, with
    ``"chars": [c, d]`` when it names characters within those lines."""
    args: dict[str, Any] = {"id": evidence_id}
    if line_range is not None:
        args["range"] = [line_range[0], line_range[1]]
    if chars is not None:
        args["chars"] = [chars[0], chars[1]]
    return f"recall({json.dumps(args, ensure_ascii=False)})"


def omission_line(evidence_id: str, first: int, last: int, chars: int) -> str:
    """The one line that stands for lines ``first..last`` (``chars`` characters) left out."""
    what = f"line {first}" if first == last else f"lines {first}-{last}"
    return f"[… {what} omitted ({chars} chars); {recall_call(evidence_id, (first, last))} returns them …]\n"


def continues_note(evidence_id: str, number: int, shown: int, rest: int) -> str:
    """What follows the first ``shown`` characters of line ``number`` when ``rest`` more are left out:
    their count and the recall call that returns exactly them (line ``number``, characters
    ``shown + 1`` to ``shown + rest``)."""
    call = recall_call(evidence_id, (number, number), (shown + 1, shown + rest))
    return f" … [line {number} continues for {rest} more chars; {call} returns them]"


def clip_line(
    line: str, number: int | None = None, *, line_limit: int = LINE_CHARS, evidence_id: str | None = None
) -> str:
    """A line as a window shows it: whole up to ``line_limit`` characters, else its start and a note.

    With ``evidence_id`` and ``number`` the note is ``continues_note``: it names the recall call that
    returns exactly the characters left out. The terminator (``\\n`` or ``\\r\\n``) is kept; a
    clipped line always ends with one.
    """
    content, term = _split_terminator(line)
    if len(content) <= line_limit:
        return line
    rest = len(content) - line_limit
    if evidence_id is not None and number is not None:
        return (
            f"{content[:line_limit]}{continues_note(evidence_id, number, line_limit, rest)}{term or chr(10)}"
        )
    where = f"line {number} " if number is not None else ""
    return f"{content[:line_limit]} … [{where}continues for {rest} more chars]{term or chr(10)}"


def _split_terminator(line: str) -> tuple[str, str]:
    if line.endswith("\r\n"):
        return line[:-2], "\r\n"
    if line.endswith("\n"):
        return line[:-1], "\n"
    return line, ""


def _clipped_span(body: str, start: int, end: int, number: int, line_limit: int, evidence_id: str) -> str:
    """``clip_line`` of ``body[start:end]`` without copying a huge line first."""
    if end - start <= line_limit + 2:
        return clip_line(body[start:end], number, line_limit=line_limit, evidence_id=evidence_id)
    term = "\r\n" if body.startswith("\r\n", end - 2) else "\n" if body[end - 1] == "\n" else ""
    content_len = end - start - len(term)
    rest = content_len - line_limit
    if rest <= 0:
        return body[start:end]
    note = continues_note(evidence_id, number, line_limit, rest)
    return f"{body[start : start + line_limit]}{note}{term or chr(10)}"


def line_offsets(body: str, first: int, last: int) -> tuple[int, int]:
    """Character offsets ``[start, end)`` of lines ``first..last`` (1-based, inclusive, in range)."""
    start = 0
    for _ in range(first - 1):
        start = body.index("\n", start) + 1
    end = start
    for _ in range(last - first + 1):
        nl = body.find("\n", end)
        end = len(body) if nl < 0 else nl + 1
    return start, end


# ------------------------------------------------------------------ windows


def window(body: str, evidence_id: str, *, limit: int = WINDOW_CHARS, line_limit: int = LINE_CHARS) -> Window:
    """The body verbatim when it fits in ``limit`` characters, else a window of it.

    The window keeps whole lines from the start (up to half the budget) and from the end (the
    rest), clips any kept line over ``line_limit`` (its ``continues_note`` names the recall call for
    the characters it leaves out), and puts one ``omission_line`` between them. So every character
    left out is one shown recall call away. ``len(window(...).text) <= limit`` always. Raises ``InvalidInput`` only for a ``limit`` too small
    to hold a line from each end and the omission line.
    """
    if len(body) <= limit:
        return Window(body, False, None)
    total_lines = line_count(body)
    # the longest omission line this body can need: "lines a-b" adds "s", "-" and b's digits to "line a"
    marker_room = (
        len(omission_line(evidence_id, total_lines, total_lines, len(body))) + len(str(total_lines)) + 2
    )
    note_room = len(continues_note(evidence_id, total_lines, len(body), len(body))) + 2
    budget = limit - marker_room
    if line_limit < 1 or budget < 2 * (line_limit + note_room):
        raise InvalidInput(
            f"window limit {limit} is too small for line_limit {line_limit}: it must hold one clipped line "
            f"from each end plus the omission line ({2 * (line_limit + note_room) + marker_room} chars). "
            "Raise limit or lower line_limit."
        )
    head: list[str] = []
    head_used, head_end, number = 0, 0, 0
    while head_end < len(body):
        nl = body.find("\n", head_end)
        end = len(body) if nl < 0 else nl + 1
        shown = _clipped_span(body, head_end, end, number + 1, line_limit, evidence_id)
        if head_used + len(shown) > budget // 2:
            break
        head.append(shown)
        head_used += len(shown)
        head_end, number = end, number + 1
    head_lines = number

    tail: list[str] = []
    tail_used, tail_start, number = 0, len(body), total_lines
    while tail_start > head_end:
        start = body.rfind("\n", head_end, tail_start - 1) + 1
        start = max(start, head_end)
        shown = _clipped_span(body, start, tail_start, number, line_limit, evidence_id)
        if head_used + tail_used + len(shown) > budget:
            break
        tail.append(shown)
        tail_used += len(shown)
        tail_start, number = start, number - 1
    tail.reverse()

    if tail_start <= head_end:  # every line fits once long lines are clipped
        return Window("".join(head) + "".join(tail), True, None)
    first, last = head_lines + 1, number
    marker = omission_line(evidence_id, first, last, tail_start - head_end)
    return Window("".join(head) + marker + "".join(tail), True, (first, last))
