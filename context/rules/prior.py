"""What the turn rules keep of a session's earlier turns (``vak_context.context.rules.drift``): each turn's
directive, narration and figure, and the list of them with their narrations indexed. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, SupportsIndex

from vak_context.context.rules.freshness import RecordedFigure

__all__ = ["PriorTurn", "PriorTurns"]


@dataclass(frozen=True)
class PriorTurn:
    """What the rules need of an earlier turn: its directive, its TurnCard narration, its figure."""

    directive: str
    narration: str = ""
    figure: RecordedFigure | None = None


class PriorTurns(list[PriorTurn]):
    """The earlier turns, oldest first, with the ones of each narration found by a lookup: every reply is
    checked against the turns that said the same words (``after_reply``), a scan of every turn a step. The
    index follows appends; any other change to the list drops it (built again at the next lookup)."""

    _index: dict[str, list[PriorTurn]] | None = None
    _seen = 0  # how many turns, from the first, the index holds

    def narrated(self, narration: str) -> list[PriorTurn]:
        """The turns whose narration is ``narration``, oldest first."""
        if self._index is None or self._seen > len(self):
            self._index, self._seen = {}, 0
        for p in self[self._seen:]:
            self._index.setdefault(p.narration, []).append(p)
        self._seen = len(self)
        return self._index.get(narration, [])

    def _changed(self) -> None:
        self._index = None

    def __setitem__(self, key: Any, value: Any) -> None:
        self._changed()
        super().__setitem__(key, value)

    def __delitem__(self, key: Any) -> None:
        self._changed()
        super().__delitem__(key)

    def insert(self, i: SupportsIndex, value: PriorTurn) -> None:
        self._changed()
        super().insert(i, value)

    def remove(self, value: PriorTurn) -> None:
        self._changed()
        super().remove(value)

    def pop(self, i: SupportsIndex = -1) -> PriorTurn:
        self._changed()
        return super().pop(i)

    def clear(self) -> None:
        self._changed()
        super().clear()

    def sort(self, *args: Any, **kwargs: Any) -> None:
        self._changed()
        super().sort(*args, **kwargs)

    def reverse(self) -> None:
        self._changed()
        super().reverse()

    def __imul__(self, n: SupportsIndex) -> PriorTurns:
        self._changed()
        return super().__imul__(n)
