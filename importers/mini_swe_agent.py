"""``mini-swe-agent``: a ``.traj.json`` whose actions are fenced ```bash blocks in the model's text.

The first user message is the task; a user message after a response with one action is that
action's output; any other is the agent telling the model its format was wrong (the walk over the
messages is ``vak_context.importers.chat_walk``, shared with ``swe-agent``).
"""

from __future__ import annotations

import re
from typing import Any

from vak_context.events.payloads import TextBlock, ThinkingBlock, ToolUseBlock
from vak_context.importers.base import Document, ImportFormat
from vak_context.importers.chat_walk import walk_chat
from vak_context.importers.parts import openai_usage
from vak_context.importers.recording import ModelStep, Note, Recording
from vak_context.importers.strict_json import Where, array, obj

NAME = "mini-swe-agent"

_BASH_BLOCK = re.compile(r"```bash\s*\n(.*?)\n```", re.DOTALL)


def sniff(doc: Document) -> bool:
    """One JSON object whose ``trajectory_format`` starts with ``mini-swe-agent``."""
    whole = doc.object
    return whole is not None and str(whole.get("trajectory_format", "")).startswith("mini-swe-agent")


def parse(doc: Document) -> list[Recording]:
    return [parse_mini_swe(doc.data, doc.stem)]


def parse_mini_swe(data: dict[str, Any], name: str) -> Recording:
    """Message ``i`` is at ``("messages", i)`` in the file."""
    rec = Recording(name=name, format=NAME)
    walk_chat(rec, data.get("messages"), "messages", "message", _step, other_user="format-error")
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


def _step(i: int, msg: dict[str, Any], text: str, where: Where) -> ModelStep:
    """An assistant message: its reasoning and text, and a bash call when the text has exactly one
    action (mini-swe-agent runs a response only then)."""
    extra = obj(msg.get("extra"), where, "extra")
    response = obj(extra.get("response"), where, "extra.response")
    choices = array(response.get("choices"), where, "response.choices") or [{}]
    message = obj(obj(choices[0], where, "choices[0]").get("message"), where, "choices[0].message")
    blocks: list[TextBlock | ThinkingBlock | ToolUseBlock] = []
    if message.get("reasoning"):
        blocks.append(ThinkingBlock(thinking=str(message["reasoning"])))
    blocks.append(TextBlock(text=text))
    actions = _BASH_BLOCK.findall(text)
    if len(actions) == 1:
        blocks.append(ToolUseBlock(id=f"mini-{i}", name="bash", input={"command": actions[0]}))
    return ModelStep(
        blocks,
        model=str(response.get("model", "")),
        provider=str(response.get("provider", "")),
        usage=openai_usage(response.get("usage"), where),
    )


FORMAT = ImportFormat(NAME, sniff, parse)
