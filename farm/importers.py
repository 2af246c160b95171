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

An import is all or nothing. ``plan_import`` reads the file and runs every session through a
``DryRunLedger``, which encodes and checks each entry exactly as ``LedgerStore.append`` would and
keeps none; only a plan that passed is written (``write_import``). So bad input raises
``InvalidRecording`` (or ``UnknownRecordingFormat``) naming the file and the record's line, and
leaves the ledger as it was: no session, no folder. NaN, infinities, numbers too large for a float
and lone surrogates are refused, never stored as ``null`` or as text that is not UTF-8 (see
``farm.import_json``). Nothing is skipped silently: every record left out is counted by reason in
the report.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel

from agent.carddocs import card_doc
from context.evidence import body_text, window
from context.render import EvidenceInfo, evidence_info
from context.turncard import args_digest, build_card
from context.turns import DEFAULT_TOKENS_PER_CHAR, TurnIndex
from events.envelope import Mapper
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
from farm.import_json import (
    RecordShapeError,
    Where,
    first_bad_value,
    kind_of,
    line_of_depth,
    line_of_path,
    loads,
    nested,
    obj,
    one_line,
)
from storage.cardindex import CardDoc, CardIndex
from storage.ledger import LedgerStore
from vak.errors import InvalidInput, InvalidRecording, LedgerError, UnknownRecordingFormat
from vak.names import check_name

# --tokens-per-char: a tokenizer spends at most one token per UTF-8 byte, so at most 4 per character;
# below 0.01 (100 characters a token) no tokenizer goes. Outside these a turn's size is meaningless,
# and 1e308 overflowed the size arithmetic.
MIN_TOKENS_PER_CHAR, MAX_TOKENS_PER_CHAR = 0.01, 4.0

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


_FIX = "fix or remove that record and import again (nothing was written)"


def _read_jsonl(path: Path, skip_bad_lines: bool, skipped: Counter[str]) -> list[tuple[int, Any]]:
    rows = []
    with path.open("r", encoding="utf-8", errors="strict") as fh:
        try:
            for n, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    value = loads(line)
                except (ValueError, RecursionError) as exc:
                    if skip_bad_lines:
                        skipped["line that is not JSON"] += 1
                        continue
                    what = (
                        f"{exc.msg} at column {exc.colno}"
                        if isinstance(exc, json.JSONDecodeError)
                        else "nested too deeply"
                        if isinstance(exc, RecursionError)
                        else one_line(str(exc), 120)
                    )
                    raise InvalidRecording(
                        f"line is not JSON ({what}). Fix or remove the line, or pass "
                        "--skip-bad-lines to import the rest and count it as skipped",
                        path=str(path),
                        line=n,
                    ) from exc
                bad = first_bad_value(value)
                if bad is not None:
                    raise InvalidRecording(f"{bad[1]}; {_FIX}", path=str(path), line=n)
                rows.append((n, value))
        except UnicodeDecodeError as exc:
            raise InvalidRecording(
                f"the file is not UTF-8 text (bad byte at offset {exc.start}); convert it to UTF-8 first",
                path=str(path),
            ) from exc
    return rows


def _read_json(path: Path) -> tuple[Any, str]:
    """The document and its text (kept to find a record's line when one is refused)."""
    try:
        text = path.read_text(encoding="utf-8")
        if text.lstrip()[:1] not in ("{", "["):
            raise UnknownRecordingFormat(str(path), "neither JSON nor JSON Lines", list(FORMATS))
        data = loads(text)
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
    except (ValueError, RecursionError) as exc:
        deep = isinstance(exc, RecursionError)
        what = "nested too deeply" if deep else one_line(str(exc), 120)
        raise InvalidRecording(
            f"not JSON the importer can read ({what}); fix the file and import again",
            path=str(path),
            line=line_of_depth(text) if deep else None,
        ) from exc
    bad = first_bad_value(data)
    if bad is not None:
        raise InvalidRecording(f"{bad[1]}; {_FIX}", path=str(path), line=line_of_path(text, bad[0]))
    return data, text


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
    except (ValueError, RecursionError):
        return False
    return bool(rest.strip())


def read_recordings(
    path: str | Path, *, skip_bad_lines: bool = False
) -> tuple[str, list[Recording], Counter[str]]:
    """(format, recordings, skipped) for a recorded-session file, by content, not by file name.

    A record with the wrong shape raises ``InvalidRecording`` with its line.
    """
    p = Path(path)
    if not p.is_file():
        raise InvalidRecording("no such file; give the path of a recorded session file", path=str(p))
    stem = p.name.split(".")[0]
    skipped: Counter[str] = Counter()
    if _looks_like_jsonl(p):
        rows = _read_jsonl(p, skip_bad_lines, skipped)
        objs = [(n, r) for n, r in rows if isinstance(r, dict)]
        if len(objs) != len(rows):
            if not skip_bad_lines and objs:
                n, r = next((n, r) for n, r in rows if not isinstance(r, dict))
                raise InvalidRecording(
                    f"the line is {kind_of(r)}, not a JSON object: every line of a recording is one record. "
                    "Fix or remove the line, or pass --skip-bad-lines to import the rest and count it as skipped",
                    path=str(p),
                    line=n,
                )
            skipped["JSONL line that is not an object"] += len(rows) - len(objs)
        if not objs:
            raise UnknownRecordingFormat(str(p), "no JSON objects in it", list(FORMATS))

        def jsonl_line(where: Where) -> int | None:
            return where[0] if where and isinstance(where[0], int) else None

        try:
            fmt, recordings = _parse_jsonl(p, objs, stem)
        except RecordShapeError as exc:
            raise InvalidRecording(f"{exc.message}; {_FIX}", path=str(p), line=jsonl_line(exc.where)) from exc
        for rec in recordings:
            rec.line_of = jsonl_line
        return fmt, recordings, skipped
    data, text = _read_json(p)

    def json_line(where: Where) -> int | None:
        return line_of_path(text, where)

    try:
        fmt, recordings = _parse_json(p, data, stem)
    except RecordShapeError as exc:
        raise InvalidRecording(f"{exc.message}; {_FIX}", path=str(p), line=json_line(exc.where)) from exc
    for rec in recordings:
        rec.line_of = json_line
    return fmt, recordings, skipped


def _parse_jsonl(p: Path, objs: list[tuple[int, dict[str, Any]]], stem: str) -> tuple[str, list[Recording]]:
    first = objs[0][1]
    if any("sessionId" in r or r.get("type") in ("user", "assistant", "progress") for _, r in objs[:50]):
        return "claude-code", [parse_claude_code(objs, stem)]
    if "history" in first and "instance_id" in first:
        return "openhands", parse_openhands(objs, stem)
    if "role" in first:
        lines = [n for n, _ in objs]
        return "openai-chat", [parse_openai_messages([r for _, r in objs], stem, where=lambda i: (lines[i],))]
    if isinstance(first.get("messages"), list):
        return "openai-chat", [
            parse_openai_messages(_messages(r, (n,)), f"{stem}-{i + 1}", where=_same_line(n))
            for i, (n, r) in enumerate(objs)
        ]
    raise UnknownRecordingFormat(str(p), f"JSONL objects with keys {sorted(first)[:8]}", list(FORMATS))


def _parse_json(p: Path, data: Any, stem: str) -> tuple[str, list[Recording]]:
    if isinstance(data, list) and data and isinstance(data[0], dict):  # the parsers refuse a later non-object
        if "traj" in data[0]:
            return "tau-bench", parse_tau_bench(data, stem)
        if "role" in data[0]:
            return "openai-chat", [parse_openai_messages(data, stem)]
        if isinstance(data[0].get("messages"), list):
            return "openai-chat", [
                parse_openai_messages(
                    _messages(obj(x, (i,), f"item #{i}"), (i,)),
                    f"{stem}-{i + 1}",
                    where=nested((i, "messages")),
                )
                for i, x in enumerate(data)
            ]
    if isinstance(data, dict):
        if str(data.get("trajectory_format", "")).startswith("mini-swe-agent"):
            return "mini-swe-agent", [parse_mini_swe(data, stem)]
        if isinstance(data.get("history"), list) and isinstance(data.get("trajectory"), list):
            return "swe-agent", [parse_swe_agent(data, stem)]
        if isinstance(data.get("messages"), list):
            return "openai-chat", [parse_openai_messages(data["messages"], stem, where=nested(("messages",)))]
        detail = f"a JSON object with keys {sorted(data)[:8]}"
    else:
        detail = f"JSON {type(data).__name__}" + (" (empty)" if not data else "")
    raise UnknownRecordingFormat(str(p), detail, list(FORMATS))


def _same_line(n: int) -> Callable[[int], Where]:
    """``where`` for the messages of one JSONL line: all of them are on line ``n``."""
    return lambda _i: (n,)


def _messages(item: dict[str, Any], where: Where) -> list[Any]:
    messages = item.get("messages")
    if messages is None:
        return []
    if not isinstance(messages, list):
        raise RecordShapeError(where, f"messages is {kind_of(messages)}, not an array of messages")
    return messages


# ------------------------------------------------------------------ writing


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def session_name(hint: str) -> str:
    """A path-safe session name from a file stem or record id (see vak.names.check_name)."""
    name = _UNSAFE.sub("-", hint).strip("-._") or "session"
    return name[:128].rstrip("-._") or "session"


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


def check_tokens_per_char(value: float) -> float:
    """``value`` when it is a sane tokens-per-character ratio, else InvalidInput saying the range."""
    try:
        ratio = float(value)
    except (TypeError, ValueError, OverflowError):
        ratio = math.nan
    if not (math.isfinite(ratio) and MIN_TOKENS_PER_CHAR <= ratio <= MAX_TOKENS_PER_CHAR):
        raise InvalidInput(
            f"tokens per character must be a number from {MIN_TOKENS_PER_CHAR} to {MAX_TOKENS_PER_CHAR} "
            f"(got {value!r}); English text is about 0.25, code about 0.3"
        )
    return ratio


def existing_sessions(store: LedgerStore, names: Sequence[str]) -> list[str]:
    """The names among ``names`` that already have entries in ``store``."""
    present = set(store.sessions())
    return [n for n in names if n in present and store.head(n) is not None]


def existing_sessions_at(ledger: str | Path, names: Sequence[str]) -> list[str]:
    """``existing_sessions`` for a ledger folder, read-only: a ledger that is not there is not created."""
    if not (Path(ledger) / "sessions").is_dir():
        return []
    with LedgerStore(ledger, readonly=True) as store:
        return existing_sessions(store, names)


def refuse_existing(taken: list[str], ledger: str | Path) -> None:
    if taken:
        more = f" (and {len(taken) - 1} more)" if len(taken) > 1 else ""
        raise InvalidInput(
            f"session {taken[0]!r}{more} already exists in the ledger at {ledger}; import under another name "
            "(--session NAME) or into a fresh ledger. Nothing was written"
        )


def _source_activity(rec: Recording, source_path: str) -> Activity:
    # A file name that is not UTF-8 decodes with surrogate escapes; the ledger stores UTF-8 text only.
    path = os.fsencode(source_path).decode("utf-8", "replace")
    detail = {"path": path, "format": rec.format, "recording": rec.name, **_jsonable(rec.source)}
    return Activity(activity="import.source", detail=detail)


def dry_run(
    rec: Recording,
    session: str,
    *,
    mapper: Mapper | None = None,
    tokens_per_char: float = DEFAULT_TOKENS_PER_CHAR,
    close_turns: bool = True,
    source_path: str = "",
) -> SessionReport:
    """Run ``rec`` through a DryRunLedger: InvalidRecording with the record's line if the ledger would
    refuse any entry of it; else the report the import will give."""
    report = SessionReport(session=session, format=rec.format, skipped=Counter(rec.skipped))
    writer = SessionWriter(
        DryRunLedger(mapper), session, report, tokens_per_char=tokens_per_char, close_turns=close_turns
    )
    index = -1
    try:
        writer.put(_source_activity(rec, source_path))
        writer.flush()
        for event in rec.events:
            index += 1
            writer.write(event)
            writer.flush()  # so an entry the ledger refuses is charged to the event that made it
        writer.finish()
    except (InvalidInput, ValueError, TypeError, OverflowError, RecursionError) as exc:
        line = rec.line_of(rec.origin(index)) if index >= 0 else None
        record = "the record" if line is not None else f"event #{index + 1} of recording {rec.name!r}"
        raise InvalidRecording(
            f"{record} cannot be stored in the ledger ({one_line(str(exc), 240)}); fix or remove it and "
            "import again (nothing was written)",
            path=source_path,
            line=line,
        ) from exc
    return report


def _write_recording(
    store: LedgerStore,
    rec: Recording,
    session: str,
    *,
    tokens_per_char: float,
    close_turns: bool,
    card_index: CardIndex | None,
    progress: Progress | None,
    source_path: str,
) -> SessionReport:
    report = SessionReport(session=session, format=rec.format, skipped=Counter(rec.skipped))
    writer = SessionWriter(store, session, report, tokens_per_char=tokens_per_char, close_turns=close_turns)
    writer.put(_source_activity(rec, source_path))
    total = len(rec.events)
    for i, event in enumerate(rec.events, 1):
        writer.write(event)
        if progress is not None and (i == total or i % 50 == 0):
            progress(session, i, total)
    writer.finish()
    if card_index is not None:
        card_index.add(session, writer.cards)
    return report


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
    """Write one recording as a new session, after a dry run; returns what was written and skipped."""
    tokens_per_char = check_tokens_per_char(tokens_per_char)
    refuse_existing(existing_sessions(store, [session]), store.root)
    dry_run(
        rec,
        session,
        mapper=store.mapper,
        tokens_per_char=tokens_per_char,
        close_turns=close_turns,
        source_path=source_path,
    )
    return _write_recording(
        store,
        rec,
        session,
        tokens_per_char=tokens_per_char,
        close_turns=close_turns,
        card_index=card_index,
        progress=progress,
        source_path=source_path,
    )


@dataclass
class ImportPlan:
    """A recorded-session file read, named and dry-run: every session in it can be written."""

    path: str
    format: str
    sessions: list[tuple[Recording, str]]  # (recording, session name)
    skipped: Counter[str]
    tokens_per_char: float
    close_turns: bool

    @property
    def names(self) -> list[str]:
        return [name for _, name in self.sessions]


def _session_names(recordings: list[Recording], session: str | None, stem: str) -> list[str]:
    """Session names, unique within the file: a repeat (two tau-bench items with one task and trial)
    gets ``-2``, ``-3``, ... so it cannot collide with the first halfway through an import."""
    names: list[str] = []
    seen: set[str] = set()
    for rec in recordings:
        if session is None:
            name = session_name(rec.name)
        elif len(recordings) == 1:
            name = session_name(session)
        else:
            name = session_name(session + rec.name[len(stem) :])
        unique, n = name, 1
        while unique in seen:
            n += 1
            unique = f"{name[: 128 - len(str(n)) - 1]}-{n}"
        seen.add(unique)
        names.append(unique)
    return names


def plan_import(
    path: str | Path,
    *,
    session: str | None = None,
    tokens_per_char: float = DEFAULT_TOKENS_PER_CHAR,
    close_turns: bool = True,
    skip_bad_lines: bool = False,
    mapper: Mapper | None = None,
) -> ImportPlan:
    """Read a recorded-session file and dry-run every session in it; writes nothing, creates nothing.

    ``mapper`` is the target ledger's (its size limits); the default limits otherwise.
    """
    tokens_per_char = check_tokens_per_char(tokens_per_char)
    fmt, recordings, skipped = read_recordings(path, skip_bad_lines=skip_bad_lines)
    names = _session_names(recordings, session, Path(path).name.split(".")[0])
    mapper = mapper or Mapper()
    for rec, name in zip(recordings, names, strict=True):
        dry_run(
            rec,
            name,
            mapper=mapper,
            tokens_per_char=tokens_per_char,
            close_turns=close_turns,
            source_path=str(path),
        )
    return ImportPlan(
        str(path), fmt, list(zip(recordings, names, strict=True)), skipped, tokens_per_char, close_turns
    )


def write_import(
    store: LedgerStore,
    plan: ImportPlan,
    *,
    card_index: CardIndex | None = None,
    progress: Progress | None = None,
) -> ImportReport:
    """Write a plan's sessions (refused, before any write, if one of them exists already)."""
    refuse_existing(existing_sessions(store, plan.names), store.root)
    report = ImportReport(path=plan.path, format=plan.format, skipped=plan.skipped)
    for rec, name in plan.sessions:
        try:
            written = _write_recording(
                store,
                rec,
                name,
                tokens_per_char=plan.tokens_per_char,
                close_turns=plan.close_turns,
                card_index=card_index,
                progress=progress,
                source_path=plan.path,
            )
        except (OSError, LedgerError) as exc:
            # The dry run passed, so this is the disk or the ledger, not the recording.
            done = [s.session for s in report.sessions]
            raise LedgerError(
                f"writing session {name!r} failed ({one_line(str(exc), 200)}); it may be partly written"
                + (f", after {len(done)} complete session(s) ({done[0]!r} first)" if done else "")
                + ". Fix the cause, then import again under another --session name or into a fresh ledger"
            ) from exc
        report.sessions.append(written)
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
    """Import every session in a recorded-session file, all or nothing (``plan_import``, then
    ``write_import``). ``session`` names it (a prefix when the file holds several sessions:
    ``<session>-<record id>``)."""
    plan = plan_import(
        path,
        session=session,
        tokens_per_char=tokens_per_char,
        close_turns=close_turns,
        skip_bad_lines=skip_bad_lines,
        mapper=store.mapper,
    )
    return write_import(store, plan, card_index=card_index, progress=progress)
