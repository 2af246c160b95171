"""Adversarial tool results for the digest bound (issue 9 item 2), shared by
tests/unit/test_digest_adversarial.py (at test sizes) and bench/evidence.py (at the issue's sizes).

Only ``body_text`` is imported from the project, so the bench can build these bodies against
any version of the evidence code (its before-and-after figures use the same bodies).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from vak_context.context.evidence.digest import body_text


@dataclass(frozen=True)
class Case:
    """One adversarial tool result, as ``digest`` gets it."""

    body: str
    tool_name: str = ""
    is_error: bool = False
    tool_input: dict[str, Any] = field(default_factory=dict)


def _huge_line(n: int) -> Case:
    return Case("x" * n)


def _huge_error_line(n: int) -> Case:
    return Case("Error: " + "y" * n, tool_name="get_user", is_error=True)


def _deep_nesting(n: int) -> Case:
    return Case("[" * n + "]" * n)


def _deep_object(n: int) -> Case:
    return Case('{"a": 1, "tree": ' + "[" * n + "]" * n + ', "b": [1]}')


def _many_keys(n: int) -> Case:
    return Case("{" + ",".join(f'"key{i}": {i}' for i in range(n)) + "}")


def _many_inner_keys(n: int) -> Case:
    inner = "{" + ",".join(f'"k{i}": 0' for i in range(n)) + "}"
    return Case('{"outer": ' + inner + ', "list": [' + inner + "]}")


def _huge_key(n: int) -> Case:
    return Case(json.dumps({"k" * n: "v" * n}))


def _huge_first_item(n: int) -> Case:
    return Case(json.dumps([["z" * 50] * n, 2]))


def _many_results(n: int) -> Case:
    items = [{"title": f"result {i}", "url": f"https://example.com/{i}"} for i in range(n)]
    return Case(json.dumps(items), tool_name="web_search")


def _many_links(n: int) -> Case:
    return Case("[a](http://" * n, tool_name="web_search")


def _csv_columns(n: int) -> Case:
    header = ",".join(f"column_{i}" for i in range(n))
    row = ",".join("1" for _ in range(n))
    return Case(f"{header}\n{row}\n{row}\n", tool_name="read_file", tool_input={"path": "wide.csv"})


def _million_newlines(n: int) -> Case:
    return Case("\n" * n)


def _newlines_command(n: int) -> Case:
    return Case("Exit code 1\n" + "\n" * n, tool_name="bash", is_error=True)


def _long_command_lines(n: int) -> Case:
    return Case("<returncode>2</returncode>\n" + ("w" * n + "\n") * 30, tool_name="bash")


def _many_headings(n: int) -> Case:
    return Case("# heading\n\n" * n, tool_name="read_file", tool_input={"file_path": "a.md"})


def _many_definitions(n: int) -> Case:
    return Case("def f():\n" * n, tool_name="read_file", tool_input={"file_path": "a.py"})


def _unclosed_pub(n: int) -> Case:
    return Case("pub(\n" * n, tool_name="read_file", tool_input={"file_path": "a.rs"})


def _invalid_utf8(n: int) -> Case:
    return Case(body_text(b"caf\xe9 \xff\xfe line\n" * n, "utf-8"))


def _invalid_utf8_line(n: int) -> Case:
    return Case(body_text(b"\xe9" + b"a" * n, "utf-8"))


def _nul_bytes(n: int) -> Case:
    return Case("\x00" * n)


def _binary_header_text(n: int) -> Case:
    return Case("[binary: " + "b" * n)


def _ansi(n: int) -> Case:
    return Case("\x1b[31mred\x1b[0m \x1b[2K\r" * n + "\n", tool_name="bash")


def _unterminated_string(n: int) -> Case:
    return Case("[" * 1200 + '"' + '\\"' * n + "]")


# kind -> (builder, the size the issue names or the bench uses, the size the test uses)
ADVERSARIAL: dict[str, tuple[Callable[[int], Case], int, int]] = {
    "one huge line": (_huge_line, 50_000_000, 4_000_000),
    "one huge error line": (_huge_error_line, 50_000_000, 4_000_000),
    "100k nested arrays": (_deep_nesting, 100_000, 100_000),
    "100k nested arrays inside an object": (_deep_object, 100_000, 100_000),
    "a million keys": (_many_keys, 1_000_000, 1_000_000),
    "a million keys one level down": (_many_inner_keys, 1_000_000, 200_000),
    "one huge key": (_huge_key, 10_000_000, 1_000_000),
    "a huge first array item": (_huge_first_item, 200_000, 20_000),
    "many search results": (_many_results, 100_000, 20_000),
    "many markdown links, no spaces": (_many_links, 1_000_000, 100_000),
    "a CSV with 100,000 columns": (_csv_columns, 100_000, 100_000),
    "a million newlines": (_million_newlines, 1_000_000, 1_000_000),
    "a million newlines of command output": (_newlines_command, 1_000_000, 1_000_000),
    "command output with huge lines": (_long_command_lines, 1_000_000, 100_000),
    "many headings": (_many_headings, 100_000, 100_000),
    "many definitions": (_many_definitions, 100_000, 100_000),
    "unclosed pub( lines": (_unclosed_pub, 100_000, 100_000),
    "invalid UTF-8": (_invalid_utf8, 100_000, 100_000),
    "invalid UTF-8 in one huge line": (_invalid_utf8_line, 10_000_000, 1_000_000),
    "NUL bytes": (_nul_bytes, 10_000_000, 1_000_000),
    "text that starts like a hex dump": (_binary_header_text, 10_000_000, 1_000_000),
    "ANSI escapes": (_ansi, 100_000, 100_000),
    "an unterminated string under deep nesting": (_unterminated_string, 1_000_000, 100_000),
}


def adversarial(kind: str, size: int | None = None) -> Case:
    """The ``kind`` body at ``size`` (its unit is the kind's: keys, lines, levels...; default: the issue's)."""
    build, full, _ = ADVERSARIAL[kind]
    return build(full if size is None else size)
