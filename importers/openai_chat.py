"""``openai-chat``: OpenAI Chat Completions messages with ``tool_calls``.

Five layouts: a JSON array of messages, ``{"messages": [...]}``, a JSON array of
``{"messages": [...]}`` items (one session each), JSON Lines with one message a line, or JSON Lines
with one ``{"messages": [...]}`` session a line. It is the most general format, so the registry
asks it last. tau-bench reads its trajectories with ``parse_openai_messages``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import vak_context.importers.mini_swe_agent as mini_swe_agent
from vak_context.events.payloads import TextBlock, ThinkingBlock, ToolUseBlock
from vak_context.importers.base import Document, ImportFormat
from vak_context.importers.parts import RAW_ARGUMENTS, arguments, content_text, openai_usage
from vak_context.importers.recording import ModelStep, Recording, SystemPrompt, ToolOutput, UserText
from vak_context.importers.strict_json import RecordShapeError, Where, array, kind_of, nested, obj, record_at

NAME = "openai-chat"

Layout = Literal["jsonl-messages", "jsonl-sessions", "array-messages", "array-sessions", "object"]


def _layout(doc: Document) -> Layout | None:
    """Which of the five layouts the file has, from its first record; None when it is none of them."""
    if doc.rows is not None:
        first = doc.first_row
        if "role" in first:
            return "jsonl-messages"
        return "jsonl-sessions" if isinstance(first.get("messages"), list) else None
    if (item := doc.first_item) is not None:
        if "role" in item:
            return "array-messages"
        return "array-sessions" if isinstance(item.get("messages"), list) else None
    whole = doc.object
    if whole is not None and isinstance(whole.get("messages"), list):
        # A mini-swe-agent trajectory holds its messages under "messages" too, and is its own format.
        return None if mini_swe_agent.sniff(doc) else "object"
    return None


def sniff(doc: Document) -> bool:
    """A message with a role first, or a ``messages`` array first (in JSON Lines, a JSON array, or
    the document's one object)."""
    return _layout(doc) is not None


def parse(doc: Document) -> list[Recording]:
    layout, stem = _layout(doc), doc.stem
    if layout == "jsonl-messages":
        rows = doc.rows or []
        lines = [n for n, _ in rows]
        return [parse_openai_messages([r for _, r in rows], stem, where=lambda i: (lines[i],))]
    if layout == "jsonl-sessions":
        return [
            parse_openai_messages(_messages(r, (n,)), f"{stem}-{i + 1}", where=_same_line(n))
            for i, (n, r) in enumerate(doc.rows or [])
        ]
    if layout == "array-messages":
        return [parse_openai_messages(doc.data, stem)]
    if layout == "array-sessions":
        return [
            parse_openai_messages(
                _messages(obj(x, (i,), f"item #{i}"), (i,)), f"{stem}-{i + 1}", where=nested((i, "messages"))
            )
            for i, x in enumerate(doc.data)
        ]
    if layout == "object":
        return [parse_openai_messages(doc.data["messages"], stem, where=nested(("messages",)))]
    raise RecordShapeError((), "not OpenAI chat messages")  # the registry parses only what sniff claimed


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


def parse_openai_messages(
    messages: list[Any],
    name: str,
    fmt: str = NAME,
    where: Callable[[int], Where] | None = None,
    rec: Recording | None = None,
) -> Recording:
    """``where(i)`` says where message ``i`` is in the file (see ``vak_context.importers.strict_json``); by default
    the messages are the file's top-level array."""
    where = where or nested(())
    rec = rec or Recording(name=name, format=fmt)
    names: dict[str, str] = {}
    for i, msg in enumerate(messages):
        rec.at(where(i))
        with record_at(where(i), f"message #{i}"):
            _openai_message(rec, i, msg, names, where(i))
    return rec


def _openai_message(rec: Recording, i: int, msg: Any, names: dict[str, str], where: Where) -> None:
    if not isinstance(msg, dict):
        raise RecordShapeError(where, f"message #{i} is {kind_of(msg)}, not an object with a role")
    role = msg.get("role")
    if role in ("system", "developer"):
        text, _ = content_text(msg.get("content"), rec.skipped)
        rec.events.append(SystemPrompt(text))
    elif role == "user":
        text, images = content_text(msg.get("content"), rec.skipped)
        rec.events.append(UserText(text, images))
    elif role == "assistant":
        rec.events.append(_assistant_step(rec, i, msg, names, where))
    elif role == "tool":
        call_id = str(msg.get("tool_call_id", ""))
        text, _ = content_text(msg.get("content"), rec.skipped)
        rec.events.append(ToolOutput(call_id, str(msg.get("name") or names.get(call_id, "")), text))
    else:
        rec.skipped[f"message with role {role!r}"] += 1


def _assistant_step(
    rec: Recording, i: int, msg: dict[str, Any], names: dict[str, str], where: Where
) -> ModelStep:
    """An assistant message: its reasoning, its text, then its tool calls (whose names ``names`` keeps,
    for results that do not repeat them)."""
    blocks: list[TextBlock | ThinkingBlock | ToolUseBlock] = []
    thinking = msg.get("reasoning_content") or msg.get("reasoning")
    if isinstance(thinking, str) and thinking:
        blocks.append(ThinkingBlock(thinking=thinking))
    text, _ = content_text(msg.get("content"), rec.skipped)
    if text:
        blocks.append(TextBlock(text=text))
    for j, call in enumerate(array(msg.get("tool_calls"), where, "tool_calls")):
        call = obj(call, where, f"tool_calls[{j}]")
        fn = obj(call.get("function"), where, f"tool_calls[{j}].function")
        call_id = str(call.get("id") or f"call-{i}-{j}")
        args, ok = arguments(fn.get("arguments"), where)
        if not ok:
            rec.skipped[RAW_ARGUMENTS] += 1
        names[call_id] = str(fn.get("name", ""))
        blocks.append(ToolUseBlock(id=call_id, name=names[call_id], input=args))
    return ModelStep(blocks, model=str(msg.get("model", "")), usage=openai_usage(msg.get("usage"), where))


FORMAT = ImportFormat(NAME, sniff, parse)
