"""The ``error`` shape: a result flagged as an error, or a short one that starts with ``Error:``.
Shown verbatim when it fits: errors are short and the model must see them."""

from __future__ import annotations

import re

from vak_context.context.evidence.shapes.base import Analysis, DigestShape
from vak_context.context.evidence.shapes.quoting import EDGE_LINES, edges, plural
from vak_context.context.evidence.window import line_count

_ERROR_START = re.compile(r"\A\s*(?:error|exception|fatal)\s*:", re.IGNORECASE)


def claims(seen: Analysis) -> bool:
    """Flagged as an error, or at most ``2 * EDGE_LINES`` lines starting with ``Error:`` (or
    ``Exception:``, ``Fatal:``)."""
    body = seen.body
    return seen.is_error or bool(_ERROR_START.match(body) and line_count(body) <= 2 * EDGE_LINES)


def render(seen: Analysis, evidence_id: str, budget: int) -> str:
    body = seen.body
    if not body:
        return "error (the tool returned an empty error message)"
    if len(body) <= budget:
        return body
    total = line_count(body)
    head = f"error: {plural(total, 'line')}, {len(body)} chars, too long to show whole; its first and last lines:"
    return edges(body, evidence_id, head, budget)


SHAPE = DigestShape("error", render)
