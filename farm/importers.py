"""Import recorded agent sessions into the ledger (`vak import PATH`).

``import_path`` detects the file's format (``farm.import_formats`` reads each one into neutral
events), then writes every session as ledger entries:

* a user directive → ``directive``; a message the model saw that is not the user's request
  (``<task-notification>``, an interrupt, an agent's format error, a skill's expanded prompt) →
  ``nudge`` with a tag; a system prompt or run facts → ``activity``;
* an API response → ``assistant_step`` (text, thinking and tool_use blocks in order), then a
  ``receipt`` when the recording has its usage;
* a tool result → ``evidence_body`` holding the WHOLE result as its blob, then ``tool_result``
  logging what the request carried: ``context.evidence.window`` of the body (verbatim up to
  30,000 characters, else a window that names the recall call for the rest);
* a compaction (Claude Code's compact boundary and summary) → ``compaction`` over the turns so far;
* each finished turn → a ``turn_card`` (deterministic, ``context.turncard``), and, when a card
  index is given, its document in the session's BM25 card index.

Bad input raises ``InvalidRecording`` (or ``UnknownRecordingFormat``) with the file and line and
what to do; nothing is skipped silently: every record left out is counted by reason in the report.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from context.evidence import body_text, window
from context.render import EvidenceInfo, evidence_info
from context.turncard import args_digest, build_card
from context.turns import DEFAULT_TOKENS_PER_CHAR, TurnIndex
from events.payloads import (
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
from farm.import_formats import (
    FORMATS,
    CompactionMark,
    ControlText,
    Event,
    ModelStep,
    Note,
    Recording,
    SystemPrompt,
    ToolOutput,
    UserText,
    parse_claude_code,
    parse_mini_swe,
    parse_openai_messages,
    parse_openhands,
    parse_swe_agent,
    parse_tau_bench,
)
from storage.cardindex import CardDoc, CardIndex, card_doc
from storage.ledger import LedgerStore
from vak.errors import InvalidInput, InvalidRecording, UnknownRecordingFormat

Progress = Callable[[str, int, int], None]  # (session, events done, events in the session)


@dataclass
class SessionReport:
    session: str
    format: str
    entries: int = 0
    turns: int = 0
    steps: int = 0
    tool_calls: int = 0
    tool_results: int = 0
    error_results: int = 0
    windowed_results: int = 0
    controls: int = 0
    compactions: int = 0
    receipts: int = 0
    cards: int = 0
    unanswered_calls: int = 0
    renamed_calls: int = 0  # calls whose recorded id repeated an earlier call's, given a unique one
    skipped: Counter[str] = field(default_factory=Counter)


@dataclass
class ImportReport:
    path: str
    format: str
    sessions: list[SessionReport] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)  # records of the file no session took

    def totals(self) -> dict[str, int]:
        keys = (
            "entries",
            "turns",
            "steps",
            "tool_calls",
            "tool_results",
            "error_results",
            "windowed_results",
            "controls",
            "compactions",
            "receipts",
            "cards",
            "unanswered_calls",
            "renamed_calls",
        )
        return {k: sum(getattr(s, k) for s in self.sessions) for k in keys}

    def summary(self) -> str:
        t = self.totals()
        skipped = self.skipped + sum((s.skipped for s in self.sessions), Counter())
        lines = [
            f"imported {self.path} ({self.format}): {len(self.sessions)} session(s), {t['entries']} entries, "
            f"{t['turns']} turns, {t['steps']} steps, {t['tool_calls']} tool calls, {t['tool_results']} results "
            f"({t['error_results']} errors, {t['windowed_results']} windowed), {t['receipts']} receipts, "
            f"{t['compactions']} compactions, {t['controls']} control messages, {t['cards']} turn cards"
        ]
        if t["unanswered_calls"]:
            lines.append(f"  {t['unanswered_calls']} tool call(s) have no recorded result")
        if t["renamed_calls"]:
            lines.append(
                f"  {t['renamed_calls']} tool call(s) reused an earlier call's id and got a unique one (<id>~n)"
            )
        for reason, n in sorted(skipped.items()):
            lines.append(f"  skipped {n}: {reason}")
        return "\n".join(lines)


# ------------------------------------------------------------------ reading files


def _read_jsonl(path: Path, skip_bad_lines: bool, skipped: Counter[str]) -> list[tuple[int, Any]]:
    rows = []
    with path.open("r", encoding="utf-8", errors="strict") as fh:
        try:
            for n, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    rows.append((n, json.loads(line)))
                except json.JSONDecodeError as exc:
                    if skip_bad_lines:
                        skipped["line that is not JSON"] += 1
                        continue
                    raise InvalidRecording(
                        f"line is not JSON ({exc.msg} at column {exc.colno}). Fix or remove the line, or pass "
                        "--skip-bad-lines to import the rest and count it as skipped",
                        path=str(path),
                        line=n,
                    ) from exc
        except UnicodeDecodeError as exc:
            raise InvalidRecording(
                f"the file is not UTF-8 text (bad byte at offset {exc.start}); convert it to UTF-8 first",
                path=str(path),
            ) from exc
    return rows


def _read_json(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
        if text.lstrip()[:1] not in ("{", "["):
            raise UnknownRecordingFormat(str(path), "neither JSON nor JSON Lines", list(FORMATS))
        return json.loads(text)
    except UnicodeDecodeError as exc:
        raise InvalidRecording(
            f"the file is not UTF-8 text (bad byte at offset {exc.start}); convert it to UTF-8 first",
            path=str(path),
        ) from exc
    except json.JSONDecodeError as exc:
        raise InvalidRecording(
            f"not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}); if it is JSON Lines, "
            "give it a .jsonl name",
            path=str(path),
            line=exc.lineno,
        ) from exc


def _looks_like_jsonl(path: Path) -> bool:
    if path.suffix == ".jsonl":
        return True
    with path.open("rb") as fh:
        head = fh.read(1 << 16).lstrip()
    if head.startswith(b"["):
        return False
    first, _, rest = head.partition(b"\n")
    try:
        json.loads(first)
    except ValueError:
        return False
    return bool(rest.strip())


def read_recordings(
    path: str | Path, *, skip_bad_lines: bool = False
) -> tuple[str, list[Recording], Counter[str]]:
    """(format, recordings, skipped) for a recorded-session file, by content, not by file name."""
    p = Path(path)
    if not p.is_file():
        raise InvalidRecording("no such file; give the path of a recorded session file", path=str(p))
    stem = p.name.split(".")[0]
    skipped: Counter[str] = Counter()
    if _looks_like_jsonl(p):
        rows = _read_jsonl(p, skip_bad_lines, skipped)
        objs = [(n, r) for n, r in rows if isinstance(r, dict)]
        if len(objs) != len(rows):
            skipped["JSONL line that is not an object"] += len(rows) - len(objs)
        if not objs:
            raise UnknownRecordingFormat(str(p), "no JSON objects in it", list(FORMATS))
        first = objs[0][1]
        if any("sessionId" in r or r.get("type") in ("user", "assistant", "progress") for _, r in objs[:50]):
            return "claude-code", [parse_claude_code(objs, stem)], skipped
        if "history" in first and "instance_id" in first:
            return "openhands", parse_openhands(objs, stem), skipped
        if "role" in first:
            return "openai-chat", [parse_openai_messages([r for _, r in objs], stem)], skipped
        if isinstance(first.get("messages"), list):
            return (
                "openai-chat",
                [parse_openai_messages(r["messages"], f"{stem}-{i + 1}") for i, (_, r) in enumerate(objs)],
                skipped,
            )
        raise UnknownRecordingFormat(str(p), f"JSONL objects with keys {sorted(first)[:8]}", list(FORMATS))
    data = _read_json(p)
    if isinstance(data, list) and data and all(isinstance(x, dict) for x in data):
        if "traj" in data[0]:
            return "tau-bench", parse_tau_bench(data, stem), skipped
        if "role" in data[0]:
            return "openai-chat", [parse_openai_messages(data, stem)], skipped
        if isinstance(data[0].get("messages"), list):
            return (
                "openai-chat",
                [
                    parse_openai_messages(x.get("messages") or [], f"{stem}-{i + 1}")
                    for i, x in enumerate(data)
                ],
                skipped,
            )
    if isinstance(data, dict):
        if str(data.get("trajectory_format", "")).startswith("mini-swe-agent"):
            return "mini-swe-agent", [parse_mini_swe(data, stem)], skipped
        if isinstance(data.get("history"), list) and isinstance(data.get("trajectory"), list):
            return "swe-agent", [parse_swe_agent(data, stem)], skipped
        if isinstance(data.get("messages"), list):
            return "openai-chat", [parse_openai_messages(data["messages"], stem)], skipped
        detail = f"a JSON object with keys {sorted(data)[:8]}"
    else:
        detail = f"JSON {type(data).__name__}" + (" (empty)" if not data else "")
    raise UnknownRecordingFormat(str(p), detail, list(FORMATS))


# ------------------------------------------------------------------ writing


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def session_name(hint: str) -> str:
    """A path-safe session name from a file stem or record id (see vak.names.check_name)."""
    name = _UNSAFE.sub("-", hint).strip("-._") or "session"
    return name[:128].rstrip("-._") or "session"


class SessionWriter:
    """Writes one recording's events to a ledger session, keeping a TurnIndex as it goes.

    Entries queue and go out in one append (one fsync) whenever an id is needed next: an evidence
    body's id before its tool_result can name it, a step's id before its receipt can.
    """

    def __init__(
        self,
        store: LedgerStore,
        session: str,
        report: SessionReport,
        *,
        tokens_per_char: float = DEFAULT_TOKENS_PER_CHAR,
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
            self.put(Activity(activity=event.activity, detail=_jsonable(event.detail)))
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
        self.evidence[evidence_id] = evidence_info(evidence_id, meta, blob, call.input if call else None)
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
            self.put(Activity(activity="import.compaction", detail=_jsonable(event.detail)))
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


def _jsonable(value: Any) -> Any:
    """Run facts as canonical JSON can hold them: NaN, infinities and non-JSON objects become strings."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def import_recording(
    store: LedgerStore,
    rec: Recording,
    session: str,
    *,
    tokens_per_char: float = DEFAULT_TOKENS_PER_CHAR,
    close_turns: bool = True,
    card_index: CardIndex | None = None,
    progress: Progress | None = None,
    source_path: str = "",
) -> SessionReport:
    """Write one recording as a new session; returns what was written and skipped."""
    if session in store.sessions() and store.head(session) is not None:
        raise InvalidInput(
            f"session {session!r} already exists in the ledger at {store.root}; import under another name "
            "(--session NAME) or into a fresh ledger"
        )
    report = SessionReport(session=session, format=rec.format, skipped=Counter(rec.skipped))
    writer = SessionWriter(store, session, report, tokens_per_char=tokens_per_char, close_turns=close_turns)
    writer.put(
        Activity(
            activity="import.source",
            detail={
                "path": source_path,
                "format": rec.format,
                "recording": rec.name,
                **_jsonable(rec.source),
            },
        )
    )
    total = len(rec.events)
    for i, event in enumerate(rec.events, 1):
        writer.write(event)
        if progress is not None and (i == total or i % 50 == 0):
            progress(session, i, total)
    writer.finish()
    if card_index is not None:
        card_index.add(session, writer.cards)
    return report


def import_path(
    store: LedgerStore,
    path: str | Path,
    *,
    session: str | None = None,
    tokens_per_char: float = DEFAULT_TOKENS_PER_CHAR,
    close_turns: bool = True,
    card_index: CardIndex | None = None,
    progress: Progress | None = None,
    skip_bad_lines: bool = False,
) -> ImportReport:
    """Import every session in a recorded-session file. ``session`` names it (a prefix when the file
    holds several sessions: ``<session>-<record id>``)."""
    fmt, recordings, skipped = read_recordings(path, skip_bad_lines=skip_bad_lines)
    report = ImportReport(path=str(path), format=fmt, skipped=skipped)
    stem = Path(path).name.split(".")[0]
    for rec in recordings:
        if session is None:
            name = session_name(rec.name)
        elif len(recordings) == 1:
            name = session_name(session)
        else:
            name = session_name(session + rec.name[len(stem) :])
        report.sessions.append(
            import_recording(
                store,
                rec,
                name,
                tokens_per_char=tokens_per_char,
                close_turns=close_turns,
                card_index=card_index,
                progress=progress,
                source_path=str(path),
            )
        )
    return report
