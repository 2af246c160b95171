"""The request's stable prefix and moving tail (spec §6, §10 "Cache mechanics"). Pure.

* :func:`system_prompt`: the static layers only (identity, contract, guardrails, the tool catalogue):
  byte-identical across turns, so nothing that changes per turn may enter it.
* :func:`prefix_digest`: blake3 of the canonical system + tool list; written with every receipt. A turn
  whose digest differs from the previous turn's is a cache break, surfaced as an activity.
* :class:`Tail` / :func:`render_tail`: the per-turn block (``<turn_context>``, ``<intent>``, ``<stance>``,
  ``<thread>``, ``<work_contract>``). It never restates the directive.
* :func:`attach_tail`: puts the tail into the turn's *directive* message (resolved from the turn
  structure, never "the last user message"), after any leading tool results and before the directive's
  own words, so the last thing the model reads there is the user's text.
* :func:`cache_breakpoints`: after the prefix, after the previous turn, on the current step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import blake3

from context.messages import CacheHints, Message, TextPart, ToolResultPart, ToolSpec
from events.canonical import encode
from vak.errors import InvalidInput

DEFAULT_IDENTITY = (
    "You are a careful software agent working in the user's workspace through tools. "
    "Use the tools to look before you answer; answer from what they returned."
)
DEFAULT_CONTRACT = (
    "Tool results from earlier turns may appear as digests ending in [evidence:<id> …]; recall returns any "
    "of them in full. Earlier turns may appear as cards or a summary packet that names what it covers."
)
DEFAULT_STANCE = "Answer directly; still use a tool when the answer depends on what the workspace holds."


def system_prompt(catalogue: str = "", *, identity: str = DEFAULT_IDENTITY, contract: str = DEFAULT_CONTRACT,
                  guardrails: str = "") -> str:
    """The system prompt's static layers in a fixed order, blank layers left out."""
    return "\n\n".join(layer.strip() for layer in (identity, contract, guardrails, catalogue) if layer.strip())


def prefix_digest(system: str, tools: Sequence[ToolSpec]) -> str:
    """blake3 over the canonical JSON of the system prompt and the tool schemas, in order."""
    record = {"system": system, "tools": [t.model_dump(mode="json") for t in tools]}
    return blake3.blake3(encode(record)).hexdigest()


def prefix_change(before: tuple[str, Sequence[ToolSpec]], after: tuple[str, Sequence[ToolSpec]]) -> str:
    """What changed between two prefixes, in words, for the cache-break activity."""
    (s0, t0), (s1, t1) = before, after
    parts: list[str] = []
    if s0 != s1:
        at = next((i for i, (a, b) in enumerate(zip(s0, s1, strict=False)) if a != b), min(len(s0), len(s1)))
        parts.append(f"system prompt differs from char {at} ({len(s0)} → {len(s1)} chars)")
    names0, names1 = [t.name for t in t0], [t.name for t in t1]
    if names0 != names1:
        added = [n for n in names1 if n not in names0]
        removed = [n for n in names0 if n not in names1]
        parts.append(f"tools added {added}, removed {removed}" if added or removed else "tool order changed")
    else:
        changed = [a.name for a, b in zip(t0, t1, strict=True) if a != b]
        if changed:
            parts.append(f"tool schemas changed: {changed}")
    return "; ".join(parts) or "no change"


@dataclass(frozen=True)
class Tail:
    """The moving tail of one turn. ``now`` is a UTC timestamp (seconds); the caller owns the clock."""

    now: float
    timezone: str = "UTC"
    intent: str = ""
    stance: str = DEFAULT_STANCE
    thread: tuple[str, ...] = ()  # directives NOT in the working set verbatim
    paused: tuple[str, ...] = ()  # superseded directives: "earlier, now paused"
    work_contract: str = ""


def render_tail(tail: Tail) -> str:
    """The tail block, each part on its own tagged line(s); empty parts are left out."""
    try:
        zone = ZoneInfo(tail.timezone)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise InvalidInput(f"unknown time zone {tail.timezone!r}; use an IANA name such as 'Europe/Paris'") from exc
    instant = datetime.fromtimestamp(tail.now, UTC)
    local = instant.astimezone(zone)
    lines = [
        f"<turn_context>UTC {instant.strftime('%Y-%m-%dT%H:%M:%SZ')}; local {local.strftime('%Y-%m-%d %H:%M')} "
        f"{tail.timezone} (UTC{local.strftime('%z')})</turn_context>"
    ]
    if tail.intent.strip():
        lines.append(f"<intent>{tail.intent.strip()}</intent>")
    if tail.stance.strip():
        lines.append(f"<stance>{tail.stance.strip()}</stance>")
    thread = [f"- {d}" for d in tail.thread] + [f"- (earlier, now paused) {d}" for d in tail.paused]
    if thread:
        lines.append("<thread>\n" + "\n".join(thread) + "\n</thread>")
    if tail.work_contract.strip():
        lines.append(f"<work_contract>{tail.work_contract.strip()}</work_contract>")
    return "\n".join(lines) + "\n"


def attach_tail(messages: Sequence[Message], tail: str, directive_index: int) -> tuple[Message, ...]:
    """``messages`` with ``tail`` inserted into the directive message at ``directive_index``: after its
    leading tool results, before its first other part. Every other message is returned unchanged."""
    if not 0 <= directive_index < len(messages):
        raise InvalidInput(f"directive index {directive_index} is not a message index (0–{len(messages) - 1})")
    msg = messages[directive_index]
    if msg.role != "user":
        raise InvalidInput(f"message {directive_index} is an {msg.role} message, not the turn's directive")
    if not tail.strip():  # providers refuse blank text parts
        return tuple(messages)
    lead = 0
    while lead < len(msg.content) and isinstance(msg.content[lead], ToolResultPart):
        lead += 1
    content = (*msg.content[:lead], TextPart(text=tail), *msg.content[lead:])
    return (*messages[:directive_index], Message(role="user", content=content), *messages[directive_index + 1:])


def cache_breakpoints(n_messages: int, directive_index: int | None, session_key: str | None) -> CacheHints:
    """Breakpoints computed once per request: after the prefix (``prefix=True``), on the last message
    before the current turn (the previous turn), and on the current step (the last message)."""
    points: list[int] = []
    if directive_index is not None and directive_index > 0:
        points.append(directive_index - 1)
    if n_messages:
        points.append(n_messages - 1)
    return CacheHints(session_key=session_key, prefix=True, breakpoints=tuple(sorted(set(points))))
