"""How a digest quotes a body and fits its budget: the helpers every shape renders with.

A digest quotes lines at the widest of ``DIGEST_LINE_WIDTHS`` that fits (a clipped line says how
many characters it continues for), then shows fewer keys, results or edge lines with a line that
says how many it left out (``fit``). Each helper reads only what it quotes, plus linear counts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from vak_context.context.evidence.shapes.base import DIGEST_CHARS
from vak_context.context.evidence.window import LINE_CHARS, line_count, omission_line

# A quoted line's width in a digest: the widest that lets the whole digest fit is used, tried in turn.
DIGEST_LINE_WIDTHS = (500, 200, 80)
EDGE_LINES = 10  # command output: the first and last 10 lines (spec §3)
EDGE_STEPS = (EDGE_LINES, 6, 3, 1)  # command and error output: fewer edge lines when 10 do not fit


def capped(content: str, budget: int) -> str:
    """``content`` when it fits in ``budget`` characters, else its first whole lines and a note.

    Every digest passes through here (``vak_context.context.evidence.digest.digest``), so no shape can exceed the cap
    even if its own bound were wrong.
    """
    if len(content) <= budget:
        return content
    note = f"[… the rest of this digest is left out: digests stay under {DIGEST_CHARS} chars …]"
    room = max(budget - len(note) - 1, 0)
    cut = content.rfind("\n", 0, room + 1)
    head = content[:cut] if cut > 0 else clip(content[: max(room - 40, 0)], max(room - 40, 0))
    return (head + "\n" + note if head else note)[:budget]


def clip(text: str, width: int, full: int | None = None) -> str:
    """One quoted line: whole up to ``width`` characters, else its start and how much more there is.

    ``full`` is the line's real length when ``text`` is only its start."""
    size = len(text) if full is None else full
    if size <= width:
        return text
    return f"{text[:width]} … [continues for {size - width} more chars]"


def line_at(body: str, start: int) -> tuple[str, int]:
    """The line starting at ``start``: its first ``2 * LINE_CHARS`` characters (no terminator) and its
    full length. Copies only what a digest can quote."""
    nl = body.find("\n", start)
    end = len(body) if nl < 0 else nl
    if end > start and body[end - 1] == "\r":
        end -= 1
    return body[start : min(end, start + 2 * LINE_CHARS)], end - start


def fit(make: Callable[[int], Iterator[str]], budget: int, more: Callable[[int], str]) -> str:
    """The lines ``make(width)`` yields, for the widest width whose lines all fit in ``budget``.

    When none does, the narrowest width's first lines that fit, then ``more(kept)``: a line saying
    what the other lines would have shown. ``make`` is a generator, read only as far as it fits, so
    a body with a million keys costs what the first few dozen cost.
    """
    lines: list[str] = []
    for width in DIGEST_LINE_WIDTHS:
        lines, used, complete = [], -1, True
        for line in make(width):
            if used + 1 + len(line) > budget:
                complete = False
                break
            lines.append(line)
            used += 1 + len(line)
        if complete:
            return "\n".join(lines)
    while lines:
        note = more(len(lines))
        if sum(len(x) + 1 for x in lines) + len(note) <= budget:
            return "\n".join([*lines, note])
        lines.pop()
    return more(0)


def more_note(total: int, noun: str, header_lines: int = 1) -> Callable[[int], str]:
    """The note for a list cut short: how many of ``total`` items (after ``header_lines``) it leaves out."""

    def note(kept: int) -> str:
        left = total - max(kept - header_lines, 0)
        return f"[… {left} more {noun}; the evidence id below recalls them all …]"

    return note


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def byte_size(body: str) -> int:
    return len(body) if body.isascii() else len(body.encode("utf-8", "surrogatepass"))


def lines_between(body: str, start: int, end: int) -> list[str]:
    """The lines of ``body[start:end]`` (a run of whole lines, at most ~11), without terminators."""
    if start >= end:
        return []
    chunk = body[start:end]
    parts = (chunk[:-1] if chunk.endswith("\n") else chunk).split("\n")
    return [p[:-1] if p.endswith("\r") else p for p in parts]


# ---- the first and last lines (command output, and an error too long to show whole)


def edges(body: str, evidence_id: str, head: str, budget: int) -> str:
    """``head``, then the first and last ``EDGE_LINES`` lines with the exact omission line between.

    Quoted lines narrow, then fewer edge lines are shown, until it fits in ``budget``; the omission
    line always names exactly the lines left out.
    """
    total = line_count(body)
    starts = _line_starts(body, EDGE_LINES + 1)  # where lines 1..11 start
    ends = _line_ends(body, EDGE_LINES + 1)  # where the last 11 lines end, last first
    for shown in EDGE_STEPS:
        for width in DIGEST_LINE_WIDTHS:
            if total <= 2 * shown:
                lines = [head] + [clip(x, width) for x in lines_between(body, 0, len(body))]
            else:
                first = [clip(x, width) for x in lines_between(body, 0, starts[shown])]
                tail_start = ends[shown]  # where line total - shown + 1 starts
                last = [clip(x, width) for x in lines_between(body, tail_start, len(body))]
                marker = omission_line(
                    evidence_id, shown + 1, total - shown, tail_start - starts[shown]
                ).rstrip("\n")
                lines = [head, *first, marker, *last]
            text = "\n".join(lines)
            if len(text) <= budget:
                return text
    return head


def _line_starts(body: str, count: int) -> list[int]:
    """Offsets where lines 1..``count`` start (``len(body)`` past the last line)."""
    starts, pos = [0], 0
    while len(starts) < count:
        nl = body.find("\n", pos)
        pos = len(body) if nl < 0 else nl + 1
        starts.append(pos)
    return starts


def _line_ends(body: str, count: int) -> list[int]:
    """``ends[k]``: where the last ``k`` lines start (``ends[0] == len(body)``), for k < ``count``."""
    ends = [len(body)]
    pos = len(body) - 1 if body.endswith("\n") else len(body)  # the last line's terminator is its own
    while len(ends) < count:
        nl = body.rfind("\n", 0, pos)
        ends.append(nl + 1)
        pos = max(nl, 0)
    return ends
