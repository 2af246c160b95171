"""The neutral events every format's reader produces, and the ``Recording`` that holds them.

A reader (one module per format in ``vak_context.importers``) only parses; ``vak_context.importers.writer``
turns these events into ledger entries. Nothing is dropped silently: every record a reader does not
turn into an event is counted in ``Recording.skipped`` under the reason it was left out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from vak_context.events.payloads import ImageBlock, TextBlock, ThinkingBlock, ToolUseBlock, Usage
from vak_context.importers.strict_json import Where


@dataclass
class SystemPrompt:
    text: str


@dataclass
class UserText:
    """A user directive: the start of a turn."""

    text: str
    images: tuple[ImageBlock, ...] = ()


@dataclass
class ControlText:
    """A message the model saw that is not a user directive (notification, interrupt, format error)."""

    tag: str
    text: str


@dataclass
class ModelStep:
    blocks: list[TextBlock | ThinkingBlock | ToolUseBlock]
    model: str = ""
    provider: str = ""
    stop_reason: str | None = None
    usage: Usage | None = None


@dataclass
class ToolOutput:
    tool_use_id: str
    tool_name: str
    body: str | bytes
    is_error: bool = False
    media_type: str = "text/plain"


@dataclass
class CompactionMark:
    """A compaction the recording agent did: its summary replaced everything before it."""

    summary: str
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class Note:
    """Recorded facts no model saw as a message (system prompt aside): run info, workspace context."""

    activity: str
    detail: dict[str, Any] = field(default_factory=dict)


Event = SystemPrompt | UserText | ControlText | ModelStep | ToolOutput | CompactionMark | Note


def _no_line(where: Where) -> int | None:
    return None


@dataclass
class Recording:
    name: str  # a hint for the session name (made path-safe by the importer)
    format: str
    events: list[Event] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    source: dict[str, Any] = field(default_factory=dict)
    # Where each event came from, so an event the ledger refuses names its record's line.
    origins: list[Where] = field(default_factory=list)
    current: Where = ()
    line_of: Callable[[Where], int | None] = _no_line  # set by read_recordings: a Where -> its line

    def at(self, where: Where) -> None:
        """The events appended from now on come from the record at ``where``."""
        self.origins.extend([self.current] * (len(self.events) - len(self.origins)))
        self.current = where

    def origin(self, index: int) -> Where:
        """Where event ``index`` came from (the record a parser was reading when it appended it)."""
        return self.origins[index] if index < len(self.origins) else self.current
