"""Readers for recorded agent sessions: each format becomes a list of neutral ``Recording`` events.

One reader per format (the recorded sessions' README in ``shared/data/trajectories`` describes each):

* ``claude-code``: Claude Code session JSONL. One record per content block, so records sharing
  ``message.id`` are one API response; the conversation is a ``parentUuid`` tree, walked from the
  last record, across a ``compact_boundary`` through its ``logicalParentUuid``. Parallel tool calls
  hang their results off side branches: those are kept when they answer a call on the main branch.
* ``openai-chat``: a list of OpenAI Chat Completions messages with ``tool_calls`` (JSON array,
  ``{"messages": [...]}``, or JSONL with one message a line).
* ``tau-bench``: a JSON array of ``{task_id, trial, reward, info, traj}`` sessions.
* ``openhands``: OpenHands eval output, JSONL with one event stream (``history``) a line.
* ``mini-swe-agent``: a ``.traj.json`` whose actions are fenced ```bash blocks in the text.
* ``swe-agent``: a ``.traj`` with ``history`` chat messages and ``trajectory`` steps.

The readers only parse; ``farm.importers`` writes the events to the ledger. Nothing is dropped
silently: every record a reader does not turn into an event is counted in ``Recording.skipped``
under the reason it was left out.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from events.payloads import ImageRef, TextBlock, ThinkingBlock, ToolUseBlock, Usage
from farm.import_json import (
    SHAPE_ERRORS,
    RecordShapeError,
    Where,
    array,
    count,
    first_bad_value,
    kind_of,
    loads,
    nested,
    obj,
    record_at,
)

# ------------------------------------------------------------------ neutral events


@dataclass
class SystemPrompt:
    text: str


@dataclass
class UserText:
    """A user directive: the start of a turn."""

    text: str
    images: tuple[ImageRef, ...] = ()


@dataclass
class ControlText:
    """A message the model saw that is not a user directive (notification, interrupt, format error)."""

    tag: str
    text: str


@dataclass
class ModelStep:
    blocks: list[TextBlock | ThinkingBlock | ToolUseBlock]
    model: str = ""
    provider: str = ""
    stop_reason: str | None = None
    usage: Usage | None = None


@dataclass
class ToolOutput:
    tool_use_id: str
    tool_name: str
    body: str | bytes
    is_error: bool = False
    media_type: str = "text/plain"


@dataclass
class CompactionMark:
    """A compaction the recording agent did: its summary replaced everything before it."""

    summary: str
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class Note:
    """Recorded facts no model saw as a message (system prompt aside): run info, workspace context."""

    activity: str
    detail: dict[str, Any] = field(default_factory=dict)


Event = SystemPrompt | UserText | ControlText | ModelStep | ToolOutput | CompactionMark | Note


def _no_line(where: Where) -> int | None:
    return None


@dataclass
class Recording:
    name: str  # a hint for the session name (made path-safe by the importer)
    format: str
    events: list[Event] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    source: dict[str, Any] = field(default_factory=dict)
    # Where each event came from, so an event the ledger refuses names its record's line.
    origins: list[Where] = field(default_factory=list)
    current: Where = ()
    line_of: Callable[[Where], int | None] = _no_line  # set by read_recordings: a Where -> its line

    def at(self, where: Where) -> None:
        """The events appended from now on come from the record at ``where``."""
        self.origins.extend([self.current] * (len(self.events) - len(self.origins)))
        self.current = where

    def origin(self, index: int) -> Where:
        """Where event ``index`` came from (the record a parser was reading when it appended it)."""
        return self.origins[index] if index < len(self.origins) else self.current


FORMATS = ("claude-code", "openai-chat", "tau-bench", "openhands", "mini-swe-agent", "swe-agent")


def openai_usage(raw: Any, where: Where = ()) -> Usage | None:
    """Usage from an OpenAI-style ``usage`` object (prompt/completion tokens, cached and reasoning)."""
    if not isinstance(raw, dict) or "prompt_tokens" not in raw:
        return None
    prompt = count(raw.get("prompt_tokens"), where, "usage.prompt_tokens")
    cached = count(
        obj(raw.get("prompt_tokens_details"), where, "usage.prompt_tokens_details").get("cached_tokens"),
        where,
        "usage.prompt_tokens_details.cached_tokens",
    )
    reasoning = count(
        obj(raw.get("completion_tokens_details"), where, "usage.completion_tokens_details").get(
            "reasoning_tokens"
        ),
        where,
        "usage.completion_tokens_details.reasoning_tokens",
    )
    return Usage(
        input_tokens=max(prompt - cached, 0),
        cache_read_tokens=cached,
        output_tokens=count(raw.get("completion_tokens"), where, "usage.completion_tokens"),
        reasoning_tokens=reasoning,
    )


def _arguments(raw: Any, where: Where = ()) -> tuple[dict[str, Any], bool]:
    """Tool-call arguments as a dict; (value, ok). Arguments that are not a JSON object are kept raw.

    Arguments recorded as a JSON string are parsed as strictly as the file: a NaN or a lone
    surrogate inside them is refused, never stored as ``null`` or as text that is not UTF-8.
    """
    if isinstance(raw, dict):
        return raw, True
    if isinstance(raw, str):
        try:
            value = loads(raw) if raw.strip() else {}
        except (ValueError, RecursionError):
            return {"raw_arguments": raw}, False
        bad = first_bad_value(value)
        if bad is not None:
            raise RecordShapeError(where, f"the tool call's arguments: {bad[1]}")
        if isinstance(value, dict):
            return value, True
        return {"raw_arguments": raw}, False
    return {"raw_arguments": json.dumps(raw)}, False


def _content_text(content: Any, skipped: Counter[str]) -> tuple[str, tuple[ImageRef, ...]]:
    """Text (and image references) of a message's content: a string or a list of parts."""
    if content is None:
        return "", ()
    if isinstance(content, str):
        return content, ()
    texts: list[str] = []
    images: list[ImageRef] = []
    for part in content if isinstance(content, list) else [content]:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, dict) and part.get("type") in ("text", "input_text"):
            texts.append(str(part.get("text", "")))
        elif isinstance(part, dict) and part.get("type") == "image_url":
            url = (
                (part.get("image_url") or {}).get("url", "")
                if isinstance(part.get("image_url"), dict)
                else str(part.get("image_url", ""))
            )
            if url and not url.startswith("data:"):
                images.append(ImageRef(ref=url))
            else:
                skipped["inline image bytes (the ledger keeps image references, not bytes)"] += 1
        else:
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            skipped[f"content part of type {kind!r}"] += 1
    return "\n".join(texts), tuple(images)


# ------------------------------------------------------------------ OpenAI chat messages (and tau-bench)


def parse_openai_messages(
    messages: list[Any],
    name: str,
    fmt: str = "openai-chat",
    where: Callable[[int], Where] | None = None,
    rec: Recording | None = None,
) -> Recording:
    """``where(i)`` says where message ``i`` is in the file (see ``farm.import_json``); by default
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
        text, _ = _content_text(msg.get("content"), rec.skipped)
        rec.events.append(SystemPrompt(text))
    elif role == "user":
        text, images = _content_text(msg.get("content"), rec.skipped)
        rec.events.append(UserText(text, images))
    elif role == "assistant":
        blocks: list[TextBlock | ThinkingBlock | ToolUseBlock] = []
        thinking = msg.get("reasoning_content") or msg.get("reasoning")
        if isinstance(thinking, str) and thinking:
            blocks.append(ThinkingBlock(thinking=thinking))
        text, _ = _content_text(msg.get("content"), rec.skipped)
        if text:
            blocks.append(TextBlock(text=text))
        for j, call in enumerate(array(msg.get("tool_calls"), where, "tool_calls")):
            call = obj(call, where, f"tool_calls[{j}]")
            fn = obj(call.get("function"), where, f"tool_calls[{j}].function")
            call_id = str(call.get("id") or f"call-{i}-{j}")
            args, ok = _arguments(fn.get("arguments"), where)
            if not ok:
                rec.skipped["tool arguments that are not a JSON object (kept as raw_arguments)"] += 1
            names[call_id] = str(fn.get("name", ""))
            blocks.append(ToolUseBlock(id=call_id, name=names[call_id], input=args))
        rec.events.append(
            ModelStep(blocks, model=str(msg.get("model", "")), usage=openai_usage(msg.get("usage"), where))
        )
    elif role == "tool":
        call_id = str(msg.get("tool_call_id", ""))
        text, _ = _content_text(msg.get("content"), rec.skipped)
        rec.events.append(ToolOutput(call_id, str(msg.get("name") or names.get(call_id, "")), text))
    else:
        rec.skipped[f"message with role {role!r}"] += 1


def parse_tau_bench(items: list[Any], name: str) -> list[Recording]:
    """``items`` is the file's top-level array: item ``k`` is at ``(k,)``, its messages at ``(k, "traj", i)``."""
    out = []
    for k, item in enumerate(items):
        with record_at((k,), f"tau-bench item #{k}"):
            item = obj(item, (k,), f"tau-bench item #{k}")
            task = obj(obj(item.get("info"), (k,), "info").get("task"), (k,), "info.task")
            rec = Recording(
                name=f"{name}-task{item.get('task_id')}-trial{item.get('trial')}", format="tau-bench"
            )
            rec.at((k,))
            rec.events.append(
                Note(
                    "import.run_info",
                    {
                        "task_id": item.get("task_id"),
                        "trial": item.get("trial"),
                        "reward": item.get("reward"),
                        "user_id": task.get("user_id"),
                        "instruction": task.get("instruction"),
                    },
                )
            )
            traj = array(item.get("traj"), (k,), "traj")
        parse_openai_messages(traj, rec.name, "tau-bench", nested((k, "traj")), rec)
        rec.source = {"index": k}
        out.append(rec)
    return out


# ------------------------------------------------------------------ Claude Code JSONL

_CONTROL_PREFIXES = (("<task-notification>", "task-notification"), ("[Request interrupted", "interrupt"))


def parse_claude_code(records: list[tuple[int, dict[str, Any]]], name: str) -> Recording:
    """``records`` are (line number, record); a record with the wrong shape is refused with its line."""
    check_claude_records(records)
    rec = Recording(name=name, format="claude-code")
    try:
        return _read_claude_code(records, rec)
    except RecordShapeError as exc:
        if exc.where:
            raise
        raise RecordShapeError(rec.current, exc.message) from exc
    except SHAPE_ERRORS as exc:
        raise RecordShapeError(
            rec.current,
            f"a Claude Code record does not have the expected shape ({type(exc).__name__}: {exc})",
        ) from exc


def check_claude_records(records: list[tuple[int, dict[str, Any]]]) -> None:
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


def _read_claude_code(records: list[tuple[int, dict[str, Any]]], rec: Recording) -> Recording:
    by_uuid = {r["uuid"]: r for _, r in records if isinstance(r.get("uuid"), str)}
    messages = [(n, r) for n, r in records if r.get("type") in ("user", "assistant")]
    main = _main_branch(records, by_uuid)
    main_msg_ids = {
        r["message"].get("id") for _, r in messages if r["type"] == "assistant" and r["uuid"] in main
    }
    included: set[str] = set()
    call_ids: set[str] = set()
    for _, r in messages:
        if r["uuid"] in main or (r["type"] == "assistant" and r["message"].get("id") in main_msg_ids):
            included.add(r["uuid"])
            if r["type"] == "assistant":
                call_ids |= {str(b.get("id")) for b in _blocks(r) if b.get("type") == "tool_use"}
    for _, r in messages:
        if r["uuid"] not in included and r["type"] == "user":
            blocks = _blocks(r)
            if blocks and all(
                b.get("type") == "tool_result" and b.get("tool_use_id") in call_ids for b in blocks
            ):
                included.add(r["uuid"])

    steps: dict[str, ModelStep] = {}
    tool_names: dict[str, str] = {}
    pending_compaction: CompactionMark | None = None
    for n, r in records:
        rec.at((n,))
        kind = r.get("type")
        if kind == "system":
            if r.get("subtype") == "compact_boundary":
                pending_compaction = CompactionMark("", dict(r.get("compactMetadata") or {}))
            else:
                rec.skipped[f"system record {r.get('subtype')!r} (UI/telemetry, not sent to the model)"] += 1
            continue
        if kind not in ("user", "assistant"):
            rec.skipped[f"{kind} record (UI/telemetry, not sent to the model)"] += 1
            continue
        if r["uuid"] not in included:
            rec.skipped["message off the conversation's main branch"] += 1
            continue
        msg = r.get("message") or {}
        if kind == "assistant":
            mid = str(msg.get("id") or r["uuid"])
            step = steps.get(mid)
            if step is None:
                step = steps[mid] = ModelStep([], model=str(msg.get("model", "")), provider="anthropic")
                rec.events.append(step)
            for b in _blocks(r):
                block = _claude_block(b, rec.skipped)
                if block is not None:
                    step.blocks.append(block)
                    if isinstance(block, ToolUseBlock):
                        tool_names[block.id] = block.name
            if msg.get("stop_reason"):
                step.stop_reason = str(msg["stop_reason"])
            usage = _anthropic_usage(msg.get("usage"))
            if usage is not None:  # one record per block: the last record of a response has its full usage
                step.usage = usage
            continue
        content = msg.get("content")
        if r.get("isCompactSummary"):
            text, _ = _content_text(content, rec.skipped)
            mark = pending_compaction or CompactionMark("", {})
            mark.summary = text
            rec.events.append(mark)
            pending_compaction = None
            continue
        blocks = _blocks(r) if isinstance(content, list) else []
        results = [b for b in blocks if b.get("type") == "tool_result"]
        for b in results:
            call_id = str(b.get("tool_use_id", ""))
            text = _tool_result_text(b.get("content"), rec.skipped)
            rec.events.append(ToolOutput(call_id, tool_names.get(call_id, ""), text, bool(b.get("is_error"))))
        rest = [b for b in blocks if b.get("type") != "tool_result"]
        if results and not rest:
            continue
        text, images = _content_text(content if isinstance(content, str) else rest, rec.skipped)
        if r.get("isMeta"):
            rec.events.append(ControlText("meta", text))
            continue
        tag = next((t for prefix, t in _CONTROL_PREFIXES if text.lstrip().startswith(prefix)), None)
        rec.events.append(ControlText(tag, text) if tag else UserText(text, images))
    if pending_compaction is not None:
        rec.events.append(pending_compaction)
    return rec


def _main_branch(records: list[tuple[int, dict[str, Any]]], by_uuid: dict[str, dict[str, Any]]) -> set[str]:
    """uuids on the path from the last record to the root, crossing compact boundaries."""
    last = next((r for _, r in reversed(records) if isinstance(r.get("uuid"), str)), None)
    seen: set[str] = set()
    cur = last
    while cur is not None and cur["uuid"] not in seen:
        seen.add(cur["uuid"])
        parent = cur.get("parentUuid") or cur.get("logicalParentUuid")
        cur = by_uuid.get(parent) if isinstance(parent, str) else None
    return seen


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


# ------------------------------------------------------------------ OpenHands


def parse_openhands(lines: list[tuple[int, dict[str, Any]]], name: str) -> list[Recording]:
    """One session per JSONL line; an event with the wrong shape is refused with its line."""
    out = []
    for lineno, item in lines:
        where: Where = (lineno,)
        with record_at(where, "an OpenHands run"):
            rec = Recording(
                name=f"{name}-{item.get('instance_id', lineno)}", format="openhands", source={"line": lineno}
            )
            rec.at(where)
            config = obj(obj(item.get("metadata"), where, "metadata").get("llm_config"), where, "llm_config")
            model = str(config.get("model", ""))
            steps: dict[str, ModelStep] = {}
            for i, ev in enumerate(array(item.get("history"), where, "history")):
                with record_at(where, f"history event #{i}"):
                    _openhands_event(obj(ev, where, f"history event #{i}"), rec, steps, model, where)
            metrics = obj(item.get("metrics"), where, "metrics")
            rec.events.append(
                Note(
                    "import.run_info",
                    {
                        "instance_id": item.get("instance_id"),
                        "error": item.get("error"),
                        "accumulated_cost": metrics.get("accumulated_cost"),
                        "accumulated_token_usage": metrics.get("accumulated_token_usage"),
                    },
                )
            )
        out.append(rec)
    return out


def _openhands_event(
    ev: dict[str, Any], rec: Recording, steps: dict[str, ModelStep], model: str, where: Where
) -> None:
    meta = obj(ev.get("tool_call_metadata"), where, "tool_call_metadata")
    args = obj(ev.get("args"), where, "args")
    action, observation, source = ev.get("action"), ev.get("observation"), ev.get("source")
    if action == "system":
        rec.events.append(SystemPrompt(str(args.get("content", ""))))
    elif action == "message" and source == "user":
        rec.events.append(UserText(str(args.get("content", ""))))
    elif action == "recall" or observation == "recall":
        detail = {
            "message": ev.get("message"),
            "args" if action else "extras": args if action else ev.get("extras"),
        }
        rec.events.append(Note("import.openhands_recall", detail))
    elif action and meta:
        response = obj(meta.get("model_response"), where, "model_response")
        rid = str(response.get("id") or ev.get("id"))
        choices = array(response.get("choices"), where, "model_response.choices") or [{}]
        message = obj(obj(choices[0], where, "choices[0]").get("message"), where, "choices[0].message")
        step = steps.get(rid)
        if step is None:
            text = message.get("content") or ""
            step = steps[rid] = ModelStep(
                [TextBlock(text=str(text))] if text else [],
                model=str(response.get("model") or model),
                provider="openrouter",
                usage=openai_usage(response.get("usage"), where),
            )
            rec.events.append(step)
        call_id = str(meta.get("tool_call_id"))
        calls = [obj(c, where, "a tool call") for c in array(message.get("tool_calls"), where, "tool_calls")]
        raw = next(
            (
                obj(c.get("function"), where, "a tool call's function").get("arguments")
                for c in calls
                if c.get("id") == call_id
            ),
            None,
        )
        inp, ok = (
            _arguments(raw, where)
            if raw is not None
            else ({k: v for k, v in args.items() if k != "thought"}, True)
        )
        if not ok:
            rec.skipped["tool arguments that are not a JSON object (kept as raw_arguments)"] += 1
        step.blocks.append(ToolUseBlock(id=call_id, name=str(meta.get("function_name", action)), input=inp))
    elif observation and meta:
        md = obj(obj(ev.get("extras"), where, "extras").get("metadata"), where, "extras.metadata")
        body = (
            f"{md.get('prefix') or ''}{ev.get('content', '')}{md.get('suffix') or ''}"
            if observation == "run"
            else str(ev.get("content", ""))
        )
        rec.events.append(
            ToolOutput(
                str(meta.get("tool_call_id")),
                str(meta.get("function_name", observation)),
                body,
                observation == "error",
            )
        )
    elif observation == "error":  # a call the agent could not parse: the model saw the error as a message
        rec.events.append(ControlText("tool-error", str(ev.get("content", ""))))
    elif action == "message" and source == "agent":
        rec.events.append(ModelStep([TextBlock(text=str(args.get("content", "")))], model=model))
    else:
        rec.skipped[f"openhands event {action or observation!r} from {source!r}"] += 1


# ------------------------------------------------------------------ mini-swe-agent and SWE-agent

_BASH_BLOCK = re.compile(r"```bash\s*\n(.*?)\n```", re.DOTALL)


def parse_mini_swe(data: dict[str, Any], name: str) -> Recording:
    """Message ``i`` is at ``("messages", i)`` in the file."""
    rec = Recording(name=name, format="mini-swe-agent")
    open_call: ToolUseBlock | None = None
    seen_task = False
    for i, msg in enumerate(array(data.get("messages"), ("messages",), "messages")):
        where: Where = ("messages", i)
        rec.at(where)
        with record_at(where, f"message #{i}"):
            msg = obj(msg, where, f"message #{i}")
            role, content = msg.get("role"), msg.get("content")
            text, _ = _content_text(content, rec.skipped)
            if role == "system":
                rec.events.append(SystemPrompt(text))
            elif role == "assistant":
                extra = obj(msg.get("extra"), where, "extra")
                response = obj(extra.get("response"), where, "extra.response")
                choices = array(response.get("choices"), where, "response.choices") or [{}]
                message = obj(
                    obj(choices[0], where, "choices[0]").get("message"), where, "choices[0].message"
                )
                blocks: list[TextBlock | ThinkingBlock | ToolUseBlock] = []
                if message.get("reasoning"):
                    blocks.append(ThinkingBlock(thinking=str(message["reasoning"])))
                blocks.append(TextBlock(text=text))
                actions = _BASH_BLOCK.findall(text)
                open_call = None
                if len(actions) == 1:  # mini-swe-agent runs a response only when it has exactly one action
                    open_call = ToolUseBlock(id=f"mini-{i}", name="bash", input={"command": actions[0]})
                    blocks.append(open_call)
                rec.events.append(
                    ModelStep(
                        blocks,
                        model=str(response.get("model", "")),
                        provider=str(response.get("provider", "")),
                        usage=openai_usage(response.get("usage"), where),
                    )
                )
            elif role == "user" and not seen_task:
                seen_task = True
                rec.events.append(UserText(text))
            elif role == "user" and open_call is not None:
                rec.events.append(ToolOutput(open_call.id, "bash", text))
                open_call = None
            elif role == "user":
                rec.events.append(ControlText("format-error", text))
            else:
                rec.skipped[f"message with role {role!r}"] += 1
    rec.at(())
    info = obj(data.get("info"), ("info",), "info")
    rec.events.append(
        Note(
            "import.run_info",
            {
                "instance_id": data.get("instance_id"),
                "exit_status": info.get("exit_status"),
                "model_stats": info.get("model_stats"),
                "mini_version": info.get("mini_version"),
            },
        )
    )
    return rec


def parse_swe_agent(data: dict[str, Any], name: str) -> Recording:
    """History message ``i`` is at ``("history", i)`` in the file, trajectory step ``j`` at ``("trajectory", j)``."""
    rec = Recording(name=name, format="swe-agent")
    trajectory = array(data.get("trajectory"), ("trajectory",), "trajectory")
    info = obj(data.get("info"), ("info",), "info")
    model = str(obj(info.get("model_stats"), ("info",), "info.model_stats").get("model", ""))
    open_call: ToolUseBlock | None = None
    seen_task = False
    n_steps = 0
    for i, msg in enumerate(array(data.get("history"), ("history",), "history")):
        where: Where = ("history", i)
        rec.at(where)
        with record_at(where, f"history message #{i}"):
            msg = obj(msg, where, f"history message #{i}")
            role = msg.get("role")
            text, _ = _content_text(msg.get("content"), rec.skipped)
            if role == "system":
                rec.events.append(SystemPrompt(text))
            elif role == "user" and msg.get("is_demo"):
                rec.events.append(ControlText("demonstration", text))
            elif role == "user" and not seen_task:
                seen_task = True
                rec.events.append(UserText(text))
            elif role == "assistant":
                blocks: list[TextBlock | ThinkingBlock | ToolUseBlock] = [TextBlock(text=text)]
                action = str(msg.get("action") or "").rstrip("\n")
                open_call = None
                if action.strip():
                    open_call = ToolUseBlock(id=f"swe-{i}", name=action.split()[0], input={"command": action})
                    blocks.append(open_call)
                rec.events.append(ModelStep(blocks, model=model))
                n_steps += 1
            elif role == "user" and open_call is not None:
                rec.events.append(ToolOutput(open_call.id, open_call.name, text))
                open_call = None
            elif role == "user":
                rec.events.append(ControlText("observation", text))
            else:
                rec.skipped[f"message with role {role!r}"] += 1
    if open_call is not None and len(trajectory) >= n_steps > 0:
        # The run ended on this action: the model never saw its output, but the tool returned it.
        where = ("trajectory", n_steps - 1)
        rec.at(where)
        step = obj(trajectory[n_steps - 1], where, f"trajectory step #{n_steps - 1}")
        rec.events.append(ToolOutput(open_call.id, open_call.name, str(step.get("observation", ""))))
    rec.at(())
    rec.events.append(
        Note(
            "import.run_info",
            {
                "exit_status": info.get("exit_status"),
                "model_stats": info.get("model_stats"),
                "environment": data.get("environment"),
            },
        )
    )
    return rec
