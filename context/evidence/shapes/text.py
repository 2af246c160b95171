"""The ``text`` shape: everything no other shape claims. Its digest gives the line and byte counts,
the headings (or, in a code file, the definitions) and the first paragraph.

A document's headings and a code file's definitions are found by one regex scan each, and the first
paragraph by one search: a body of 100,000 headings costs one scan, not a Python turn per line.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from vak_context.context.evidence.shapes.base import Analysis, DigestShape
from vak_context.context.evidence.shapes.quoting import byte_size, clip, fit, line_at, lines_between, plural
from vak_context.context.evidence.window import line_count

PARAGRAPH_LINES = 10  # a first paragraph longer than this shows its first 10 lines
HEADINGS_SHOWN = 20  # the first 20 headings, then how many more, so the paragraph has room

_NUMBERED = re.compile(r"^ *\d+(?:→|\t)")  # cat -n and Claude Code Read prefixes
_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+\S")
_FENCE = re.compile(r"^ {0,3}(?:```|~~~)")
_DEFINITION = re.compile(
    r"^(?:export |pub(?:\([^)\n]*\))? |async |public |private |static )*"
    r"(?:def|class|function|fn|func|defmodule|module|interface|struct|enum|trait|impl|type|object)\b"
)
_DOC_EXTENSIONS = frozenset({"", "md", "markdown", "mdx", "rst", "txt", "text", "adoc", "org"})

Quoted = list[tuple[str, int]]  # lines as (their start, their full length)


def claims(seen: Analysis) -> bool:
    """Always: text is what a body is when no shape before it in the detection order claimed it."""
    return True


def render(seen: Analysis, evidence_id: str, budget: int) -> str:
    body, tool_input = seen.body, seen.tool_input
    total = line_count(body)
    if total == 0:
        return "empty result (0 lines, 0 bytes)"
    path = next(
        (tool_input[k] for k in ("file_path", "path", "filename") if isinstance(tool_input.get(k), str)), ""
    )
    extension = path.rsplit(".", 1)[-1].lower() if "." in path.rsplit("/", 1)[-1] else ""
    is_doc = extension in _DOC_EXTENSIONS
    numbered = _NUMBERED.match(body) is not None
    headings, heading_count, paragraph, para_first, more = _outline(body, is_doc, numbered)
    if not heading_count and total <= PARAGRAPH_LINES and len(body) <= budget:
        if all(line.strip() for line in lines_between(body, 0, len(body))):
            return body  # the whole body is one short paragraph: the digest would repeat it all
    label = "headings" if is_doc else f"definitions (.{extension[:40]} file)"

    def lines(width: int) -> Iterator[str]:
        yield f"text: {plural(total, 'line')}, {plural(byte_size(body), 'byte')}"
        yield f"{label}: {heading_count}" if heading_count else f"{label}: none"
        yield from (clip(h, width, n) for h, n in headings)
        if heading_count > len(headings):
            yield f"[… {heading_count - len(headings)} more {label.split(' ', 1)[0]} …]"
        if paragraph:
            last = para_first + len(paragraph) - 1
            where = f"line {para_first}" if last == para_first else f"lines {para_first}-{last}"
            yield f"first paragraph ({where}{'; it continues past line ' + str(last) if more else ''}):"
            yield from (clip(p, width, n) for p, n in paragraph)

    return fit(
        lines,
        budget,
        lambda kept: "[… the rest of the outline is left out; the evidence id below recalls it …]",
    )


def _outline(body: str, is_doc: bool, numbered: bool) -> tuple[Quoted, int, Quoted, int, bool]:
    """The first ``HEADINGS_SHOWN`` headings (or a code file's definitions) and how many there are,
    and the first paragraph (at most ``PARAGRAPH_LINES`` lines) with its first line number."""
    headings, count = _headings(body, is_doc, numbered)
    paragraph: Quoted = []
    start = _paragraph_start(body, is_doc, numbered)
    if start is None:
        return headings, count, paragraph, 0, False
    # from the paragraph's first line, read at most PARAGRAPH_LINES + 1 lines
    para_first, pos = body.count("\n", 0, start) + 1, start
    while pos < len(body):
        nl = body.find("\n", pos)
        raw, full = line_at(body, pos)
        pos = len(body) if nl < 0 else nl + 1
        line = _NUMBERED.sub("", raw, count=1) if numbered else raw
        boundary = not line.strip() or (
            bool(_HEADING.match(line) or _FENCE.match(line)) if is_doc else bool(_DEFINITION.match(line))
        )
        if boundary and paragraph:
            break
        if len(paragraph) == PARAGRAPH_LINES:
            return headings, count, paragraph, para_first, True
        paragraph.append((raw, full))
    return headings, count, paragraph, para_first, False


def _headings(body: str, is_doc: bool, numbered: bool) -> tuple[Quoted, int]:
    """The first ``HEADINGS_SHOWN`` headings outside code fences (or a code file's definitions), and
    how many there are.

    One scan of ``"\n" + body`` (every line then starts after a newline, the pattern's literal first
    character, which the regex engine looks for quickly): a fenced block is matched whole, from its
    fence line to the next fence line (or the end, unclosed), so headings inside it are never seen, and
    the count is a ``findall``, not a Python turn per heading. A match's start in the padded text is its
    line's start in ``body``."""
    pattern = _OUTLINE[is_doc, numbered]
    padded = "\n" + body
    headings: Quoted = []
    count, rest = 0, 0
    for m in pattern.finditer(padded):
        if m.group(1) is None:
            continue  # a fenced block, skipped whole
        count += 1
        headings.append(line_at(body, m.start()))
        if len(headings) == HEADINGS_SHOWN:
            rest = m.end()
            break
    if rest:
        found = pattern.findall(padded, rest)
        count += len(found) - found.count("")  # "" is a fenced block's (empty) group
    return headings, count


def _outline_pattern(is_doc: bool, numbered: bool) -> re.Pattern[str]:
    """What ``_headings`` scans for: in a document a fenced block (group 1 unset) or a heading (group 1
    set), in code a definition (group 1 set); each right after a newline, the optional line-number
    prefix first (``cat -n``, Claude Code's Read)."""
    prefix = r"(?: *\d+(?:→|\t))?" if numbered else ""
    if not is_doc:
        return re.compile(rf"\n{prefix}({_DEFINITION.pattern[1:]})")
    fence = rf"{prefix} {{0,3}}(?:```|~~~)"
    first = r"[ \d#`~]" if numbered else r"[ #`~]"  # a cheap look at the line's first character
    return re.compile(
        rf"\n(?={first})(?:{fence}[^\n]*(?:\n(?!{fence})[^\n]*)*(?:\n{fence}[^\n]*)?"
        rf"|{prefix}( {{0,3}}#{{1,6}}[ \t]+\S))"
    )


_OUTLINE = {(d, n): _outline_pattern(d, n) for d in (True, False) for n in (True, False)}


def _paragraph_start(body: str, is_doc: bool, numbered: bool) -> int | None:
    """Where the first paragraph line starts: the first line that is neither blank nor a boundary
    (a heading or fence in a document, a definition in code). One regex search, not a Python turn
    per line: a body of 100,000 headings costs one scan."""
    prefix = r"(?>(?: *\d+(?:→|\t))?)" if numbered else ""
    boundary = r" {0,3}#{1,6}[ \t]+\S| {0,3}(?:```|~~~)" if is_doc else _DEFINITION.pattern[1:]
    found = re.compile(rf"(?m)^{prefix}(?!{boundary})[^\S\n]*\S").search(body)
    return None if found is None else found.start()


SHAPE = DigestShape("text", render)
