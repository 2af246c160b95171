"""``claude-code``: Claude Code session JSONL.

One record per content block, so records sharing ``message.id`` are one API response. The
conversation is a ``parentUuid`` tree, walked from the last record, across a ``compact_boundary``
through its ``logicalParentUuid``. Parallel tool calls hang their results off side branches: those
are kept when they answer a call on the main branch.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from vak_context.events.payloads import TextBlock, ThinkingBlock, ToolUseBlock, Usage
from vak_context.importers.base import Document, ImportFormat
from vak_context.importers.parts import content_text
from vak_context.importers.recording import (
    CompactionMark,
    ControlText,
    ModelStep,
    Recording,
    ToolOutput,
    UserText,
)
from vak_context.importers.strict_json import SHAPE_ERRORS, RecordShapeError, count, kind_of

NAME = "claude-code"

Records = list[tuple[int, dict[str, Any]]]  # (line number, record)

_CONTROL_PREFIXES = (("<task-notification>", "task-notification"), ("[Request interrupted", "interrupt"))
_SNIFF_RECORDS = 50  # a session may open with summary or snapshot records; its messages follow


def sniff(doc: Document) -> bool:
    """JSON Lines with a ``sessionId``, or a user, assistant or progress record, in the first 50 lines."""
    rows = doc.rows or []
    return any(
        "sessionId" in r or r.get("type") in ("user", "assistant", "progress")
        for _, r in rows[:_SNIFF_RECORDS]
    )


def parse(doc: Document) -> list[Recording]:
    return [parse_claude_code(doc.rows or [], doc.stem)]


def parse_claude_code(records: Records, name: str) -> Recording:
    """``records`` are (line number, record); a record with the wrong shape is refused with its line."""
    check_claude_records(records)
    rec = Recording(name=name, format=NAME)
    try:
        reader = _Reader(rec, _conversation(records))
        for n, r in records:
            reader.read(n, r)
        return reader.finish()
    except RecordShapeError as exc:
        if exc.where:
            raise
        raise RecordShapeError(rec.current, exc.message) from exc
    except SHAPE_ERRORS as exc:
        raise RecordShapeError(
            rec.current,
            f"a Claude Code record does not have the expected shape ({type(exc).__name__}: {exc})",
        ) from exc


def check_claude_records(records: Records) -> None:
    """The fields the conversation tree is built from, checked on every message record first."""
    for n, r in records:
        kind = r.get("type")
        if kind not in ("user", "assistant"):
            continue
        if not isinstance(r.get("uuid"), str) or not r["uuid"]:
            raise RecordShapeError(
                (n,),
                f"a {kind!r} record has no uuid (it is {kind_of(r.get('uuid'))}); every message "
                "record needs its uuid to place it in the conversation",
            )
        msg = r.get("message")
        if not isinstance(msg, dict):
            raise RecordShapeError((n,), f"the message of a {kind!r} record is {kind_of(msg)}, not an object")
        if not isinstance(msg.get("id"), str | None):
            raise RecordShapeError((n,), f"message.id is {kind_of(msg.get('id'))}, not a string")
        content = msg.get("content")
        if not isinstance(content, str | list | None):
            raise RecordShapeError((n,), f"message.content is {kind_of(content)}, not a string or an array")
        for b in content if isinstance(content, list) else []:
            if isinstance(b, dict) and not isinstance(b.get("tool_use_id"), str | None):
                raise RecordShapeError(
                    (n,), f"a tool_use_id is {kind_of(b.get('tool_use_id'))}, not a string"
                )


def _conversation(records: Records) -> set[str]:
    """uuids of the messages the model saw: the main branch, the other records of its API responses,
    and side-branch user records that only answer calls made on it (parallel tool results)."""
    by_uuid = {r["uuid"]: r for _, r in records if isinstance(r.get("uuid"), str)}
    messages = [r for _, r in records if r.get("type") in ("user", "assistant")]
    main = _main_branch(records, by_uuid)
    main_msg_ids = {
        r["message"].get("id") for r in messages if r["type"] == "assistant" and r["uuid"] in main
    }
    included: set[str] = set()
    call_ids: set[str] = set()
    for r in messages:
        if r["uuid"] in main or (r["type"] == "assistant" and r["message"].get("id") in main_msg_ids):
            included.add(r["uuid"])
            if r["type"] == "assistant":
                call_ids |= {str(b.get("id")) for b in _blocks(r) if b.get("type") == "tool_use"}
    for r in messages:
        if r["uuid"] not in included and r["type"] == "user":
            blocks = _blocks(r)
            if blocks and all(
                b.get("type") == "tool_result" and b.get("tool_use_id") in call_ids for b in blocks
            ):
                included.add(r["uuid"])
    return included


def _main_branch(records: Records, by_uuid: dict[str, dict[str, Any]]) -> set[str]:
    """uuids on the path from the last record to the root, crossing compact boundaries."""
    last = next((r for _, r in reversed(records) if isinstance(r.get("uuid"), str)), None)
    seen: set[str] = set()
    cur = last
    while cur is not None and cur["uuid"] not in seen:
        seen.add(cur["uuid"])
        parent = cur.get("parentUuid") or cur.get("logicalParentUuid")
        cur = by_uuid.get(parent) if isinstance(parent, str) else None
    return seen


class _Reader:
    """Reads the records in file order into ``rec``, keeping the conversation's messages only."""

    def __init__(self, rec: Recording, included: set[str]) -> None:
        self.rec, self.included = rec, included
        self.steps: dict[str, ModelStep] = {}  # message.id -> its step: one response spans records
        self.tool_names: dict[str, str] = {}  # call id -> tool name, for the results
        self.pending_compaction: CompactionMark | None = None  # a boundary waiting for its summary

    def read(self, n: int, r: dict[str, Any]) -> None:
        self.rec.at((n,))
        kind = r.get("type")
        if kind == "system":
            self._system(r)
        elif kind not in ("user", "assistant"):
            self.rec.skipped[f"{kind} record (UI/telemetry, not sent to the model)"] += 1
        elif r["uuid"] not in self.included:
            self.rec.skipped["message off the conversation's main branch"] += 1
        elif kind == "assistant":
            self._assistant(r, r.get("message") or {})
        else:
            self._user(r, r.get("message") or {})

    def finish(self) -> Recording:
        if self.pending_compaction is not None:
            self.rec.events.append(self.pending_compaction)
        return self.rec

    def _system(self, r: dict[str, Any]) -> None:
        if r.get("subtype") == "compact_boundary":
            self.pending_compaction = CompactionMark("", dict(r.get("compactMetadata") or {}))
        else:
            self.rec.skipped[f"system record {r.get('subtype')!r} (UI/telemetry, not sent to the model)"] += 1

    def _assistant(self, r: dict[str, Any], msg: dict[str, Any]) -> None:
        mid = str(msg.get("id") or r["uuid"])
        step = self.steps.get(mid)
        if step is None:
            step = self.steps[mid] = ModelStep([], model=str(msg.get("model", "")), provider="anthropic")
            self.rec.events.append(step)
        for b in _blocks(r):
            block = _claude_block(b, self.rec.skipped)
            if block is not None:
                step.blocks.append(block)
                if isinstance(block, ToolUseBlock):
                    self.tool_names[block.id] = block.name
        if msg.get("stop_reason"):
            step.stop_reason = str(msg["stop_reason"])
        usage = _anthropic_usage(msg.get("usage"))
        if usage is not None:  # one record per block: the last record of a response has its full usage
            step.usage = usage

    def _user(self, r: dict[str, Any], msg: dict[str, Any]) -> None:
        rec, content = self.rec, msg.get("content")
        if r.get("isCompactSummary"):
            text, _ = content_text(content, rec.skipped)
            mark = self.pending_compaction or CompactionMark("", {})
            mark.summary = text
            rec.events.append(mark)
            self.pending_compaction = None
            return
        blocks = _blocks(r) if isinstance(content, list) else []
        results = [b for b in blocks if b.get("type") == "tool_result"]
        for b in results:
            call_id = str(b.get("tool_use_id", ""))
            text = _tool_result_text(b.get("content"), rec.skipped)
            rec.events.append(
                ToolOutput(call_id, self.tool_names.get(call_id, ""), text, bool(b.get("is_error")))
            )
        rest = [b for b in blocks if b.get("type") != "tool_result"]
        if results and not rest:
            return
        text, images = content_text(content if isinstance(content, str) else rest, rec.skipped)
        if r.get("isMeta"):
            rec.events.append(ControlText("meta", text))
            return
        tag = next((t for prefix, t in _CONTROL_PREFIXES if text.lstrip().startswith(prefix)), None)
        rec.events.append(ControlText(tag, text) if tag else UserText(text, images))


def _blocks(r: dict[str, Any]) -> list[dict[str, Any]]:
    content = (r.get("message") or {}).get("content")
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _claude_block(
    b: dict[str, Any], skipped: Counter[str]
) -> TextBlock | ThinkingBlock | ToolUseBlock | None:
    kind = b.get("type")
    if kind == "text":
        return TextBlock(text=str(b.get("text", "")))
    if kind == "thinking":
        return ThinkingBlock(thinking=str(b.get("thinking", "")), signature=b.get("signature"))
    if kind == "redacted_thinking":
        return ThinkingBlock(thinking="", signature=str(b.get("data", "")))
    if kind in ("tool_use", "server_tool_use"):
        inp = b.get("input")
        return ToolUseBlock(
            id=str(b.get("id")), name=str(b.get("name")), input=inp if isinstance(inp, dict) else {}
        )
    skipped[f"assistant block of type {kind!r}"] += 1
    return None


def _tool_result_text(content: Any, skipped: Counter[str]) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for part in content or []:
        if isinstance(part, dict) and part.get("type") == "text":
            parts.append(str(part.get("text", "")))
        else:
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            parts.append(f"[{kind} content not imported]")
            skipped[f"tool result part of type {kind!r}"] += 1
    return "\n".join(parts)


def _anthropic_usage(raw: Any) -> Usage | None:
    if not isinstance(raw, dict):
        return None
    return Usage(
        input_tokens=count(raw.get("input_tokens"), (), "usage.input_tokens"),
        cache_read_tokens=count(raw.get("cache_read_input_tokens"), (), "usage.cache_read_input_tokens"),
        cache_write_tokens=count(
            raw.get("cache_creation_input_tokens"), (), "usage.cache_creation_input_tokens"
        ),
        output_tokens=count(raw.get("output_tokens"), (), "usage.output_tokens"),
    )


FORMAT = ImportFormat(NAME, sniff, parse)
