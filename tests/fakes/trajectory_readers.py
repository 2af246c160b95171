"""Readers that pull every tool result out of a recorded session, in each file's own format, as the model saw it.

One reader per format of ``../shared/data/trajectories`` (see the README there); ``READERS`` maps each
recorded file to its reader. The shape tests and ``bench/evidence.py`` read the same results.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Result:
    source: str  # file and position, for failure messages
    tool: str
    body: str
    is_error: bool = False
    tool_input: dict[str, Any] = field(default_factory=dict)


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content or [] if part.get("type") == "text")


def claude_code(path: Path) -> Iterator[Result]:
    """Claude Code JSONL: tool_use blocks in assistant records, tool_result blocks in user records."""
    calls: dict[str, tuple[str, dict[str, Any]]] = {}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        record = json.loads(line)
        message = record.get("message") or {}
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for block in content:
            if block.get("type") == "tool_use":
                calls[block["id"]] = (block["name"], block.get("input") or {})
            elif block.get("type") == "tool_result" and record.get("type") == "user":
                name, args = calls.get(block["tool_use_id"], ("", {}))
                yield Result(
                    f"{path.name}:{n}",
                    name,
                    _text_of(block.get("content")),
                    bool(block.get("is_error")),
                    args,
                )


def tau_bench(path: Path) -> Iterator[Result]:
    """tau-bench: OpenAI chat messages; role "tool" messages answer assistant tool_calls."""
    for s, session in enumerate(json.loads(path.read_text(encoding="utf-8"))):
        calls: dict[str, dict[str, Any]] = {}
        for m, message in enumerate(session["traj"]):
            for call in message.get("tool_calls") or []:
                calls[call["id"]] = json.loads(call["function"]["arguments"] or "{}")
            if message["role"] == "tool":
                args = calls.get(message["tool_call_id"], {})
                yield Result(f"{path.name}[{s}].traj[{m}]", message["name"], message["content"], False, args)


def openhands(path: Path) -> Iterator[Result]:
    """OpenHands event streams: observations answer actions (``cause``); the agent saw prefix+content+suffix."""
    for s, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
        events = json.loads(line)["history"]
        actions = {e["id"]: e for e in events if "action" in e}
        last_action: dict[str, Any] = {}
        for e in events:
            if "action" in e:
                last_action = e
            if "observation" not in e or e["observation"] == "recall":
                continue
            # an error observation (a call the runtime rejected) names no cause: it answers the last action
            action = actions.get(e["cause"], {}) if e.get("cause") is not None else last_action
            tool = (e.get("tool_call_metadata") or {}).get("function_name") or action.get("action", "")
            meta = (e.get("extras") or {}).get("metadata") or {}
            body = f"{meta.get('prefix', '')}{e['content']}{meta.get('suffix', '')}"
            yield Result(
                f"{path.name}[{s}]#{e['id']}",
                tool,
                body,
                e["observation"] == "error",
                action.get("args") or {},
            )


_BASH_BLOCK = re.compile(r"```bash\n(.*?)```", re.DOTALL)


def mini_swe_agent(path: Path) -> Iterator[Result]:
    """mini-swe-agent: one ```bash block an assistant message; the next user message is the observation."""
    messages = json.loads(path.read_text(encoding="utf-8"))["messages"]
    for i in range(2, len(messages)):
        previous, message = messages[i - 1], messages[i]
        if message["role"] != "user" or previous["role"] != "assistant":
            continue
        blocks = _BASH_BLOCK.findall(previous["content"])
        format_error = len(blocks) != 1  # the harness answered with a format error, not a command's output
        args = {"command": blocks[0]} if blocks else {}
        yield Result(f"{path.name}#{i}", "bash", message["content"], format_error, args)


def swe_agent(path: Path) -> Iterator[Result]:
    """SWE-agent: assistant ``action`` text commands; the following user message is the observation."""
    history = json.loads(path.read_text(encoding="utf-8"))["history"]
    for i in range(1, len(history)):
        previous, message = history[i - 1], history[i]
        if message["role"] == "user" and previous["role"] == "assistant" and not message.get("is_demo"):
            yield Result(
                f"{path.name}#{i}", "bash", message["content"], False, {"command": previous.get("action", "")}
            )


READERS = {
    "spotter__fa812bfe-b295-4cca-9c2f-fdf01028cb46.jsonl": claude_code,
    "spotter__subagent.jsonl": claude_code,
    "tau-bench__gpt-4o-airline.json": tau_bench,
    "OpenHands__output.jsonl": openhands,
    "mini-swe-agent__django__django-15629.traj.json": mini_swe_agent,
    "SWE-agent__pydicom__pydicom-1458.traj": swe_agent,
}
