"""Freshness (spec §7 "Stale data"): does a directive seek a value as it stands now? Pure.

:func:`seeks_live_value` is the classifier. It fires on temporal deixis ("current", "right now",
"today", "latest", "live" in its current sense, ...) in a request that seeks a fact, and stays silent
when the deixis sits beside something local (the current directory, branch, file, parser), a time or
date (the tail already carries the clock), or the agent's own state ("what are you holding right
now"), and on requests to change something ("refactor the current parser"). "live" counts only as an
adjective ("the live score"), never as the verb ("we live in the city").

:func:`accepts_no_live_data` reads an answer that says plainly it has no live data (accepted as an
answer). :func:`last_figure` and :func:`fail_closed_statement` write the system-authored statement a
turn fails closed with: no current value was retrieved; the last figure the conversation recorded, and
when — never a carried-over figure presented as current.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

_DEIXIS = re.compile(
    r"\b(?:current(?:ly)?|right now|as of now|at the moment|just now|today(?:'s)?|tonight(?:'s)?|latest|"
    r"up[- ]to[- ]date|real[- ]time|this (?:morning|afternoon|evening|week)(?:'s)?)\b"
    r"|\bnow\b(?=\s*[?.!]?\s*$)"  # "now" closing the request ("what is it trading at now?")
    r"|\b(?:the|a|any|some|get|show|fetch|check|with)\s+live\b"  # "the live score": the adjective
    r"|\blive\s+(?:score|scores|price|prices|data|feed|results?|updates?|rates?|values?|stats|odds|"
    r"standings|traffic|conditions|coverage|numbers?|count|quotes?)\b"
)
# Deixis beside these is local or about time, not the world's current state.
_LOCAL = re.compile(
    r"\b(?:current(?:ly)?|latest|today's|now)\s+(?:working\s+)?(?:directory|dir|folder|branch|file|files|repo|"
    r"repository|project|parser|function|class|module|code|tests?|commit|line|buffer|session|conversation|"
    r"context|selection|cursor|step|task|plan|implementation|config|configuration|setup|window|tab|page|"
    r"diff|version of (?:the|this|our) (?:code|file|parser|module)|turn|prompt|model|path|workspace|"
    r"checkout|build|migration|schema|draft|document)\b"
)
_TIME = re.compile(
    r"(?<!-)(?<!to )(?<!real )\b(?:time|date|day|year|month|hour|timezone|time zone|clock|weekday)\b"
    r"|\bwhat\s+(?:time|day|date)\b"
)
_AGENT = re.compile(r"\byour\b|\b(?:are|were)\s+you\b|\byou(?:'re|\s+are)\b")
_CHANGE = re.compile(
    r"^\s*(?:please\s+)?(?:refactor|rename|fix|write|implement|delete|remove|add|change|update|move|create|"
    r"commit|format|rewrite|run|build|install|open|save|edit|clean|revert|merge|rebase|push|deploy|"
    r"test|document|simplify|optimi[sz]e)\b"
)


def seeks_live_value(directive: str) -> bool:
    """Whether ``directive`` asks for a value as it stands now (the live-data domain)."""
    text = " ".join(directive.lower().split())
    if not _DEIXIS.search(text):
        return False
    if _LOCAL.search(text) or _TIME.search(text) or _AGENT.search(text) or _CHANGE.search(text):
        return False
    return True


_NO_LIVE = re.compile(
    r"\bno (?:live|current|real[- ]time|up[- ]to[- ]date) (?:data|value|figure|information|access|source)\b"
    r"|\b(?:do not|don't|cannot|can't|could not|couldn't|am unable to|was unable to|unable to)\s+"
    r"(?:have\s+|access\s+|retrieve\s+|get\s+|fetch\s+|check\s+|provide\s+)(?:access to\s+)?(?:any\s+)?"
    r"(?:the\s+)?(?:live|current|real[- ]time|up[- ]to[- ]date)\b"
    r"|\bno current value was retrieved\b"
)


def accepts_no_live_data(answer: str) -> bool:
    """Whether ``answer`` says plainly that it has no live data (an honest answer, accepted)."""
    return bool(_NO_LIVE.search(" ".join(answer.lower().split())))


@dataclass(frozen=True)
class RecordedFigure:
    """A figure an earlier turn recorded: its words, the turn and when the turn closed."""

    text: str
    turn: int
    at: float  # unix seconds


_NUMBER = re.compile(r"\d")
_SENTENCE = re.compile(r"[^.!?\n]*\d[^.!?\n]*(?:[.!?]|$)")


def figure_of(narration: str, cards: Sequence[dict[str, object]]) -> str:
    """The figure a turn recorded: a card's label, value and unit, else the first sentence of its
    answer that holds a number; "" when it recorded none."""
    for payload in cards:
        value = payload.get("value")
        if value is not None and _NUMBER.search(str(value)):
            label = str(payload.get("label") or payload.get("title") or "").strip()
            unit = str(payload.get("unit") or "").strip()
            return " ".join(p for p in (f"{label}:" if label else "", str(value), unit) if p)
    m = _SENTENCE.search(narration)
    return m.group(0).strip() if m else ""


def last_figure(figures: Sequence[RecordedFigure]) -> RecordedFigure | None:
    """The most recent recorded figure (``figures`` in turn order)."""
    return next((f for f in reversed(figures) if f.text), None)


def fail_closed_statement(last: RecordedFigure | None) -> str:
    """The system-authored answer of a turn that asked for a current value and observed nothing."""
    head = ("No current value was retrieved: no tool that reads the world as it is now succeeded in this "
            "turn, so no figure here is current.")
    if last is None:
        return head + " The conversation has recorded no earlier figure for it."
    when = datetime.fromtimestamp(last.at, UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (f"{head} The last figure the conversation recorded was \"{last.text}\" (turn {last.turn}, "
            f"{when}); it may no longer hold.")
