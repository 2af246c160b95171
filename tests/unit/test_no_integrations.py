"""Spec §9, no first-class integrations: no production source routes on a vendor or topic word.

The banned words are the MCP server names the operator's config admits plus a fixed list of topic words
that entered the spec's runtime as test fixtures. Only comments may mention them: a string (a keyword
list, a regex, a docstring) or a name that carries one fails.
"""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import pytest

from vak_context.config import VakConfig, load_config, mcp_server_names

REPO = Path(__file__).resolve().parents[2]
PRODUCTION = ("vak", "events", "storage", "actors", "context", "providers", "agent", "sessions", "importers", "engine",
              "farm", "cli")
FIXED = ("weather", "noida")


def banned_words(config: VakConfig) -> tuple[str, ...]:
    return tuple(sorted({*FIXED, *(n.lower() for n in mcp_server_names(config))}))


def violations(files: list[Path], banned: tuple[str, ...]) -> list[str]:
    """``path:line: word`` for every banned word in a token that is not a comment."""
    pattern = re.compile(r"(?<![a-z0-9])(" + "|".join(map(re.escape, banned)) + r")(?![a-z0-9])", re.I)
    found: list[str] = []
    for path in files:
        source = path.read_text(encoding="utf-8")
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE):
                continue
            for m in pattern.finditer(tok.string):
                found.append(f"{path.relative_to(path.parents[1])}:{tok.start[0]}: {m.group(1)}")
    return found


def _production_files() -> list[Path]:
    return sorted(p for pkg in PRODUCTION for p in (REPO / pkg).rglob("*.py"))


def test_no_production_source_routes_on_a_vendor_or_topic_word() -> None:
    """Every production module is clean of the banned words outside comments."""
    assert _production_files(), "no production sources found"
    assert violations(_production_files(), banned_words(load_config())) == []


def test_the_check_finds_a_word_in_code_and_strings_but_not_in_comments(tmp_path: Path) -> None:
    """The scanner has teeth: a routing key in a string or a name is found, a comment is not, and the
    operator's MCP server names join the list."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "bad.py").write_text(
        "# weather is fine in a comment\n"
        "ROUTES = {'weather': 1}\n"
        "def tavily_route():\n    return 'x'\n"
    )
    config = VakConfig(raw={"mcp": {"servers": {"tavily": {"command": "x"}}}})
    assert banned_words(config) == ("noida", "tavily", "weather")
    found = violations([pkg / "bad.py"], banned_words(config))
    assert found == ["pkg/bad.py:2: weather", "pkg/bad.py:3: tavily"]


@pytest.mark.parametrize("raw, names", [
    ({}, ()),
    ({"mcp": {"servers": ["github", "tavily"]}}, ("github", "tavily")),
    ({"mcp": {"servers": {"slack": {}}}}, ("slack",)),
])
def test_mcp_server_names_from_the_config(raw: dict[str, object], names: tuple[str, ...]) -> None:
    """Both config shapes name the admitted servers."""
    assert mcp_server_names(VakConfig(raw=raw)) == names
