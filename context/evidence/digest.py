"""Evidence as the model sees it: windows, shape-aware digests, and the pure half of recall (spec §3).

Pure: no I/O, no clock. State goes in, text comes out. This module is the one callers import; the
work lives in the modules below it, none of which imports this one:

* ``vak_context.context.evidence.window``: what a line is (split on ``"\\n"`` only, terminator kept, 1-based,
  ranges inclusive) and ``window``: a current-turn result verbatim up to ``WINDOW_CHARS``, a longer
  one as whole lines from its start and end and one line naming the omitted range and the recall
  call for it; a line over ``LINE_CHARS`` shows its start and the recall call for the rest.
* ``digest`` (here): a closed turn's result, by shape (``detect_shape``, through the shape registry
  in ``vak_context.context.evidence.shapes``), ending with ``evidence_tag``; never longer than ``DIGEST_CHARS``,
  whatever the body.
* ``vak_context.context.evidence.recall``: ``parse_recall_args`` / ``select`` / ``recall_slice``, the recall tool's
  arguments, the exact text they name, and that text windowed. A bad argument comes back as a
  ``RecallError`` value (a tool error the model reads), never raised.
* ``vak_context.context.evidence.bodytext``: ``body_text``, how a stored body's bytes are shown; bytes that are not
  UTF-8 never raise.
"""

from __future__ import annotations

from typing import Any

from vak_context.context.evidence import shapes as digest_shapes
from vak_context.context.evidence.bodytext import BINARY_HEADER, body_text, guess_binary_kind, hex_dump
from vak_context.context.evidence.recall import (
    RECALL_TOOL,
    RecallError,
    RecallRequest,
    parse_recall_args,
    recall_slice,
    select,
    unknown_target,
)
from vak_context.context.evidence.shapes import DIGEST_CHARS, SHAPES, Analysis, Shape
from vak_context.context.evidence.shapes.focus import focus_lines, focus_terms
from vak_context.context.evidence.window import (
    LINE_CHARS,
    WINDOW_CHARS,
    Window,
    clip_line,
    continues_note,
    line_count,
    line_offsets,
    omission_line,
    recall_call,
    window,
)

__all__ = [
    "BINARY_HEADER",
    "DIGEST_CHARS",
    "LINE_CHARS",
    "RECALL_TOOL",
    "SHAPES",
    "WINDOW_CHARS",
    "RecallError",
    "RecallRequest",
    "Shape",
    "Window",
    "body_text",
    "clip_line",
    "continues_note",
    "detect_shape",
    "digest",
    "evidence_tag",
    "guess_binary_kind",
    "hex_dump",
    "line_count",
    "line_offsets",
    "omission_line",
    "parse_recall_args",
    "recall_call",
    "recall_slice",
    "select",
    "shaped_digest",
    "unknown_target",
    "window",
]


def evidence_tag(evidence_id: str, chars: int) -> str:
    """``[evidence:<id> — <n> chars; call recall to expand]``."""
    return f"[evidence:{evidence_id} — {chars} chars; call recall to expand]"


def detect_shape(
    body: str, *, tool_name: str = "", is_error: bool = False, tool_input: dict[str, Any] | None = None
) -> Shape:
    """The shape of a tool result, from its content, the tool's name, its input and its error flag.

    In order (``vak_context.context.evidence.shapes.DETECTION``): ``binary`` (NUL characters, or ``body_text``'s
    hex dump); ``command`` when the body reports an exit code (a failed shell command is command
    output, even when flagged as an error); ``error`` when flagged, or when a short body starts with
    ``Error:``; ``search`` for title + URL results (JSON or text); ``json`` for a JSON object or
    array; ``command`` for a shell-like tool; else ``text``.
    """
    inputs = tool_input or {}
    return digest_shapes.classify(body, tool_name=tool_name, is_error=is_error, tool_input=inputs)[0]


def shaped_digest(
    body: str,
    evidence_id: str,
    *,
    tool_name: str = "",
    is_error: bool = False,
    tool_input: dict[str, Any] | None = None,
    focus: str = "",
) -> tuple[Shape, str]:
    """``detect_shape`` and ``digest`` together, reading the body once: a JSON body is parsed once,
    not once to detect its shape and again to digest it. ``focus`` as for ``digest``."""
    inputs = tool_input or {}
    shape, seen = digest_shapes.classify(
        body, tool_name=tool_name, is_error=is_error, tool_input=inputs, focus=focus_terms(focus)
    )
    return shape, _digest(shape, seen, evidence_id)


def digest(
    body: str,
    evidence_id: str,
    *,
    tool_name: str = "",
    is_error: bool = False,
    tool_input: dict[str, Any] | None = None,
    shape: Shape | None = None,
    focus: str = "",
) -> str:
    """A closed turn's view of a result, by shape, never by character count.

    json: top-level keys, array lengths, each array's first element in full. search: every title
    and URL. text: headings, the first paragraph, line and byte counts. command: the exit code and
    the first and last 10 lines. error: verbatim. binary: size and kind. Each shape shows what fits
    in ``DIGEST_CHARS`` and says what it leaves out (fewer keys or results, narrower quoted lines,
    fewer edge lines). Always ends with ``evidence_tag(evidence_id, len(body))``, and is never longer
    than ``DIGEST_CHARS`` (for an id shorter than a few hundred characters).

    ``focus``: the text of the directive of the turn the result fell in. A json, text or command digest
    also quotes, in at most half its room, the lines that name the directive's distinctive words and
    that the shape's own lines do not already show (``vak_context.context.evidence.shapes.focus``).
    """
    inputs = tool_input or {}
    terms = focus_terms(focus)
    if shape is None:
        shape, seen = digest_shapes.classify(
            body, tool_name=tool_name, is_error=is_error, tool_input=inputs, focus=terms
        )
    else:
        seen = Analysis(body, tool_name, is_error, inputs, focus=terms)
    return _digest(shape, seen, evidence_id)


FOCUSED: frozenset[Shape] = frozenset({"json", "text", "command"})  # error is verbatim; search shows every title


def _digest(shape: Shape, seen: Analysis, evidence_id: str) -> str:
    tag = evidence_tag(evidence_id, len(seen.body))
    room = max(DIGEST_CHARS - len(tag) - 1, 0)
    focus = focus_lines(seen.body, seen.focus, room // 2) if shape in FOCUSED and seen.focus else []
    lines = "\n".join(focus)
    content = _content(shape, seen, evidence_id, room - (len(lines) + 1 if lines else 0))
    if focus and all(q.split(": ", 1)[1] in content for q in focus[1:]):
        content, lines = _content(shape, seen, evidence_id, room), ""  # the shape shows them: all its room
    if lines:
        content = f"{content}\n{lines}" if content else lines
    if content and not content.endswith("\n"):
        content += "\n"
    return content + tag


def _content(shape: Shape, seen: Analysis, evidence_id: str, room: int) -> str:
    content = digest_shapes.render(shape, seen, evidence_id, budget=room)
    return digest_shapes.capped(content, room)  # the one place every shape's digest passes through
