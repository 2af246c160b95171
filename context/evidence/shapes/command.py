"""The ``command`` shape: shell output. Its digest gives the exit code, the line and byte counts, and
the first and last ``EDGE_LINES`` lines with the exact omission line between them."""

from __future__ import annotations

import re

from vak_context.context.evidence.shapes.base import Analysis, DigestShape
from vak_context.context.evidence.shapes.quoting import byte_size, edges, plural
from vak_context.context.evidence.window import line_count

COMMAND_WORDS = frozenset(
    {
        "bash",
        "sh",
        "zsh",
        "shell",
        "terminal",
        "console",
        "exec",
        "execute",
        "run",
        "cmd",
        "command",
        "powershell",
    }
)
_EXIT_AT_START = (
    re.compile(r"\A\s*<returncode>(-?\d+)</returncode>"),  # mini-swe-agent observations
    re.compile(r"\AExit code (-?\d+)[ \t]*(?:\r?\n|\Z)"),  # Claude Code, when a Bash call fails
)
_EXIT_AT_END = (
    re.compile(r"\[The command completed with exit code (-?\d+)\.\]\s*\Z"),  # OpenHands' agent view
    re.compile(r"(?i)\bexit(?:ed)? (?:with )?(?:code|status)[:= ]+(-?\d+)\W*\Z"),
)


def exit_code(body: str) -> int | None:
    """The exit code a command result reports in its text, or None."""
    head, tail = body[:200], body[-200:]
    for pattern in _EXIT_AT_START:
        if m := pattern.search(head):
            return int(m.group(1))
    for pattern in _EXIT_AT_END:
        if m := pattern.search(tail):
            return int(m.group(1))
    return None


def reports_exit_code(seen: Analysis) -> bool:
    """The body reports an exit code: a failed shell command is command output, even when flagged as
    an error. A bare "exited with code N" at the end counts only from a shell-like tool or an error."""
    if exit_code(seen.body) is None:
        return False
    generic_end = _EXIT_AT_END[1].search(seen.body[-200:]) is not None
    return seen.is_error or bool(seen.words & COMMAND_WORDS) or not generic_end


def shell_tool(seen: Analysis) -> bool:
    """The tool's name says it runs commands (``Bash``, ``execute_command``, ``run``...)."""
    return bool(seen.words & COMMAND_WORDS)


def render(seen: Analysis, evidence_id: str, budget: int) -> str:
    body = seen.body
    code = exit_code(body)
    total = line_count(body)
    status = f"exit code {code}" if code is not None else "exit code not reported"
    head = f"command output: {status}, {plural(total, 'line')}, {byte_size(body)} bytes"
    return edges(body, evidence_id, head, budget)


SHAPE = DigestShape("command", render)
