"""Copying ledger entries into another chain: the farm materialises and forks its sessions with it, and
``vak serve`` forks a session whose client history changes a message it holds.

An entry's id hashes its parent, so a copy gets new ids, and every payload that names an earlier entry (a
tool result its evidence body, a packet its turns, a card or a window the ids it shows, in full or by their
first 12 digits) must name the copy instead: ``IdRemap`` rewrites them as the copies are appended.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from vak_context.context.history.render import SHORT_ID as SHORT
from vak_context.events.envelope import StoredEntry

_FULL_ID = re.compile(r"(?<![0-9a-f])[0-9a-f]{64}(?![0-9a-f])")
_SHORT_ID = re.compile(r"(?<![0-9a-f])[0-9a-f]{12}(?![0-9a-f])")

__all__ = ["IdRemap", "copy_entries"]


class IdRemap:
    """The ids of the entries copied so far, old to new (full and short), and the payloads rewritten to
    name the copies."""

    def __init__(self) -> None:
        self.full: dict[str, str] = {}
        self.short: dict[str, str] = {}

    def learn(self, old: str, new: str) -> None:
        self.full[old] = new
        self.short[old[:SHORT]] = new[:SHORT]

    def _text(self, text: str) -> str:
        text = _FULL_ID.sub(lambda m: self.full.get(m.group(0), m.group(0)), text)
        return _SHORT_ID.sub(lambda m: self.short.get(m.group(0), m.group(0)), text)

    def _walk(self, value: Any) -> Any:
        if isinstance(value, str):
            return self._text(value)
        if isinstance(value, list):
            return [self._walk(v) for v in value]
        if isinstance(value, dict):
            return {self._text(k): self._walk(v) for k, v in value.items()}
        return value

    def payload(self, payload: BaseModel) -> BaseModel:
        if not self.full:
            return payload
        return type(payload).model_validate(self._walk(payload.model_dump(mode="json")))


def copy_entries(entries: list[StoredEntry], decode: Callable[[StoredEntry], Any], session: str,
                 append: Callable[[str, Any, bytes | None], str], remap: IdRemap | None = None) -> IdRemap:
    """Append copies of ``entries`` one by one (a copy may name the one before it), ids remapped."""
    remap = remap or IdRemap()
    for e in entries:
        remap.learn(e.id, append(session, remap.payload(decode(e)), e.blob))
    return remap
