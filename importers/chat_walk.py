"""The chat-message walk the SWE-agent family of trajectories share (``mini-swe-agent``, ``swe-agent``).

Both record the conversation as role-tagged chat messages in which the first user message is the task,
an assistant message is a model step holding at most one call, and the user message after a step with a
call is that call's output; any other user message is the agent talking to the model (a format error,
an observation with no call before it). The formats differ only in how a step is read and what those
other user messages are called, which the caller passes in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vak_context.events.payloads import ToolUseBlock
from vak_context.importers.parts import content_text
from vak_context.importers.recording import (
    ControlText,
    ModelStep,
    Recording,
    SystemPrompt,
    ToolOutput,
    UserText,
)
from vak_context.importers.strict_json import Where, array, obj, record_at

# An assistant message as a step: (its index, the message, its text, where it is in the file).
StepReader = Callable[[int, dict[str, Any], str, Where], ModelStep]


@dataclass
class ChatWalk:
    """What the walk leaves for the caller: the call still waiting for its output, and the steps read."""

    open_call: ToolUseBlock | None = None
    steps: int = 0


def walk_chat(
    rec: Recording,
    messages: Any,
    key: str,
    what: str,
    read_step: StepReader,
    *,
    other_user: str,
    is_demo: Callable[[dict[str, Any]], bool] = lambda msg: False,
) -> ChatWalk:
    """Append the events of ``messages`` (the file's ``key`` array; message ``i`` is at ``(key, i)``) to
    ``rec``. ``what`` names a message in errors (``"message"`` -> ``message #3``); ``other_user`` tags a
    user message that is neither the task nor a call's output; ``is_demo`` picks the user messages that
    are demonstrations the agent showed (tagged ``demonstration``)."""
    walk = ChatWalk()
    seen_task = False
    for i, msg in enumerate(array(messages, (key,), key)):
        where: Where = (key, i)
        rec.at(where)
        with record_at(where, f"{what} #{i}"):
            msg = obj(msg, where, f"{what} #{i}")
            role = msg.get("role")
            text, _ = content_text(msg.get("content"), rec.skipped)
            if role == "system":
                rec.events.append(SystemPrompt(text))
            elif role == "assistant":
                step = read_step(i, msg, text, where)
                rec.events.append(step)
                walk.steps += 1
                walk.open_call = next((b for b in step.blocks if isinstance(b, ToolUseBlock)), None)
            elif role == "user" and is_demo(msg):
                rec.events.append(ControlText("demonstration", text))
            elif role == "user" and not seen_task:
                seen_task = True
                rec.events.append(UserText(text))
            elif role == "user" and walk.open_call is not None:
                rec.events.append(ToolOutput(walk.open_call.id, walk.open_call.name, text))
                walk.open_call = None
            elif role == "user":
                rec.events.append(ControlText(other_user, text))
            else:
                rec.skipped[f"message with role {role!r}"] += 1
    return walk
