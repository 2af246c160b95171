"""Writing one recording's neutral events as ledger entries (``SessionWriter``), or dry-running it.

* a user directive → ``directive``; a message the model saw that is not the user's request
  (``<task-notification>``, an interrupt, an agent's format error, a skill's expanded prompt) →
  ``nudge`` with a tag; a system prompt or run facts → ``activity``;
* an API response → ``assistant_step`` (text, thinking and tool_use blocks in order), then a
  ``receipt`` when the recording has its usage;
* a tool result → ``evidence_body`` holding the WHOLE result as its blob, then ``tool_result``
  logging what the request carried: ``vak_context.context.evidence.digest.window`` of the body (verbatim up to
  30,000 characters, else a window that names the recall call for the rest);
* a compaction (Claude Code's compact boundary and summary) → ``compaction`` over the turns so far;
* each finished turn → a ``turn_card`` (deterministic, ``vak_context.context.history.turncard``), and its document for
  the session's BM25 card index.

A ``DryRunLedger`` takes the same entries and keeps none: an import runs against it first.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

from pydantic import BaseModel

from vak_context.agent.carddocs import card_doc
from vak_context.context.capacity.tokens import PRIOR_TOKENS_PER_CHAR
from vak_context.context.evidence.digest import body_text, window
from vak_context.context.history.render import EvidenceInfo, evidence_info, turn_focus
from vak_context.context.history.turncard import args_digest, build_card
from vak_context.context.history.turns import TurnIndex
from vak_context.events.envelope import Mapper
from vak_context.events.payloads import (
    Activity,
    AssistantStep,
    Compaction,
    CoveredEvidence,
    Directive,
    EvidenceBody,
    Nudge,
    Receipt,
    ToolResult,
    ToolUseBlock,
)
from vak_context.importers.outcome import SessionOutcome
from vak_context.importers.recording import (
    CompactionMark,
    ControlText,
    Event,
    ModelStep,
    Note,
    SystemPrompt,
    ToolOutput,
    UserText,
)
from vak_context.names import check_name
from vak_context.storage.cardindex import CardDoc


class EntrySink(Protocol):
    """What a SessionWriter appends to: a LedgerStore, or a DryRunLedger."""

    def append(
        self, session: str, payloads: Sequence[Any], *, blobs: Sequence[bytes | None] | None = None
    ) -> list[str]: ...


class DryRunLedger:
    """Takes entries as ``LedgerStore.append`` does, and keeps none of them.

    Each entry is validated, encoded as canonical JSON and size-checked by the same ``Mapper``, its
    blob checked, the session name checked, and it is chained to the previous entry and given an id
    (at time 0, so not the id it will have). An import runs against it first: whatever the ledger
    would refuse is refused before anything is written.
    """

    def __init__(self, mapper: Mapper | None = None) -> None:
        self.mapper = mapper or Mapper()
        self.heads: dict[str, tuple[str | None, int]] = {}

    def append(
        self, session: str, payloads: Sequence[Any], *, blobs: Sequence[bytes | None] | None = None
    ) -> list[str]:
        check_name(session, "session name")
        prev, seq = self.heads.get(session, (None, 0))
        ids = []
        for payload, blob in zip(payloads, blobs or [None] * len(payloads), strict=True):
            entry = self.mapper.entry(payload, session=session, seq=seq, parent=prev, time_us=0, blob=blob)
            ids.append(entry.id)
            prev, seq = entry.id, seq + 1
        self.heads[session] = (prev, seq)
        return ids


class SessionWriter:
    """Writes one recording's events to a ledger session, keeping a TurnIndex as it goes.

    Entries queue and go out in one append (one fsync) whenever an id is needed next: an evidence
    body's id before its tool_result can name it, a step's id before its receipt can.
    """

    def __init__(
        self,
        store: EntrySink,
        session: str,
        report: SessionOutcome,
        *,
        tokens_per_char: float = PRIOR_TOKENS_PER_CHAR,
        close_turns: bool = True,
    ) -> None:
        self.store, self.session, self.report = store, session, report
        self.index = TurnIndex(tokens_per_char)
        self.close_turns = close_turns
        self.pending: list[tuple[BaseModel, bytes | None]] = []
        self.evidence: dict[str, EvidenceInfo] = {}  # this turn's bodies, digested for its card
        self.calls: dict[str, ToolUseBlock] = {}
        self.alias: dict[str, str] = {}  # a recorded call id -> the id it has in the ledger
        self.model = ""
        self.cards: list[CardDoc] = []  # card-index documents of the turns closed so far

    def put(self, payload: BaseModel, blob: bytes | None = None) -> None:
        self.pending.append((payload, blob))

    def flush(self) -> list[str]:
        if not self.pending:
            return []
        ids = self.store.append(
            self.session, [p for p, _ in self.pending], blobs=[b for _, b in self.pending]
        )
        for eid, (payload, _) in zip(ids, self.pending, strict=True):
            self.index.add((eid, payload))
        self.pending = []
        self.report.entries += len(ids)
        return ids

    def write(self, event: Event) -> None:
        if isinstance(event, UserText):
            self.close_turn()
            self.put(Directive(text=event.text, images=event.images))
        elif isinstance(event, ModelStep):
            self._step(event)
        elif isinstance(event, ToolOutput):
            self._result(event)
        elif isinstance(event, ControlText):
            self.report.controls += 1
            self.put(Nudge(tag=event.tag, text=event.text))
        elif isinstance(event, SystemPrompt):
            self.put(Activity(activity="import.system_prompt", detail={"text": event.text}))
        elif isinstance(event, Note):
            self.put(Activity(activity=event.activity, detail=jsonable(event.detail)))
        elif isinstance(event, CompactionMark):
            self._compaction(event)

    def _step(self, event: ModelStep) -> None:
        if not event.blocks:
            self.report.skipped["API response with no content blocks"] += 1
            return
        step = AssistantStep(
            blocks=tuple(self._unique_call_ids(event.blocks)),
            model=event.model,
            provider=event.provider,
            stop_reason=event.stop_reason,
        )
        self.model = event.model or self.model
        for block in step.tool_uses:
            self.calls[block.id] = block
        self.report.steps += 1
        self.report.tool_calls += len(step.tool_uses)
        self.put(step)
        if event.usage is not None:
            step_id = self.flush()[-1]
            self.put(
                Receipt(
                    provider=event.provider or "unknown",
                    model=event.model or "unknown",
                    usage=event.usage,
                    latency_ms=0.0,
                    step_id=step_id,
                )
            )
            self.report.receipts += 1

    def _unique_call_ids(self, blocks: list[Any]) -> list[Any]:
        """Tool-call ids made unique within the session: some recordings reuse an id (tau-bench replays
        do), and a request carrying two turns with the same tool_use id is refused by providers. A
        repeat becomes ``<id>~<n>``; its result follows the rename."""
        out = []
        for block in blocks:
            if isinstance(block, ToolUseBlock):
                recorded, new_id, n = block.id, block.id, 1
                while new_id in self.calls:
                    n += 1
                    new_id = f"{recorded}~{n}"
                if new_id != recorded:
                    self.report.renamed_calls += 1
                    block = block.model_copy(update={"id": new_id})
                self.alias[recorded] = new_id
            out.append(block)
        return out

    def _result(self, event: ToolOutput) -> None:
        event = ToolOutput(
            self.alias.get(event.tool_use_id, event.tool_use_id),
            event.tool_name,
            event.body,
            event.is_error,
            event.media_type,
        )
        blob = event.body.encode("utf-8") if isinstance(event.body, str) else bytes(event.body)
        encoding = "utf-8" if isinstance(event.body, str) else "binary"
        text = body_text(blob, encoding)
        call = self.calls.get(event.tool_use_id)
        name = event.tool_name or (call.name if call else "")
        meta = EvidenceBody(
            tool_use_id=event.tool_use_id,
            tool_name=name,
            media_type=event.media_type,
            encoding=encoding,
            chars=len(text) if encoding == "utf-8" else len(blob),
            bytes=len(blob),
            is_error=event.is_error,
        )
        self.put(meta, blob)
        evidence_id = self.flush()[-1]
        carried = window(text, evidence_id)
        self.put(
            ToolResult(
                tool_use_id=event.tool_use_id,
                tool_name=name,
                content=carried.text,
                is_error=event.is_error,
                evidence_id=evidence_id,
                windowed=carried.windowed,
            )
        )
        self.evidence[evidence_id] = evidence_info(evidence_id, meta, blob, call.input if call else None,
                                                   focus=turn_focus(self.index.current))
        self.report.tool_results += 1
        self.report.error_results += int(event.is_error)
        self.report.windowed_results += int(carried.windowed)

    def _compaction(self, event: CompactionMark) -> None:
        self.flush()
        turns = self.index.planned_turns()
        if not turns:
            self.report.controls += 1
            self.put(Nudge(tag="compaction-summary", text=event.summary))
            self.report.skipped["compaction before any turn (kept as a nudge)"] += 1
            return
        # The recorded summary names no evidence; the packet lists what it covers, one line each (spec §3).
        covered = tuple(
            CoveredEvidence(
                id=ex.evidence_id,
                description=f"{ex.tool_name}({args_digest(ex.input)}): {self.index.evidence[ex.evidence_id].chars} chars"
                + (", error" if self.index.evidence[ex.evidence_id].is_error else ""),
            )
            for turn in turns
            for ex in turn.exchanges
            if ex.evidence_id is not None and ex.evidence_id in self.index.evidence
        )
        self.put(
            Compaction(
                first_turn_id=turns[0].id,
                last_turn_id=turns[-1].id,
                summary=event.summary,
                covered_evidence=covered,
                model=self.model or "unknown",
            )
        )
        if event.detail:
            self.put(Activity(activity="import.compaction", detail=jsonable(event.detail)))
        self.report.compactions += 1

    def close_turn(self) -> None:
        """Write the open turn's TurnCard (and remember it for the card index)."""
        self.flush()
        turn = self.index.current
        if not self.close_turns or turn is None or turn.card_id is not None:
            self.evidence = {}
            return
        card = build_card(self.index, turn, self.evidence)
        self.put(card)
        self.cards.append(card_doc(self.flush()[-1], card, turn.presentation_payloads))
        self.report.cards += 1
        self.evidence = {}

    def finish(self) -> None:
        self.close_turn()
        self.flush()
        self.report.turns = len(self.index.turns)
        self.report.unanswered_calls = sum(
            1 for t in self.index.turns for ex in t.exchanges if ex.result is None
        )


def jsonable(value: Any) -> Any:
    """Run facts as canonical JSON can hold them: NaN, infinities and non-JSON objects become strings."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)
