"""The lines of a long result that name what its turn asked about: a digest's focus. Pure.

A shape's digest shows a body by its form (the first paragraph, the edge lines, the first keys), which
never depends on what the turn asked. Asked "which carrier ships order O-1234?" and handed a 300-line
export whose digest quoted lines 1-10, the bundled model answered with the carrier of line 1; the line
that answers it is line 235 (``bench/agents.py``, the big-export task). So a digest of a ``text``,
``command`` or ``json`` body also quotes the few lines that name the turn's own distinctive words
(``focus_terms`` of its directive), with their line numbers, so the model can answer or recall around them.

The terms are the directive's words of three characters or more that are not common English, and its
tokens that hold a digit (``O-1234``, ``EUR/NOK``, ``v2.1``), matched whole and case-blind. A term that
names more than ``COMMON_SHARE`` of the body's lines (``carrier`` in every line of the export) says
nothing about which line matters and is dropped. The lines that name the rarest terms come first; at
most ``FOCUS_LINES`` are quoted, in line order, at most half the digest's room. The focus depends only on
the body and the directive, both fixed once the turn starts, so a digest stays byte-stable (spec P5).

One regex pass over the body (every term in one alternation), so the cost is linear in the body.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_right

from vak_context.context.evidence.shapes.quoting import DIGEST_LINE_WIDTHS, clip, plural

FOCUS_LINES = 6  # quoted lines at most: enough for a lookup's answer and its neighbours, little room taken
NAMED = 4  # terms a header names; "N more" for the rest
MAX_TERMS = 24  # a pasted document as the directive must not make the pass quadratic
COMMON_SHARE = 0.05  # a term on more than this share of the lines (and more than 3) is not a focus
DIRECTIVE_CHARS = 4_000  # terms come from the directive's start: where a question states what it asks
_NEWLINE = re.compile("\n")
_TOKEN = re.compile(r"[A-Za-z0-9][\w./:-]*[A-Za-z0-9]|\d")
_STOP = frozenset(
    """
    the and for are but not you all any can had her was one our out has him his how man new now old see
    two way who boy did its let put say she too use what when where which while with would could should
    this that these those there their them then than they from have been were will your into more most
    some such only also just very each other about after again before being below between both down
    during few further here once over same under until why whom does doing done make made please tell
    show give find list get got want need know like look using used use today current currently
    """.split()
)


def focus_terms(directive: str) -> tuple[str, ...]:
    """The directive's distinctive words as it wrote them, one per case-blind spelling, in first-seen
    order, at most ``MAX_TERMS``."""
    seen: dict[str, str] = {}
    for match in _TOKEN.finditer(directive[:DIRECTIVE_CHARS]):
        word = match.group()
        low = word.lower()
        has_digit = any(c.isdigit() for c in word)
        if (has_digit and len(word) >= 2) or (not has_digit and len(word) >= 3 and low not in _STOP):
            seen.setdefault(low, word)
        if len(seen) >= MAX_TERMS:
            break
    return tuple(seen.values())


def _line_starts(body: str) -> list[int]:
    """Where each line starts (``vak_context.context.evidence.window``'s lines: a final terminator starts none)."""
    starts = [0, *(m.end() for m in _NEWLINE.finditer(body))]
    if starts[-1] == len(body) and len(starts) > 1:
        starts.pop()
    return starts


def _matches(body: str, terms: tuple[str, ...], starts: list[int]) -> dict[str, dict[int, int]]:
    """For each term that is not common (lower-cased), the lines (0-based) that name it and where it first
    falls in each."""
    pattern = _pattern(terms)
    limit = max(3, int(COMMON_SHARE * len(starts)))
    found: dict[str, dict[int, int]] = {}
    common: set[str] = set()
    for match in pattern.finditer(body):
        term = match.group().lower()
        if term in common:
            continue
        lines = found.setdefault(term, {})
        line = bisect_right(starts, match.start()) - 1
        lines.setdefault(line, match.start())
        if len(lines) > limit:
            common.add(term)
            del found[term]
    return found


def _pattern(terms: tuple[str, ...]) -> re.Pattern[str]:
    """Every term, whole (not inside a longer word or number), case-blind; the longest first."""
    alternatives = "|".join(re.escape(t) for t in sorted(terms, key=len, reverse=True))
    return re.compile(r"(?<!\w)(?:" + alternatives + r")(?!\w)", re.IGNORECASE)


def focus_block(body: str, terms: tuple[str, ...], budget: int) -> str:
    """The lines of ``body`` that name ``terms`` (module docstring), quoted under a header, in at most
    ``budget`` characters; "" when no line names a distinctive term or nothing fits."""
    return "\n".join(focus_lines(body, terms, budget))


def focus_lines(body: str, terms: tuple[str, ...], budget: int) -> list[str]:
    """``focus_block``'s header and quoted lines (``"<number>: <the line or its part>"``), or [] for none."""
    if not terms or not body or budget <= 0 or _pattern(terms).search(body) is None:
        return []
    starts = _line_starts(body)
    found = _matches(body, terms, starts)
    if not found:
        return []
    weight = {t: math.log(1 + len(starts) / len(lines)) for t, lines in found.items()}
    score: dict[int, float] = {}
    where: dict[int, int] = {}
    for term, lines in found.items():
        for line, pos in lines.items():
            score[line] = score.get(line, 0.0) + weight[term]
            where[line] = min(where.get(line, pos), pos)
    ranked = sorted(score, key=lambda n: (-score[n], n))[:FOCUS_LINES]
    for keep in range(len(ranked), 0, -1):  # fewer lines, the best-ranked kept, once the narrowest is over
        for width in DIGEST_LINE_WIDTHS:
            block = _block(body, starts, terms, found, sorted(ranked[:keep]), where, len(score), width)
            if sum(len(line) + 1 for line in block) - 1 <= budget:
                return block
    return []


def _block(body: str, starts: list[int], terms: tuple[str, ...], found: dict[str, dict[int, int]],
           chosen: list[int], where: dict[int, int], naming: int, width: int) -> list[str]:
    named = [f'"{t}"' for t in terms if any(n in found.get(t.lower(), ()) for n in chosen)]
    named = named[:NAMED] + ([f"{len(named) - NAMED} more"] if len(named) > NAMED else [])
    some = f"the {plural(naming, 'line')}" if len(chosen) == naming else f"{len(chosen)} of the {naming} lines"
    quoted = [f"{some} naming {', '.join(named)} (of {len(starts)}):"]
    quoted += [f"{n + 1}: {_quote(body, starts, n, where[n], width)}" for n in chosen]
    return quoted


def _quote(body: str, starts: list[int], n: int, hit: int, width: int) -> str:
    """Line ``n`` (0-based) whole up to ``width``, else the part around its first match."""
    start = starts[n]
    end = starts[n + 1] - 1 if n + 1 < len(starts) else len(body) - body.endswith("\n")
    if end > start and body[end - 1] == "\r":
        end -= 1
    if end - start <= width:
        return body[start:end]
    left = max(start, min(hit - width // 3, end - width))
    text = body[left : left + width]
    before = f"[{left - start} chars] … " if left > start else ""
    return before + clip(text, width, end - left)
