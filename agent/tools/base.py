"""What runs a tool call, and a result that says it is an error without raising (shared by the registry and
the MCP servers, so neither imports the other)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

Run = Callable[[dict[str, Any]], Awaitable[Any]]  # a call's arguments (one JSON object) -> the tool's value


@dataclass(frozen=True)
class ToolResult:
    """A tool's result with its error flag (an MCP server's ``isError``), for a tool that must not raise."""

    body: str
    is_error: bool = False
