"""Shape detection and the per-shape digests behind ``context.evidence.digest`` (spec §3).

Pure. A digest is chosen by the result's shape, never by its size: what a shape shows is fixed
(keys, titles, headings, exit codes). What fits of it is bounded: every digest is at most
``DIGEST_CHARS`` characters, tag included. Each shape quotes lines at the widest of
``DIGEST_LINE_WIDTHS`` that fits (a clipped line says how many characters it continues for), then
shows fewer keys, results or edge lines with a line that says how many it left out. Each reads only
what it shows, plus linear counts: no digest takes more than linear time, and no regex here can
backtrack quadratically (markdown links stop at the next ``[``, JSON strings are scanned possessively).
Callers use ``context.evidence``; this module is its workshop.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from context.evidence import BINARY_HEADER, DIGEST_CHARS, LINE_CHARS, Shape, line_count, omission_line

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
# neither part runs past the next "[", so a run of unclosed links is scanned once, not once per "["
_MD_LINK = re.compile(r"\[([^\[\]\n]{1,500})\]\((https?://[^\s)\[\]]+)\)")
_TITLE_URL = re.compile(r"(?im)^[ \t]*title:[ \t]*(\S[^\n]*)\r?\n[ \t]*(?:url|link|source):[ \t]*(\S+)")
_QUERY_HEADER = re.compile(r'\A\s*Web search results for query: "([^\n]*)"')
_NUMBERED = re.compile(r"^ *\d+(?:→|\t)")  # cat -n and Claude Code Read prefixes
_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+\S")
_FENCE = re.compile(r"^ {0,3}(?:```|~~~)")
_DEFINITION = re.compile(
    r"^(?:export |pub(?:\([^)\n]*\))? |async |public |private |static )*"
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


@dataclass(frozen=True)
class _DeepJson:
    """JSON nested deeper than Python's parser goes: its top-level members from a flat scan."""

    kind: str  # "object" or "array"
    members: list[tuple[str | None, str]]


_JSON_START = re.compile(r"\s*[\[{]")


def _parse_json(body: str) -> Any:
    """A JSON object or array, ``_DeepJson`` for one too deep to parse, else None. Parses once."""
    if not _JSON_START.match(body) or body.rstrip()[-1:] not in ("]", "}"):
        return None
    try:
        value = json.loads(body)
    except RecursionError:
        scanned = _scan_members(body)
        return None if scanned is None else _DeepJson(*scanned)
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

# A quoted line's width in a digest: the widest that lets the whole digest fit is used, tried in turn.
DIGEST_LINE_WIDTHS = (500, 200, 80)
EDGE_STEPS = (EDGE_LINES, 6, 3, 1)  # command and error output: fewer edge lines when 10 do not fit
HEADINGS_SHOWN = 20  # text: the first 20 headings, then how many more, so the paragraph has room


def render(
    shape: Shape,
    body: str,
    evidence_id: str,
    *,
    tool_input: dict[str, Any],
    seen: Analysis | None = None,
    budget: int = DIGEST_CHARS,
) -> str:
    """The digest's content for a shape, before the evidence tag: at most ``budget`` characters.

    Each shape reads only what it shows (first keys, first results, edge lines) plus linear counts,
    so the time is linear in the body and the output is bounded by construction.
    """
    seen = seen or Analysis()
    if not seen.parsed and shape in ("json", "search"):
        seen.json, seen.parsed = _parse_json(body), True
    if shape == "error":
        text = _error(body, evidence_id, budget)
    elif shape == "binary":
        text = _binary(body, budget)
    elif shape == "command":
        text = _command(body, evidence_id, budget)
    elif shape == "json":
        text = _json(body, seen.json, tool_input, budget)
    elif shape == "search":
        text = _search(body, seen, tool_input, budget)
    else:
        text = _text(body, tool_input, budget)
    return capped(text, budget)


def capped(content: str, budget: int) -> str:
    """``content`` when it fits in ``budget`` characters, else its first whole lines and a note.

    Every digest passes through here (``context.evidence.digest``), so no shape can exceed the cap
    even if its own bound were wrong.
    """
    if len(content) <= budget:
        return content
    note = f"[… the rest of this digest is left out: digests stay under {DIGEST_CHARS} chars …]"
    room = max(budget - len(note) - 1, 0)
    cut = content.rfind("\n", 0, room + 1)
    head = content[:cut] if cut > 0 else _clip(content[: max(room - 40, 0)], max(room - 40, 0))
    return (head + "\n" + note if head else note)[:budget]


def _clip(text: str, width: int, full: int | None = None) -> str:
    """One quoted line: whole up to ``width`` characters, else its start and how much more there is.

    ``full`` is the line's real length when ``text`` is only its start."""
    size = len(text) if full is None else full
    if size <= width:
        return text
    return f"{text[:width]} … [continues for {size - width} more chars]"


def _line_at(body: str, start: int) -> tuple[str, int]:
    """The line starting at ``start``: its first ``2 * LINE_CHARS`` characters (no terminator) and its
    full length. Copies only what a digest can quote."""
    nl = body.find("\n", start)
    end = len(body) if nl < 0 else nl
    if end > start and body[end - 1] == "\r":
        end -= 1
    return body[start : min(end, start + 2 * LINE_CHARS)], end - start


def _fit(make: Callable[[int], Iterator[str]], budget: int, more: Callable[[int], str]) -> str:
    """The lines ``make(width)`` yields, for the widest width whose lines all fit in ``budget``.

    When none does, the narrowest width's first lines that fit, then ``more(kept)``: a line saying
    what the other lines would have shown. ``make`` is a generator, read only as far as it fits, so
    a body with a million keys costs what the first few dozen cost.
    """
    lines: list[str] = []
    for width in DIGEST_LINE_WIDTHS:
        lines, used, complete = [], -1, True
        for line in make(width):
            if used + 1 + len(line) > budget:
                complete = False
                break
            lines.append(line)
            used += 1 + len(line)
        if complete:
            return "\n".join(lines)
    while lines:
        note = more(len(lines))
        if sum(len(x) + 1 for x in lines) + len(note) <= budget:
            return "\n".join([*lines, note])
        lines.pop()
    return more(0)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _byte_size(body: str) -> int:
    return len(body) if body.isascii() else len(body.encode("utf-8", "surrogatepass"))


# ---- error, command and binary


def _error(body: str, evidence_id: str, budget: int) -> str:
    if not body:
        return "error (the tool returned an empty error message)"
    if len(body) <= budget:
        return body  # errors are shown verbatim: they are short and the model must see them
    total = line_count(body)
    head = f"error: {_plural(total, 'line')}, {len(body)} chars, too long to show whole; its first and last lines:"
    return _edges(body, evidence_id, head, budget)


def _command(body: str, evidence_id: str, budget: int) -> str:
    code = exit_code(body)
    total = line_count(body)
    status = f"exit code {code}" if code is not None else "exit code not reported"
    head = f"command output: {status}, {_plural(total, 'line')}, {_byte_size(body)} bytes"
    return _edges(body, evidence_id, head, budget)


def _edges(body: str, evidence_id: str, head: str, budget: int) -> str:
    """``head``, then the first and last ``EDGE_LINES`` lines with the exact omission line between.

    Quoted lines narrow, then fewer edge lines are shown, until it fits in ``budget``; the omission
    line always names exactly the lines left out.
    """
    total = line_count(body)
    starts = _line_starts(body, EDGE_LINES + 1)  # where lines 1..11 start
    ends = _line_ends(body, EDGE_LINES + 1)  # where the last 11 lines end, last first
    for edges in EDGE_STEPS:
        for width in DIGEST_LINE_WIDTHS:
            if total <= 2 * edges:
                lines = [head] + [_clip(x, width) for x in _lines_between(body, 0, len(body))]
            else:
                first = [_clip(x, width) for x in _lines_between(body, 0, starts[edges])]
                tail_start = ends[edges]  # where line total - edges + 1 starts
                last = [_clip(x, width) for x in _lines_between(body, tail_start, len(body))]
                marker = omission_line(
                    evidence_id, edges + 1, total - edges, tail_start - starts[edges]
                ).rstrip("\n")
                lines = [head, *first, marker, *last]
            text = "\n".join(lines)
            if len(text) <= budget:
                return text
    return head


def _line_starts(body: str, count: int) -> list[int]:
    """Offsets where lines 1..``count`` start (``len(body)`` past the last line)."""
    starts, pos = [0], 0
    while len(starts) < count:
        nl = body.find("\n", pos)
        pos = len(body) if nl < 0 else nl + 1
        starts.append(pos)
    return starts


def _line_ends(body: str, count: int) -> list[int]:
    """``ends[k]``: where the last ``k`` lines start (``ends[0] == len(body)``), for k < ``count``."""
    ends = [len(body)]
    pos = len(body) - 1 if body.endswith("\n") else len(body)  # the last line's terminator is its own
    while len(ends) < count:
        nl = body.rfind("\n", 0, pos)
        ends.append(nl + 1)
        pos = max(nl, 0)
    return ends


def _lines_between(body: str, start: int, end: int) -> list[str]:
    """The lines of ``body[start:end]`` (a run of whole lines, at most ~11), without terminators."""
    if start >= end:
        return []
    chunk = body[start:end]
    parts = (chunk[:-1] if chunk.endswith("\n") else chunk).split("\n")
    return [p[:-1] if p.endswith("\r") else p for p in parts]


def _binary(body: str, budget: int) -> str:
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
        return f"{_clip(described, width)}; {lines} hex-dump lines of 16 bytes\nfirst row: {_clip(first_row, width)}"
    return f"binary-looking text: {len(body)} chars, {line_count(body)} lines, contains NUL characters"


# ---- json


def _json(body: str, value: Any, tool_input: dict[str, Any], budget: int) -> str:
    if isinstance(value, _DeepJson):
        return _deep_json(value, budget)
    if value is None:  # the caller forced shape="json" on something that is not
        return _text(body, tool_input, budget)
    if isinstance(value, list):
        return _fit(lambda width: _json_lines(value, width), budget, lambda kept: _FIRST_ITEM_TOO_LONG)
    return _fit(lambda width: _json_lines(value, width), budget, _more(len(value), "keys"))


def _more(total: int, noun: str, header_lines: int = 1) -> Callable[[int], str]:
    """The note for a list cut short: how many of ``total`` items (after ``header_lines``) it leaves out."""

    def note(kept: int) -> str:
        left = total - max(kept - header_lines, 0)
        return f"[… {left} more {noun}; the evidence id below recalls them all …]"

    return note


_FIRST_ITEM_TOO_LONG = "  [… the first item is too long to show here; the evidence id below recalls it …]"


_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(", ", ": "))


def _dump(value: Any, width: int) -> str:
    """``value`` as compact JSON, clipped to ``width``; encodes only about ``width`` characters of it."""
    parts: list[str] = []
    size = 0
    try:
        for chunk in _ENCODER.iterencode(value):
            parts.append(chunk)
            size += len(chunk)
            if size > width:
                break
    except (RecursionError, ValueError):
        parts.append(" …")
    text = "".join(parts)
    if size <= width:
        return text
    return f"{text[:width]} … [continues]"


def _key(key: str, width: int = 80) -> str:
    """A key as a digest names it: bare when plain, else JSON-quoted; a long one by its start and size."""
    shown = key[:width]
    plain = shown.isprintable() and shown.strip() == shown and shown
    text = shown if plain else json.dumps(shown, ensure_ascii=False)
    return text if len(key) <= width else f"{text} … [a {len(key)}-char key]"


def _keys(keys: Iterator[str], total: int, width: int) -> str:
    """Keys joined by ", " up to about ``width`` characters, then how many more there are."""
    parts: list[str] = []
    size = 0
    for k in keys:
        if size > width:
            return ", ".join(parts) + f", … {total - len(parts)} more"
        parts.append(_key(k))
        size += len(parts[-1]) + 2
    return ", ".join(parts)


def _json_lines(value: Any, width: int) -> Iterator[str]:
    if isinstance(value, list):
        if not value:
            yield "JSON array, empty"
            return
        yield f"JSON array of {_plural(len(value), 'item')}; first item in full:"
        yield "  " + _dump(value[0], width)
        return
    yield f"JSON object, {_plural(len(value), 'key')}:"
    for key, member in value.items():
        name = _key(key)
        if isinstance(member, dict):
            inner = f": {_keys(iter(member), len(member), width)}" if member else ""
            yield f"  {name}: object, {_plural(len(member), 'key')}{inner}"
        elif isinstance(member, list):
            first = f"; first in full: {_dump(member[0], width)}" if member else ""
            yield f"  {name}: array of {len(member)}{first}"
        else:
            yield f"  {name}: {_dump(member, width)}"


_JSON_TOKEN = re.compile(r'(?P<s>"(?:[^"\\]++|\\.)*+(?P<close>")?)|[\[\]{},:]', re.DOTALL)


def _scan_members(
    text: str, start: int = 0, end: int | None = None
) -> tuple[str, list[tuple[str | None, str]]] | None:
    """The top-level members of a JSON container without recursion: ("object"|"array", [(key, raw)]).

    None when the brackets do not balance or a string is not closed. Keys are decoded; values stay
    raw text, stripped. One pass over the tokens: linear in the text.
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
            if tok.group("close") is None:
                return None  # a string that never closes
            if depth == 1 and expecting_key:
                key, expecting_key = _decoded(t), False
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


def _decoded(token: str) -> str:
    try:
        value = json.loads(token)
    except ValueError:
        return token[1:-1]  # an escape JSON does not allow: show the key as written
    return value if isinstance(value, str) else token[1:-1]


def _deep_json(value: _DeepJson, budget: int) -> str:
    kind, members = value.kind, value.members
    note = "nested deeper than the parser goes; values shown as written"
    if kind == "array":
        if not members:
            return f"JSON array, empty ({note})"

        def array_lines(width: int) -> Iterator[str]:
            yield f"JSON array of {_plural(len(members), 'item')} ({note}); first item in full:"
            yield "  " + _clip(members[0][1], width)

        return _fit(array_lines, budget, lambda kept: _FIRST_ITEM_TOO_LONG)

    def object_lines(width: int) -> Iterator[str]:
        yield f"JSON object, {_plural(len(members), 'key')} ({note}):"
        for key, raw in members:
            name = _key(key or "")
            inner = _scan_members(raw) if raw[:1] in ("[", "{") else None
            if inner is not None and inner[0] == "array":
                first = f"; first in full: {_clip(inner[1][0][1], width)}" if inner[1] else ""
                yield f"  {name}: array of {len(inner[1])}{first}"
            elif inner is not None:
                names = _keys((k or "" for k, _ in inner[1]), len(inner[1]), width)
                yield f"  {name}: object, {_plural(len(inner[1]), 'key')}: {names}"
            else:
                yield f"  {name}: {_clip(raw, width)}"

    return _fit(object_lines, budget, _more(len(members), "keys"))


# ---- search


def _search(body: str, seen: Analysis, tool_input: dict[str, Any], budget: int) -> str:
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
    head = "search results" + (f' for "{" ".join(query[:2_000].split())}"' if query is not None else "")

    def lines(width: int) -> Iterator[str]:
        yield _clip(f"{head}: {_plural(len(pairs), 'result')} (titles and URLs; bodies left out)", width)
        for i, (title, url) in enumerate(pairs, 1):
            yield _clip(f"{i}. {title[:width].strip()} — {url[: width + 1]}", width)

    return _fit(lines, budget, _more(len(pairs), "results"))


# ---- text


def _text(body: str, tool_input: dict[str, Any], budget: int) -> str:
    total = line_count(body)
    if total == 0:
        return "empty result (0 lines, 0 bytes)"
    path = next(
        (tool_input[k] for k in ("file_path", "path", "filename") if isinstance(tool_input.get(k), str)), ""
    )
    extension = path.rsplit(".", 1)[-1].lower() if "." in path.rsplit("/", 1)[-1] else ""
    is_doc = extension in _DOC_EXTENSIONS
    numbered = _NUMBERED.match(body) is not None
    headings, heading_count, paragraph, para_first, more = _outline(body, is_doc, numbered)
    if not heading_count and total <= PARAGRAPH_LINES and len(body) <= budget:
        if all(line.strip() for line in _lines_between(body, 0, len(body))):
            return body  # the whole body is one short paragraph: the digest would repeat it all
    label = "headings" if is_doc else f"definitions (.{extension[:40]} file)"

    def lines(width: int) -> Iterator[str]:
        yield f"text: {_plural(total, 'line')}, {_plural(_byte_size(body), 'byte')}"
        yield f"{label}: {heading_count}" if heading_count else f"{label}: none"
        yield from (_clip(h, width, n) for h, n in headings)
        if heading_count > len(headings):
            yield f"[… {heading_count - len(headings)} more {label.split(' ', 1)[0]} …]"
        if paragraph:
            last = para_first + len(paragraph) - 1
            where = f"line {para_first}" if last == para_first else f"lines {para_first}-{last}"
            yield f"first paragraph ({where}{'; it continues past line ' + str(last) if more else ''}):"
            yield from (_clip(p, width, n) for p, n in paragraph)

    return _fit(
        lines,
        budget,
        lambda kept: "[… the rest of the outline is left out; the evidence id below recalls it …]",
    )


Quoted = list[tuple[str, int]]  # lines as (their start, their full length)


def _outline(body: str, is_doc: bool, numbered: bool) -> tuple[Quoted, int, Quoted, int, bool]:
    """The first ``HEADINGS_SHOWN`` headings (or a code file's definitions) and how many there are,
    and the first paragraph (at most ``PARAGRAPH_LINES`` lines) with its first line number."""
    prefix = r"(?: *\d+(?:→|\t))?" if numbered else ""
    headings: Quoted = []
    count = 0
    if is_doc:
        in_fence = False
        for m in re.finditer(rf"(?m)^{prefix}( {{0,3}}(?:```|~~~)| {{0,3}}#{{1,6}}[ \t]+\S)", body):
            if m.group(1).lstrip().startswith(("```", "~~~")):
                in_fence = not in_fence
            elif not in_fence:
                count += 1
                if len(headings) < HEADINGS_SHOWN:
                    headings.append(_line_at(body, m.start()))
    else:
        for m in re.finditer(rf"(?m)^{prefix}{_DEFINITION.pattern[1:]}", body):
            count += 1
            if len(headings) < HEADINGS_SHOWN:
                headings.append(_line_at(body, m.start()))
    paragraph: Quoted = []
    start = _paragraph_start(body, is_doc, numbered)
    if start is None:
        return headings, count, paragraph, 0, False
    # from the paragraph's first line, read at most PARAGRAPH_LINES + 1 lines
    para_first, pos = body.count("\n", 0, start) + 1, start
    while pos < len(body):
        nl = body.find("\n", pos)
        raw, full = _line_at(body, pos)
        pos = len(body) if nl < 0 else nl + 1
        text = _NUMBERED.sub("", raw, count=1) if numbered else raw
        boundary = not text.strip() or (
            bool(_HEADING.match(text) or _FENCE.match(text)) if is_doc else bool(_DEFINITION.match(text))
        )
        if boundary and paragraph:
            break
        if len(paragraph) == PARAGRAPH_LINES:
            return headings, count, paragraph, para_first, True
        paragraph.append((raw, full))
    return headings, count, paragraph, para_first, False


def _paragraph_start(body: str, is_doc: bool, numbered: bool) -> int | None:
    """Where the first paragraph line starts: the first line that is neither blank nor a boundary
    (a heading or fence in a document, a definition in code). One regex search, not a Python turn
    per line: a body of 100,000 headings costs one scan."""
    prefix = r"(?>(?: *\d+(?:→|\t))?)" if numbered else ""
    boundary = r" {0,3}#{1,6}[ \t]+\S| {0,3}(?:```|~~~)" if is_doc else _DEFINITION.pattern[1:]
    found = re.compile(rf"(?m)^{prefix}(?!{boundary})[^\S\n]*\S").search(body)
    return None if found is None else found.start()
