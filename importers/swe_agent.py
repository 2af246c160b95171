"""``swe-agent``: a SWE-agent ``.traj`` with ``history`` chat messages and ``trajectory`` steps.

An assistant message's ``action`` is its tool call; the next user message is its output. When the
run ended on an action, the model never saw its output, but the trajectory step recorded it.
"""

from __future__ import annotations

from typing import Any

from vak_context.events.payloads import TextBlock, ThinkingBlock, ToolUseBlock
from vak_context.importers.base import Document, ImportFormat
from vak_context.importers.parts import content_text
from vak_context.importers.recording import (
    ControlText,
    ModelStep,
    Note,
    Recording,
    SystemPrompt,
    ToolOutput,
    UserText,
)
from vak_context.importers.strict_json import Where, array, obj, record_at

NAME = "swe-agent"


def sniff(doc: Document) -> bool:
    """One JSON object with a ``history`` array and a ``trajectory`` array."""
    whole = doc.object
    return (
        whole is not None
        and isinstance(whole.get("history"), list)
        and isinstance(whole.get("trajectory"), list)
    )


def parse(doc: Document) -> list[Recording]:
    return [parse_swe_agent(doc.data, doc.stem)]


def parse_swe_agent(data: dict[str, Any], name: str) -> Recording:
    """History message ``i`` is at ``("history", i)`` in the file, trajectory step ``j`` at ``("trajectory", j)``."""
    rec = Recording(name=name, format=NAME)
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
            text, _ = content_text(msg.get("content"), rec.skipped)
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


FORMAT = ImportFormat(NAME, sniff, parse)
