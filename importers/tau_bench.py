"""``tau-bench``: a JSON array of ``{task_id, trial, reward, info, traj}`` sessions, one recording each;
``traj`` is OpenAI chat messages."""

from __future__ import annotations

from typing import Any

from vak_context.importers.base import Document, ImportFormat
from vak_context.importers.openai_chat import parse_openai_messages
from vak_context.importers.recording import Note, Recording
from vak_context.importers.strict_json import array, nested, obj, record_at

NAME = "tau-bench"


def sniff(doc: Document) -> bool:
    """A JSON array whose first item has a ``traj``."""
    item = doc.first_item
    return item is not None and "traj" in item


def parse(doc: Document) -> list[Recording]:
    return parse_tau_bench(doc.data, doc.stem)


def parse_tau_bench(items: list[Any], name: str) -> list[Recording]:
    """``items`` is the file's top-level array: item ``k`` is at ``(k,)``, its messages at ``(k, "traj", i)``."""
    out = []
    for k, item in enumerate(items):
        with record_at((k,), f"tau-bench item #{k}"):
            item = obj(item, (k,), f"tau-bench item #{k}")
            task = obj(obj(item.get("info"), (k,), "info").get("task"), (k,), "info.task")
            rec = Recording(name=f"{name}-task{item.get('task_id')}-trial{item.get('trial')}", format=NAME)
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
        parse_openai_messages(traj, rec.name, NAME, nested((k, "traj")), rec)
        rec.source = {"index": k}
        out.append(rec)
    return out


FORMAT = ImportFormat(NAME, sniff, parse)
