"""What every digest shape shares: the shape names, the digest cap, and the ``Analysis`` of a body.

``Analysis`` is what detection learns about a body on the way (its tool's words, its parsed JSON,
the search results found in its text), cached so a shape's renderer never parses the body twice:
a JSON body goes through the parser once, whether it is detected, rendered, or both.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal, get_args

import vak_context.context.evidence.shapes.jsonscan as jsonscan

Shape = Literal["json", "search", "text", "command", "error", "binary"]
SHAPES: tuple[Shape, ...] = get_args(Shape)

# A digest, evidence tag included, is never longer than this: about 400 tokens at 4 chars a token.
# Each shape stays under it by construction, and ``vak_context.context.evidence.digest.digest`` enforces it once more.
DIGEST_CHARS = 1_600


def tool_words(tool_name: str) -> set[str]:
    """``"WebSearch"`` → {"web", "search", "websearch"}; ``"execute_bash"`` → {"execute", "bash"}."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", tool_name)
    words = {w for w in re.split(r"[^a-z0-9]+", spaced.lower()) if w}
    words.add(re.sub(r"[^a-z0-9]+", "", tool_name.lower()))
    return words


@dataclass
class Analysis:
    """A tool result and what was computed about it, so rendering does not parse the body twice."""

    body: str
    tool_name: str = ""
    is_error: bool = False
    tool_input: dict[str, Any] = field(default_factory=dict)
    pairs: list[tuple[str, str]] | None = None  # search results found in text, once looked for
    focus: tuple[str, ...] = ()  # the turn's distinctive words (``vak_context.context.evidence.shapes.focus``)

    @cached_property
    def words(self) -> set[str]:
        return tool_words(self.tool_name)

    @cached_property
    def json(self) -> Any:
        """The parsed object or array, a ``jsonscan.DeepJson``, or None: parsed on first use only."""
        return jsonscan.parse_json(self.body)


# A shape's digest content (before the evidence tag) for an analysed body, an evidence id and a
# budget in characters; at most ``budget`` characters.
Render = Callable[[Analysis, str, int], str]

# Whether a shape claims a body. Detection asks the claims in a fixed order (``DETECTION`` in
# ``vak_context.context.evidence.shapes``); the first that claims the body names its shape.
Claim = Callable[[Analysis], bool]


@dataclass(frozen=True)
class DigestShape:
    """One digest shape: its name and how it renders a body."""

    name: Shape
    render: Render
