"""Digest shapes (spec §3): one module per shape, registered here by name, and detection through them.

A digest is chosen by the result's shape, never by its size: what a shape shows is fixed (keys,
titles, headings, exit codes). What fits of it is bounded: every digest is at most ``DIGEST_CHARS``
characters, tag included. Each shape reads only what it shows, plus linear counts: no digest takes
more than linear time. Callers use ``vak_context.context.evidence.digest`` (``detect_shape``, ``digest``); this package
is its workshop.

Adding a shape: a module with a ``render(seen, evidence_id, budget)`` and a ``claims(seen)``, its
``SHAPE`` in ``REGISTRY``, its name in ``base.Shape``, and its claim at its place in ``DETECTION``.
"""

from __future__ import annotations

from typing import Any

import vak_context.context.evidence.shapes.binary as binary
import vak_context.context.evidence.shapes.command as command
import vak_context.context.evidence.shapes.error as error
import vak_context.context.evidence.shapes.json_shape as json_shape
import vak_context.context.evidence.shapes.search as search
import vak_context.context.evidence.shapes.text as text
from vak_context.context.evidence.shapes.base import DIGEST_CHARS, SHAPES, Analysis, Claim, DigestShape, Shape
from vak_context.context.evidence.shapes.quoting import DIGEST_LINE_WIDTHS, capped

__all__ = [
    "DETECTION",
    "DIGEST_CHARS",
    "DIGEST_LINE_WIDTHS",
    "REGISTRY",
    "SHAPES",
    "Analysis",
    "DigestShape",
    "Shape",
    "capped",
    "classify",
    "render",
]

REGISTRY: dict[Shape, DigestShape] = {
    s.name: s for s in (json_shape.SHAPE, search.SHAPE, text.SHAPE, command.SHAPE, error.SHAPE, binary.SHAPE)
}

# Each shape's claims, asked in this order; the first that claims a body names its shape. Command
# and search claim twice: a body that reports an exit code is command output before anything else,
# and a search tool's text is search results only once it is known not to be JSON.
DETECTION: tuple[tuple[Shape, Claim], ...] = (
    ("binary", binary.claims),  # NUL characters, or body_text's hex dump
    ("command", command.reports_exit_code),  # a failed shell command is command output, flagged or not
    ("error", error.claims),  # flagged, or a short body starting "Error:"
    ("search", search.json_results),  # JSON holding title + URL results
    ("json", json_shape.claims),  # any other JSON object or array
    ("search", search.text_results),  # title + URL results in text, from a search tool or a Links block
    ("command", command.shell_tool),  # a shell-like tool's output
    ("text", text.claims),  # everything else
)


def classify(
    body: str, *, tool_name: str, is_error: bool, tool_input: dict[str, Any], focus: tuple[str, ...] = ()
) -> tuple[Shape, Analysis]:
    """The shape, and what was parsed on the way (see ``vak_context.context.evidence.digest.detect_shape`` for the
    rules). ``focus``: the turn's distinctive words, which the digest quotes the lines of (``focus``)."""
    seen = Analysis(body, tool_name, is_error, tool_input, focus=focus)
    shape = next(name for name, claims in DETECTION if claims(seen))
    return shape, seen


def render(shape: Shape, seen: Analysis, evidence_id: str, *, budget: int = DIGEST_CHARS) -> str:
    """The digest's content for a shape, before the evidence tag: at most ``budget`` characters.

    Each shape reads only what it shows (first keys, first results, edge lines) plus linear counts,
    so the time is linear in the body and the output is bounded by construction.
    """
    return capped(REGISTRY[shape].render(seen, evidence_id, budget), budget)
