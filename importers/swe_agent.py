"""``swe-agent``: a SWE-agent ``.traj`` with ``history`` chat messages and ``trajectory`` steps.

An assistant message's ``action`` is its tool call; the next user message is its output (the walk over
the messages is ``vak_context.importers.chat_walk``, shared with ``mini-swe-agent``). When the run ended on
an action, the model never saw its output, but the trajectory step recorded it.
"""

from __future__ import annotations

from typing import Any

from vak_context.events.payloads import TextBlock, ThinkingBlock, ToolUseBlock
from vak_context.importers.base import Document, ImportFormat
from vak_context.importers.chat_walk import walk_chat
from vak_context.importers.recording import ModelStep, Note, Recording, ToolOutput
from vak_context.importers.strict_json import Where, array, obj

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

    def read_step(i: int, msg: dict[str, Any], text: str, where: Where) -> ModelStep:
        blocks: list[TextBlock | ThinkingBlock | ToolUseBlock] = [TextBlock(text=text)]
        action = str(msg.get("action") or "").rstrip("\n")
        if action.strip():
            blocks.append(ToolUseBlock(id=f"swe-{i}", name=action.split()[0], input={"command": action}))
        return ModelStep(blocks, model=model)

    walk = walk_chat(rec, data.get("history"), "history", "history message", read_step,
                     other_user="observation", is_demo=lambda msg: bool(msg.get("is_demo")))
    open_call, n_steps = walk.open_call, walk.steps
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
