"""The records a ``TurnIndex`` is made of (spec §2): turns, their steps and tool exchanges, summaries,
resets, evidence and controls, with their canonical dump. Pure data: ``vak_context.context.history.turns`` builds them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from vak_context.events.payloads import (
    AssistantStep,
    Directive,
    Presentation,
    TextBlock,
    ThinkingBlock,
    ToolResult,
    ToolUseBlock,
    TurnCard,
    Usage,
)


@dataclass
class Exchange:
    """One tool_use of a step and the tool_result that answered it (if one was recorded)."""

    tool_use_id: str
    tool_name: str
    input: dict[str, Any]
    result_id: str | None = None
    result: ToolResult | None = None

    @property
    def evidence_id(self) -> str | None:
        return self.result.evidence_id if self.result is not None else None


@dataclass
class Step:
    """One assistant response, its tool exchanges in call order, and the receipt that priced it."""

    id: str
    payload: AssistantStep
    exchanges: list[Exchange] = field(default_factory=list)
    receipt_id: str | None = None
    usage: Usage | None = None

    @property
    def text(self) -> str:
        return self.payload.text

    @property
    def has_tool_calls(self) -> bool:
        return bool(self.exchanges)


@dataclass
class Turn:
    ordinal: int  # 1-based turn number in the chain: recall({turn: ordinal})
    id: str  # the directive entry id
    directive: Directive
    steps: list[Step] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)  # evidence_body ids captured in this turn
    presentations: list[str] = field(default_factory=list)  # presentation entry ids, in emit order
    presentation_payloads: dict[str, Presentation] = field(default_factory=dict)
    orphan_results: list[str] = field(default_factory=list)  # tool_result ids with no matching tool_use
    controls: list[str] = field(default_factory=list)  # control entries that fell inside the turn
    nudges: list[tuple[int, str]] = field(default_factory=list)  # (steps before it, text): runtime redo nudges
    tail: str = ""  # the tail block its directive was sent with (a ``turn_tail`` entry), "" when none was recorded
    withdrawn: list[str] = field(default_factory=list)  # step ids a ``history.withdrawn`` activity took out
    entry_ids: list[str] = field(default_factory=list)  # every entry from the directive to the turn's end
    card_id: str | None = None
    card: TurnCard | None = None
    closed: bool = False  # a turn card closed it, or the next directive began
    failure: str = ""  # why it closed failed (its turn.failed / turn.request_too_large / turn.over_window activity)
    behind_reset: bool = False
    chars: int = 0
    tokens: int = 0
    tokens_source: Literal["estimate", "receipt"] = "estimate"

    @property
    def final_answer(self) -> Step | None:
        """The last step, when it made no tool call and said something: the turn's answer."""
        if self.steps and not self.steps[-1].has_tool_calls and self.steps[-1].text.strip():
            return self.steps[-1]
        return None

    @property
    def exchanges(self) -> Iterator[Exchange]:
        for step in self.steps:
            yield from step.exchanges


@dataclass(frozen=True)
class Summary:
    """A compaction packet over an inclusive range of turns (spec §2: Turn::Summary)."""

    id: str
    first_turn_id: str
    last_turn_id: str
    first_ordinal: int | None
    last_ordinal: int | None
    summary: str
    covered_evidence: tuple[str, ...]
    model: str
    behind_reset: bool = False
    # Steps of the last turn it covers, when that turn was still open as it was written (a recorded
    # mid-turn compaction); None covers the whole last turn.
    through_step: int | None = None
    source: str = "summariser"  # "extract": the engine's deterministic extract stands in for a summary
    brief: bool = False  # written for a brief packet: always rendered with its evidence counted


@dataclass(frozen=True)
class ResetMark:
    """A reset-with-handoff: the turns it puts behind it (1..turns) and for which model (None: every model)."""

    id: str
    model: str | None
    turns: int
    handoff: str


@dataclass(frozen=True)
class EvidenceMeta:
    """What the index knows of an evidence body without reading its bytes."""

    tool_use_id: str
    tool_name: str
    chars: int
    bytes: int
    is_error: bool
    media_type: str
    encoding: str
    turn: int | None  # ordinal of the turn it was captured in; None before the first directive


@dataclass(frozen=True)
class Control:
    id: str
    kind: str
    turn: int | None  # the turn it fell inside, None before the first directive
    tag: str = ""



def behind(s: Summary) -> Summary:
    """The summary, behind a reset: never planned again, still recalled."""
    return replace(s, behind_reset=True)


def step_chars(step: Step) -> int:
    n = 0
    for b in step.payload.blocks:
        if isinstance(b, TextBlock):
            n += len(b.text)
        elif isinstance(b, ThinkingBlock):
            n += len(b.thinking)
        elif isinstance(b, ToolUseBlock):
            n += len(b.name) + len(json.dumps(b.input, ensure_ascii=False, separators=(",", ":")))
    return n


def dump_turn(t: Turn) -> dict[str, Any]:
    return {
        "ordinal": t.ordinal,
        "id": t.id,
        "directive": t.directive.model_dump(mode="json"),
        "steps": [
            {
                "id": s.id,
                "receipt_id": s.receipt_id,
                "usage": s.usage.model_dump(mode="json") if s.usage else None,
                "exchanges": [
                    {
                        "tool_use_id": e.tool_use_id,
                        "tool_name": e.tool_name,
                        "result_id": e.result_id,
                        "evidence_id": e.evidence_id,
                    }
                    for e in s.exchanges
                ],
            }
            for s in t.steps
        ],
        "evidence": list(t.evidence),
        "presentations": list(t.presentations),
        "orphan_results": list(t.orphan_results),
        "controls": list(t.controls),
        **({"tail": t.tail} if t.tail else {}),  # only turns that recorded one: older dumps stay as they were
        **({"withdrawn": list(t.withdrawn)} if t.withdrawn else {}),
        "entry_ids": list(t.entry_ids),
        "card_id": t.card_id,
        "closed": t.closed,
        "behind_reset": t.behind_reset,
        "chars": t.chars,
        "tokens": t.tokens,
        "tokens_source": t.tokens_source,
        "final_answer": t.final_answer.id if t.final_answer else None,
    }
