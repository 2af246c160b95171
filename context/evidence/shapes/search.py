"""The ``search`` shape: web-search results, as JSON or as text. Its digest lists every title and URL
(and the query), leaving the result bodies out.

Markdown links stop at the next ``[``, so a run of unclosed links is scanned once, not once per
``[``: no regex here can backtrack quadratically.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from itertools import repeat
from typing import Any, cast

from vak_context.context.evidence.shapes.base import Analysis, DigestShape
from vak_context.context.evidence.shapes.jsonscan import DeepJson
from vak_context.context.evidence.shapes.quoting import clip, fit, more_note, plural

SEARCH_WORDS = frozenset({"search", "websearch", "crawl", "crawler", "serp"})
_LINKS_BLOCK = re.compile(r"(?m)^Links:[ \t]*(?=\[)")
# neither part runs past the next "[", so a run of unclosed links is scanned once, not once per "["
_MD_LINK = re.compile(r"\[([^\[\]\n]{1,500})\]\((https?://[^\s)\[\]]+)\)")
_TITLE_URL = re.compile(r"(?im)^[ \t]*title:[ \t]*(\S[^\n]*)\r?\n[ \t]*(?:url|link|source):[ \t]*(\S+)")
_QUERY_HEADER = re.compile(r'\A\s*Web search results for query: "([^\n]*)"')


def json_results(seen: Analysis) -> bool:
    """A JSON body holding a list of results, each with a title and a URL."""
    return seen.json is not None and bool(results_in(seen.json))


def text_results(seen: Analysis) -> bool:
    """A text body with a ``Links: [...]`` block, or from a search tool, that names results (found
    once here, kept in ``seen.pairs`` for the digest)."""
    links = next(_links_blocks(seen.body), None) is not None
    if not (links or seen.words & SEARCH_WORDS):
        return False
    seen.pairs = find_text_results(seen.body)
    return bool(seen.pairs)


def _result_pairs(items: Any) -> list[tuple[str, str]] | None:
    """(title, url) of every item when a list reads as search results, else None."""
    if not isinstance(items, list) or not items or not all(isinstance(i, dict) for i in items):
        return None
    urls = _first_strings(items, ("url", "link", "href", "uri"))
    titles = _first_strings(items, ("title", "name", "headline")) if urls is not None else None
    return None if urls is None or titles is None else list(zip(titles, urls, strict=True))


def _first_strings(items: list[dict[str, Any]], keys: tuple[str, ...]) -> list[str] | None:
    """Each item's value under the first of ``keys`` that holds a string, or None when an item has none.
    A column at a time: most results name their fields alike, so one list of the first key's values,
    checked in C, answers for all of them and only the others are looked at key by key."""
    values = [item.get(keys[0]) for item in items]
    if all(map(isinstance, values, repeat(str))):
        return cast(list[str], values)  # checked just above, in C
    out = []
    for item, value in zip(items, values, strict=True):
        if not isinstance(value, str):
            value = next((item[k] for k in keys[1:] if isinstance(item.get(k), str)), None)
            if value is None:
                return None
        out.append(value)
    return out


def results_in(value: Any) -> list[tuple[str, str]]:
    """Search results in a parsed JSON value: a result list, or one under a key, two levels deep."""
    if isinstance(value, DeepJson):
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


def _links_blocks(body: str) -> Iterator[re.Match[str]]:
    """Every ``Links: [`` at a line's start, as ``_LINKS_BLOCK.finditer`` finds them, found by ``str.find``:
    a multiline ``^`` search would try every position of the body, ten times slower on a long one."""
    pos = body.find("Links:")
    while pos >= 0:
        if pos == 0 or body[pos - 1] == "\n":
            m = _LINKS_BLOCK.match(body, pos)
            if m is not None:
                yield m
        pos = body.find("Links:", pos + 1)


def find_text_results(body: str) -> list[tuple[str, str]]:
    """Every (title, url) in a text search result: ``Links: [...]`` blocks, else Title/URL lines or links."""
    pairs: list[tuple[str, str]] = []
    decoder = json.JSONDecoder()
    for m in _links_blocks(body):
        try:
            items, _ = decoder.raw_decode(body, m.end())
        except (ValueError, RecursionError):
            continue
        pairs.extend(_result_pairs(items) or [])
    if pairs:
        return pairs
    pairs = [(t.strip(), u) for t, u in _TITLE_URL.findall(body)]
    return pairs or [(t, u) for t, u in _MD_LINK.findall(body)]


def render(seen: Analysis, evidence_id: str, budget: int) -> str:
    body, parsed, tool_input = seen.body, seen.json, seen.tool_input
    if parsed is not None:
        pairs = results_in(parsed)
    else:
        pairs = seen.pairs if seen.pairs is not None else find_text_results(body)
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
        yield clip(f"{head}: {plural(len(pairs), 'result')} (titles and URLs; bodies left out)", width)
        for i, (title, url) in enumerate(pairs, 1):
            yield clip(f"{i}. {title[:width].strip()} — {url[: width + 1]}", width)

    return fit(lines, budget, more_note(len(pairs), "results"))


SHAPE = DigestShape("search", render)
