"""Presentations (spec §10): what to write when a step emits cards. I/O-free.

When an ``emit_*_card`` call validates, the runtime writes a ``presentation`` entry at that moment,
and the call's tool result is the short ack ``{"presentation": "<id>", "ok": true}``, never an echo
of the payload. Two rules decide what is written:

* ``derived_from`` is the evidence ids present in the turn before the emit: the results of earlier
  steps, not those of calls made in the same step (they had not returned when the card was written);
* a second card in the same turn with the same ``payload_digest`` is not written; its call is
  acknowledged with the first card's id (a no-op, spec §6 "Repeated cards").

A card that fails its schema writes nothing; its result is the schema error, which names the fields
to fix. The flow is two calls around the caller's append, because an ack names an entry id that
only exists once the presentation is appended::

    plans = plan_cards(turn, step)                      # what to write
    ids = append([p.presentation for p in plans if p.presentation])
    results = card_results(plans, ids)                  # the tool_result payloads, in call order
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from vak_context.context.history.cards import (
    CardLibrary,
    card_ack,
    default_library,
    presentation_record,
)
from vak_context.context.history.turns import Step, Turn
from vak_context.errors import InvalidPayload, UnknownCardType
from vak_context.events.payloads import Presentation, ToolResult, ToolUseBlock


@dataclass(frozen=True)
class CardPlan:
    """What one card call leads to."""

    tool_use_id: str
    tool_name: str
    presentation: Presentation | None = None  # to be written
    duplicate_of: str | None = None  # the presentation already written in this turn with the same payload
    error: str | None = None  # why nothing is written: the tool error the model reads


def _evidence_before(turn: Turn, step: Step | None) -> list[str]:
    """Evidence captured in the turn before ``step`` (all of it when the step is not in the turn yet)."""
    if step is None or step.id not in {s.id for s in turn.steps}:
        return list(turn.evidence)
    earlier = {
        ex.evidence_id
        for s in turn.steps[: [s.id for s in turn.steps].index(step.id)]
        for ex in s.exchanges
        if ex.evidence_id
    }
    return [e for e in turn.evidence if e in earlier]


def plan_cards(turn: Turn, step: Step, *, library: CardLibrary | None = None) -> list[CardPlan]:
    """A plan for every card call of ``step`` (a step of ``turn``, or the one about to join it)."""
    lib = library or default_library()
    written = {p.payload_digest: pid for pid, p in turn.presentation_payloads.items()}
    derived = _evidence_before(turn, step)
    planned: dict[str, int] = {}  # digest -> index in plans, for repeats within the step
    plans: list[CardPlan] = []
    for block in step.payload.blocks:
        if not isinstance(block, ToolUseBlock) or not lib.is_card_tool(block.name):
            continue
        try:
            record = presentation_record(turn.id, block, derived, library=lib)
        except (InvalidPayload, UnknownCardType) as exc:
            plans.append(CardPlan(block.id, block.name, error=str(exc)))
            continue
        plans.append(_dedupe(block.id, block.name, record, written, planned, len(plans)))
    return plans


def _dedupe(
    call_id: str,
    name: str,
    record: Presentation,
    written: dict[str, str],
    planned: dict[str, int],
    position: int,
) -> CardPlan:
    if record.payload_digest in written:
        return CardPlan(call_id, name, duplicate_of=written[record.payload_digest])
    if record.payload_digest in planned:
        return CardPlan(call_id, name, duplicate_of=f"@{planned[record.payload_digest]}")
    planned[record.payload_digest] = position
    return CardPlan(call_id, name, presentation=record)


def card_results(plans: Sequence[CardPlan], written_ids: Sequence[str]) -> list[ToolResult]:
    """The tool results of the card calls, in call order, once ``written_ids`` (one per plan with a
    presentation, in order) are known."""
    it = iter(written_ids)
    by_position: dict[int, str] = {}
    for i, plan in enumerate(plans):
        if plan.presentation is not None:
            try:
                by_position[i] = next(it)
            except StopIteration:
                raise InvalidPayload("card_results needs one written id per presentation planned") from None
    results = []
    for i, plan in enumerate(plans):
        if not plan.tool_use_id:
            continue
        if plan.error is not None:
            results.append(
                ToolResult(
                    tool_use_id=plan.tool_use_id, tool_name=plan.tool_name, content=plan.error, is_error=True
                )
            )
            continue
        pid = by_position.get(i) or plan.duplicate_of or ""
        if pid.startswith("@"):
            pid = by_position[int(pid[1:])]
        results.append(
            ToolResult(tool_use_id=plan.tool_use_id, tool_name=plan.tool_name, content=card_ack(pid))
        )
    return results
