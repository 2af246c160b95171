"""Shape detection and the per-shape digests behind ``context.evidence.digest`` (spec §3).

Pure. A digest is chosen by the result's shape, never by its size: what a shape shows is fixed
(keys, titles, headings, exit codes), and every line it quotes follows the window's line rule
(whole up to 2,000 characters, else its start and how many characters it continues for).
Callers use ``context.evidence``; this module is its workshop.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from context.evidence import BINARY_HEADER, LINE_CHARS, Shape, clip_line, line_count, omission_line

EDGE_LINES = 10  # command output: the first and last 10 lines (spec §3)
PARAGRAPH_LINES = 10  # text: a first paragraph longer than this shows its first 10 lines

_COMMAND_WORDS = frozenset(
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
_SEARCH_WORDS = frozenset(
    {
        "search",
        "websearch",
        "crawl",
        "crawler",
        "serp",
        "google",
        "bing",
        "tavily",
        "brave",
        "duckduckgo",
        "ddg",
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
_ERROR_START = re.compile(r"\A\s*(?:error|exception|fatal)\s*:", re.IGNORECASE)
_LINKS_BLOCK = re.compile(r"(?m)^Links:[ \t]*(?=\[)")
_MD_LINK = re.compile(r"\[([^\]\n]{1,500})\]\((https?://[^\s)]+)\)")
_TITLE_URL = re.compile(r"(?im)^[ \t]*title:[ \t]*(\S[^\n]*)\r?\n[ \t]*(?:url|link|source):[ \t]*(\S+)")
_QUERY_HEADER = re.compile(r'\A\s*Web search results for query: "([^\n]*)"')
_NUMBERED = re.compile(r"^ *\d+(?:→|\t)")  # cat -n and Claude Code Read prefixes
_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+\S")
_FENCE = re.compile(r"^ {0,3}(?:```|~~~)")
_DEFINITION = re.compile(
    r"^(?:export |pub(?:\([^)]*\))? |async |public |private |static )*"
    r"(?:def|class|function|fn|func|defmodule|module|interface|struct|enum|trait|impl|type|object)\b"
)
_DOC_EXTENSIONS = frozenset({"", "md", "markdown", "mdx", "rst", "txt", "text", "adoc", "org"})


# ------------------------------------------------------------------ detection


def tool_words(tool_name: str) -> set[str]:
    """``"WebSearch"`` → {"web", "search", "websearch"}; ``"execute_bash"`` → {"execute", "bash"}."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", tool_name)
    words = {w for w in re.split(r"[^a-z0-9]+", spaced.lower()) if w}
    words.add(re.sub(r"[^a-z0-9]+", "", tool_name.lower()))
    return words


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


@dataclass
class Analysis:
    """What detection already computed, so rendering does not parse the body twice."""

    json: Any = None  # the parsed object or array, a _DeepJson, or None
    parsed: bool = False  # whether ``json`` was computed
    pairs: list[tuple[str, str]] | None = None  # search results found in text


def detect(body: str, *, tool_name: str, is_error: bool, tool_input: dict[str, Any]) -> Shape:
    return classify(body, tool_name=tool_name, is_error=is_error, tool_input=tool_input)[0]


def classify(
    body: str, *, tool_name: str, is_error: bool, tool_input: dict[str, Any]
) -> tuple[Shape, Analysis]:
    """The shape, and what was parsed on the way (see ``context.evidence.detect_shape`` for the rules)."""
    seen = Analysis()
    if body.startswith(BINARY_HEADER) or "\x00" in body:
        return "binary", seen
    words = tool_words(tool_name)
    code = exit_code(body)
    if code is not None and (is_error or words & _COMMAND_WORDS or not _EXIT_AT_END[1].search(body[-200:])):
        return "command", seen
    if is_error or (_ERROR_START.match(body) and line_count(body) <= 2 * EDGE_LINES):
        return "error", seen
    seen.json, seen.parsed = _parse_json(body), True
    if seen.json is not None:
        return ("search" if _results_in(seen.json) else "json"), seen
    if _LINKS_BLOCK.search(body) or words & _SEARCH_WORDS:
        seen.pairs = _text_results(body)
        if seen.pairs:
            return "search", seen
    if words & _COMMAND_WORDS:
        return "command", seen
    return "text", seen


class _DeepJson:
    """Marks JSON nested deeper than Python's parser goes; digested from a flat scan instead."""


def _parse_json(body: str) -> Any:
    """A JSON object or array, ``_DeepJson`` for one too deep to parse, else None."""
    if not re.match(r"\s*[\[{]", body) or body.rstrip()[-1:] not in ("]", "}"):
        return None
    try:
        value = json.loads(body)
    except RecursionError:
        return _DeepJson() if _scan_members(body) is not None else None
    except ValueError:
        return None
    return value if isinstance(value, dict | list) else None


def _result_pairs(items: Any) -> list[tuple[str, str]] | None:
    """(title, url) of every item when a list reads as search results, else None."""
    if not isinstance(items, list) or not items or not all(isinstance(i, dict) for i in items):
        return None
    pairs = []
    for item in items:
        url = next((item[k] for k in ("url", "link", "href", "uri") if isinstance(item.get(k), str)), None)
        title = next((item[k] for k in ("title", "name", "headline") if isinstance(item.get(k), str)), None)
        if url is None or title is None:
            return None
        pairs.append((title, url))
    return pairs


def _results_in(value: Any) -> list[tuple[str, str]]:
    """Search results in a parsed JSON value: a result list, or one under a key, two levels deep."""
    if isinstance(value, _DeepJson):
        return []
    if (pairs := _result_pairs(value)) is not None:
        return pairs
    if isinstance(value, dict):
        for inner in value.values():
            if (pairs := _result_pairs(inner)) is not None:
                return pairs
            if isinstance(inner, dict):
                for deeper in inner.values():
                    if (pairs := _result_pairs(deeper)) is not None:
                        return pairs
    return []


def _text_results(body: str) -> list[tuple[str, str]]:
    """Every (title, url) in a text search result: ``Links: [...]`` blocks, else Title/URL lines or links."""
    pairs: list[tuple[str, str]] = []
    decoder = json.JSONDecoder()
    for m in _LINKS_BLOCK.finditer(body):
        try:
            items, _ = decoder.raw_decode(body, m.end())
        except (ValueError, RecursionError):
            continue
        pairs.extend(_result_pairs(items) or [])
    if pairs:
        return pairs
    pairs = [(t.strip(), u) for t, u in _TITLE_URL.findall(body)]
    return pairs or [(t, u) for t, u in _MD_LINK.findall(body)]


# ------------------------------------------------------------------ rendering


def render(
    shape: Shape, body: str, evidence_id: str, *, tool_input: dict[str, Any], seen: Analysis | None = None
) -> str:
    """The digest's content for a shape, before the evidence tag."""
    seen = seen or Analysis()
    if not seen.parsed and shape in ("json", "search"):
        seen.json, seen.parsed = _parse_json(body), True
    if shape == "error":
        return body if body else "error (the tool returned an empty error message)"
    if shape == "binary":
        return _binary(body)
    if shape == "command":
        return _command(body, evidence_id)
    if shape == "json":
        return _json(body, seen.json, tool_input)
    if shape == "search":
        return _search(body, seen, tool_input)
    return _text(body, tool_input)


def _clip(text: str) -> str:
    return clip_line(text, None, line_limit=LINE_CHARS).rstrip("\n")


def _binary(body: str) -> str:
    if body.startswith(BINARY_HEADER):
        first_nl = body.find("\n")
        header = body[: first_nl if first_nl >= 0 else len(body)]
        lines = line_count(body) - 1
        first_row = body[first_nl + 1 :].split("\n", 1)[0] if first_nl >= 0 else ""
        described = header.strip("[]").split("; hex dump", 1)[0]
        return f"{described}; {lines} hex-dump lines of 16 bytes\nfirst row: {first_row}"
    return f"binary-looking text: {len(body)} chars, {line_count(body)} lines, contains NUL characters"


def _command(body: str, evidence_id: str) -> str:
    code = exit_code(body)
    total = line_count(body)
    status = f"exit code {code}" if code is not None else "exit code not reported"
    head = [
        f"command output: {status}, {_plural(total, 'line')}, {len(body.encode('utf-8', 'surrogatepass'))} bytes"
    ]
    if total <= 2 * EDGE_LINES:
        return "\n".join(head + [_clip(line) for line in _first_lines(body, total)])
    first = _first_lines(body, EDGE_LINES)
    last = _last_lines(body, EDGE_LINES)
    from context.evidence import line_offsets

    start, _ = line_offsets(body, EDGE_LINES + 1, EDGE_LINES + 1)
    end, _ = line_offsets(body, total - EDGE_LINES + 1, total - EDGE_LINES + 1)
    marker = omission_line(evidence_id, EDGE_LINES + 1, total - EDGE_LINES, end - start).rstrip("\n")
    return "\n".join(head + [_clip(x) for x in first] + [marker] + [_clip(x) for x in last])


def _first_lines(body: str, count: int) -> list[str]:
    """The first ``count`` lines, without terminators; reads only what it needs of a long body."""
    parts = body.split("\n", count)[:count] if count > 0 and body else []
    return [p[:-1] if p.endswith("\r") else p for p in parts]


def _last_lines(body: str, count: int) -> list[str]:
    """The last ``count`` lines, without terminators."""
    if count <= 0 or not body:
        return []
    trimmed = body[:-1] if body.endswith("\n") else body
    parts = trimmed.rsplit("\n", count)[-count:]
    return [p[:-1] if p.endswith("\r") else p for p in parts]


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


# ---- json


def _json(body: str, value: Any, tool_input: dict[str, Any]) -> str:
    if isinstance(value, _DeepJson):
        return _deep_json(body) or _text(body, tool_input)
    if value is None:  # the caller forced shape="json" on something that is not
        return _text(body, tool_input)
    try:
        return _json_value(value)
    except RecursionError:
        return _deep_json(body) or _text(body, tool_input)


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def _key(key: str) -> str:
    return key if key.isprintable() and key.strip() == key and key else _dump(key)


def _json_value(value: Any) -> str:
    if isinstance(value, list):
        if not value:
            return "JSON array, empty"
        return f"JSON array of {_plural(len(value), 'item')}; first item in full:\n  {_clip(_dump(value[0]))}"
    lines = [f"JSON object, {_plural(len(value), 'key')}:"]
    for key, member in value.items():
        if isinstance(member, dict):
            inner = ", ".join(_key(k) for k in member)
            lines.append(
                _clip(
                    f"  {_key(key)}: object, {_plural(len(member), 'key')}" + (f": {inner}" if member else "")
                )
            )
        elif isinstance(member, list):
            first = f"; first in full: {_dump(member[0])}" if member else ""
            lines.append(_clip(f"  {_key(key)}: array of {len(member)}{first}"))
        else:
            lines.append(_clip(f"  {_key(key)}: {_dump(member)}"))
    return "\n".join(lines)


_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{},:]', re.DOTALL)


def _scan_members(
    text: str, start: int = 0, end: int | None = None
) -> tuple[str, list[tuple[str | None, str]]] | None:
    """The top-level members of a JSON container without recursion: ("object"|"array", [(key, raw)]).

    None when the brackets do not balance. Keys are decoded; values stay raw text, stripped.
    """
    end = len(text) if end is None else end
    m0 = re.compile(r"\s*([\[{])").match(text, start, end)
    if m0 is None:
        return None
    kind = "object" if m0.group(1) == "{" else "array"
    members: list[tuple[str | None, str]] = []
    depth, key, value_start = 1, None, m0.end()
    expecting_key = kind == "object"
    for tok in _JSON_TOKEN.finditer(text, m0.end(), end):
        t = tok.group()
        if t[0] == '"':
            if depth == 1 and expecting_key:
                key, expecting_key = json.loads(t), False
        elif t in "[{":
            depth += 1
        elif t in "]}":
            depth -= 1
            if depth == 0:
                raw = text[value_start : tok.start()].strip()
                if raw or members:
                    members.append((key, raw))
                return kind, members
        elif depth == 1 and t == ":":
            value_start = tok.end()
        elif depth == 1 and t == ",":
            members.append((key, text[value_start : tok.start()].strip()))
            key, value_start, expecting_key = None, tok.end(), kind == "object"
    return None


def _deep_json(body: str) -> str | None:
    top = _scan_members(body)
    if top is None:
        return None
    kind, members = top
    note = "nested deeper than the parser goes; values shown as written"
    if kind == "array":
        if not members:
            return f"JSON array, empty ({note})"
        return f"JSON array of {_plural(len(members), 'item')} ({note}); first item in full:\n  {_clip(members[0][1])}"
    lines = [f"JSON object, {_plural(len(members), 'key')} ({note}):"]
    for key, raw in members:
        inner = _scan_members(raw) if raw[:1] in ("[", "{") else None
        if inner is not None and inner[0] == "array":
            first = f"; first in full: {inner[1][0][1]}" if inner[1] else ""
            lines.append(_clip(f"  {_key(key or '')}: array of {len(inner[1])}{first}"))
        elif inner is not None:
            names = ", ".join(_key(k or "") for k, _ in inner[1])
            lines.append(_clip(f"  {_key(key or '')}: object, {_plural(len(inner[1]), 'key')}: {names}"))
        else:
            lines.append(_clip(f"  {_key(key or '')}: {raw}"))
    return "\n".join(lines)


# ---- search


def _search(body: str, seen: Analysis, tool_input: dict[str, Any]) -> str:
    parsed = seen.json
    if parsed is not None:
        pairs = _results_in(parsed)
    else:
        pairs = seen.pairs if seen.pairs is not None else _text_results(body)
    query = next(
        (tool_input[k] for k in ("query", "q", "search_query") if isinstance(tool_input.get(k), str)), None
    )
    if query is None:
        if isinstance(parsed, dict) and isinstance(parsed.get("query"), str):
            query = parsed["query"]
        elif m := _QUERY_HEADER.match(body):
            query = m.group(1)
    head = "search results" + (f' for "{" ".join(query.split())}"' if query is not None else "")
    lines = [_clip(f"{head}: {_plural(len(pairs), 'result')} (titles and URLs; bodies left out)")]
    lines += [_clip(f"{i}. {title.strip()} — {url}") for i, (title, url) in enumerate(pairs, 1)]
    return "\n".join(lines)


# ---- text


def _text(body: str, tool_input: dict[str, Any]) -> str:
    total = line_count(body)
    size = len(body.encode("utf-8", "surrogatepass"))
    if total == 0:
        return "empty result (0 lines, 0 bytes)"
    path = next(
        (tool_input[k] for k in ("file_path", "path", "filename") if isinstance(tool_input.get(k), str)), ""
    )
    extension = path.rsplit(".", 1)[-1].lower() if "." in path.rsplit("/", 1)[-1] else ""
    is_doc = extension in _DOC_EXTENSIONS
    numbered = _NUMBERED.match(body) is not None
    headings, paragraph, para_first, more = _outline(body, is_doc, numbered)
    blank_free = (
        all(line.strip() for line in _first_lines(body, total)) if total <= PARAGRAPH_LINES else False
    )
    if not headings and blank_free:
        return body  # the whole body is one short paragraph: the digest would repeat it all
    label = "headings" if is_doc else f"definitions (.{extension} file)"
    lines = [f"text: {_plural(total, 'line')}, {_plural(size, 'byte')}"]
    lines.append(f"{label}: {len(headings)}" if headings else f"{label}: none")
    lines += [_clip(h) for h in headings]
    if paragraph:
        last = para_first + len(paragraph) - 1
        where = f"line {para_first}" if last == para_first else f"lines {para_first}-{last}"
        lines.append(f"first paragraph ({where}{'; it continues past line ' + str(last) if more else ''}):")
        lines += [_clip(p) for p in paragraph]
    return "\n".join(lines)


def _outline(body: str, is_doc: bool, numbered: bool) -> tuple[list[str], list[str], int, bool]:
    """Headings (or a code file's definitions), and the first paragraph with its first line number."""
    prefix = r"(?: *\d+(?:→|\t))?" if numbered else ""
    headings: list[str] = []
    if is_doc:
        in_fence = False
        for m in re.finditer(rf"(?m)^{prefix}( {{0,3}}(?:```|~~~)| {{0,3}}#{{1,6}}[ \t]+\S)[^\n]*", body):
            if m.group(1).lstrip().startswith(("```", "~~~")):
                in_fence = not in_fence
            elif not in_fence:
                headings.append(m.group(0).rstrip("\r"))
    else:
        headings = [
            m.group(0).rstrip("\r")
            for m in re.finditer(rf"(?m)^{prefix}{_DEFINITION.pattern[1:]}[^\n]*", body)
        ]
    paragraph: list[str] = []
    para_first, pos, number = 0, 0, 0
    while pos < len(body):
        nl = body.find("\n", pos)
        end = len(body) if nl < 0 else nl + 1
        number += 1
        raw = body[pos:end].rstrip("\r\n")
        pos = end
        text = _NUMBERED.sub("", raw, count=1) if numbered else raw
        boundary = not text.strip() or (
            bool(_HEADING.match(text) or _FENCE.match(text)) if is_doc else bool(_DEFINITION.match(text))
        )
        if boundary:
            if paragraph:
                break
            continue
        if len(paragraph) == PARAGRAPH_LINES:
            return headings, paragraph, para_first, True
        if not paragraph:
            para_first = number
        paragraph.append(raw)
    return headings, paragraph, para_first, False
