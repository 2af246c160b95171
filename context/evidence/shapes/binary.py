"""The ``binary`` shape: a body that is not text. Its digest gives the size and kind, and the first
hex-dump row."""

from __future__ import annotations

from vak_context.context.evidence.bodytext import BINARY_HEADER
from vak_context.context.evidence.shapes.base import Analysis, DigestShape
from vak_context.context.evidence.shapes.quoting import DIGEST_LINE_WIDTHS, clip
from vak_context.context.evidence.window import line_count


def claims(seen: Analysis) -> bool:
    """``body_text``'s hex dump, or text with NUL characters in it."""
    return seen.body.startswith(BINARY_HEADER) or "\x00" in seen.body


def render(seen: Analysis, evidence_id: str, budget: int) -> str:
    body = seen.body
    if body.startswith(BINARY_HEADER):
        first_nl = body.find("\n", 0, 1_000)
        header = body[: first_nl if first_nl >= 0 else 1_000]
        lines = line_count(body) - 1
        row_end = body.find("\n", first_nl + 1, first_nl + 1_000) if first_nl >= 0 else -1
        first_row = (
            body[first_nl + 1 : row_end if row_end >= 0 else first_nl + 1_000] if first_nl >= 0 else ""
        )
        described = header.strip("[]").split("; hex dump", 1)[0]
        width = DIGEST_LINE_WIDTHS[-1] * 2
        return f"{clip(described, width)}; {lines} hex-dump lines of 16 bytes\nfirst row: {clip(first_row, width)}"
    return f"binary-looking text: {len(body)} chars, {line_count(body)} lines, contains NUL characters"


SHAPE = DigestShape("binary", render)
