"""One small valid recording per format the importer reads, each with one tool call answered.

``Sample`` names the path of its tool result's text and of a number in its tool input, so a test can
break the recording in one place; the malformed-import and format-registry tests share them.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Path_ = tuple[int | str, ...]

CHAT: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a travel agent."},
    {"role": "user", "content": "Weather in Lisbon?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_a",
                "type": "function",
                "function": {"name": "weather", "arguments": '{"city": "Lisbon"}'},
            }
        ],
        "usage": {"prompt_tokens": 20, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 4}},
    },
    {"role": "tool", "tool_call_id": "call_a", "name": "weather", "content": "21 C and sunny"},
    {"role": "assistant", "content": "It is 21 C in Lisbon."},
]

CLAUDE: list[dict[str, Any]] = [
    {
        "type": "user",
        "uuid": "u1",
        "parentUuid": None,
        "sessionId": "s1",
        "message": {"role": "user", "content": "List the files"},
    },
    {
        "type": "assistant",
        "uuid": "a1",
        "parentUuid": "u1",
        "sessionId": "s1",
        "message": {
            "id": "m1",
            "model": "claude-x",
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls", "timeout": 5}}
            ],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 2},
        },
    },
    {
        "type": "user",
        "uuid": "u2",
        "parentUuid": "a1",
        "sessionId": "s1",
        "message": {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a.txt\nb.txt"}],
        },
    },
    {
        "type": "assistant",
        "uuid": "a2",
        "parentUuid": "u2",
        "sessionId": "s1",
        "message": {
            "id": "m2",
            "role": "assistant",
            "content": [{"type": "text", "text": "Two files."}],
            "stop_reason": "end_turn",
        },
    },
]

OPENHANDS: list[dict[str, Any]] = [
    {
        "instance_id": "repo-1",
        "metadata": {"llm_config": {"model": "m"}},
        "history": [
            {"id": 0, "action": "system", "source": "agent", "args": {"content": "You are OpenHands."}},
            {"id": 1, "action": "message", "source": "user", "args": {"content": "Fix the bug"}},
            {
                "id": 2,
                "action": "run",
                "source": "agent",
                "args": {"command": "ls", "thought": ""},
                "tool_call_metadata": {
                    "function_name": "execute_bash",
                    "tool_call_id": "tc1",
                    "model_response": {
                        "id": "r1",
                        "model": "m",
                        "choices": [
                            {
                                "message": {
                                    "content": "",
                                    "tool_calls": [
                                        {
                                            "id": "tc1",
                                            "function": {
                                                "name": "execute_bash",
                                                "arguments": {"command": "ls"},
                                            },
                                        }
                                    ],
                                }
                            }
                        ],
                        "usage": {"prompt_tokens": 10, "completion_tokens": 3},
                    },
                },
            },
            {
                "id": 3,
                "observation": "run",
                "source": "agent",
                "content": "a.txt",
                "extras": {
                    "metadata": {"prefix": "", "suffix": "\n[The command completed with exit code 0.]"}
                },
                "tool_call_metadata": {"function_name": "execute_bash", "tool_call_id": "tc1"},
            },
        ],
        "metrics": {"accumulated_cost": 0.1},
        "error": None,
    }
]

MINI: dict[str, Any] = {
    "trajectory_format": "mini-swe-agent-1",
    "instance_id": "repo-2",
    "info": {"exit_status": "Submitted", "model_stats": {"api_calls": 1}},
    "messages": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Solve the task"},
        {
            "role": "assistant",
            "content": "Let me look.\n```bash\nls\n```",
            "extra": {
                "response": {
                    "model": "m",
                    "choices": [{"message": {"reasoning": "think first"}}],
                    "usage": {"prompt_tokens": 5, "completion_tokens": 2},
                }
            },
        },
        {"role": "user", "content": "<returncode>0</returncode>\na.txt"},
    ],
}

SWE: dict[str, Any] = {
    "environment": "swe_main",
    "info": {"model_stats": {"model": "m"}, "exit_status": "submitted"},
    "history": [
        {"role": "system", "content": "You are SWE-agent."},
        {"role": "user", "content": "An issue to solve"},
        {"role": "assistant", "content": "Look around.", "action": "ls -a\n"},
        {"role": "user", "content": "a.txt"},
        {"role": "assistant", "content": "Done.", "action": "submit\n"},
    ],
    "trajectory": [{"observation": "a.txt"}, {"observation": "diff --git a b"}],
}

TAU: list[dict[str, Any]] = [
    {
        "task_id": 1,
        "trial": 0,
        "reward": 1.0,
        "info": {"task": {"user_id": "u1", "instruction": "Book a flight"}},
        "traj": copy.deepcopy(CHAT),
    }
]


@dataclass(frozen=True)
class Sample:
    """A valid recording, the path of its tool result's text, and of a number in its tool input."""

    fmt: str
    name: str
    doc: Any  # for JSON Lines: the list of lines
    result: Path_
    tool_input: Path_ | None  # None: the format's tool input is parsed from text, no JSON number in it

    @property
    def jsonl(self) -> bool:
        return self.name.endswith(".jsonl")


SAMPLES = [
    Sample("openai-chat", "chat.json", CHAT, (3, "content"), (2, "tool_calls", 0, "function", "arguments")),
    Sample("openai-chat", "chat.jsonl", CHAT, (3, "content"), (2, "tool_calls", 0, "function", "arguments")),
    Sample(
        "claude-code",
        "claude.jsonl",
        CLAUDE,
        (2, "message", "content", 0, "content"),
        (1, "message", "content", 0, "input", "timeout"),
    ),
    Sample(
        "openhands",
        "openhands.jsonl",
        OPENHANDS,
        (0, "history", 3, "content"),
        (
            0,
            "history",
            2,
            "tool_call_metadata",
            "model_response",
            "choices",
            0,
            "message",
            "tool_calls",
            0,
            "function",
            "arguments",
            "command",
        ),
    ),
    Sample("mini-swe-agent", "run.traj.json", MINI, ("messages", 3, "content"), None),
    Sample("swe-agent", "run.traj", SWE, ("history", 3, "content"), None),
    Sample(
        "tau-bench",
        "tau.json",
        TAU,
        (0, "traj", 3, "content"),
        (0, "traj", 2, "tool_calls", 0, "function", "arguments"),
    ),
]


RAW = "__raw__:"  # a string value written into the file as the raw JSON text after the prefix


def render(sample: Sample, doc: Any) -> str:
    """The file's text: ``json.dumps`` writes NaN and lone surrogates as ``NaN`` and ``\\ud800``."""

    def dump(value: Any) -> str:
        text = json.dumps(value, indent=None if sample.jsonl else 1)
        return re.sub(r'"__raw__:([^"]*)"', r"\1", text)

    return "".join(dump(line) + "\n" for line in doc) if sample.jsonl else dump(doc)


def write(folder: Path, sample: Sample, doc: Any) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / sample.name
    path.write_text(render(sample, doc), encoding="utf-8")
    return path


def get(doc: Any, path: Path_) -> Any:
    for step in path:
        doc = doc[step]
    return doc


def put(doc: Any, path: Path_, value: Any) -> Any:
    out = copy.deepcopy(doc)
    get(out, path[:-1])[path[-1]] = value
    return out
