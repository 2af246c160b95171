"""Per-session state folded from the ledger, kept current incrementally (the Evidence and Planner actors).

The first call for a session builds the state from the chain between the session's root and its
head; each later call folds in only the entries appended since. When those do not continue the
chain the state was built from (the session branched: the fold raises ``InvalidInput``), it is
rebuilt from the new head.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from vak_context.actors.ledger_client import LedgerClient
from vak_context.context.planner.view import SessionView
from vak_context.errors import InvalidInput
from vak_context.events.envelope import StoredEntry

S = TypeVar("S")


class FoldedSessions(Generic[S]):
    """``build`` makes a session's state from its chain; ``fold`` adds newer entries to it, in place."""

    def __init__(self, ledger: LedgerClient, build: Callable[[Sequence[StoredEntry]], S],
                 fold: Callable[[S, Sequence[StoredEntry]], None], lock: threading.RLock | None = None) -> None:
        self.ledger = ledger
        self._build, self._fold = build, fold
        self._lock = lock if lock is not None else threading.RLock()
        self._states: dict[str, tuple[S, int]] = {}  # session -> (state, entries folded in)

    def get(self, session: str) -> S:
        """The session's state, brought up to date with what was appended since last time."""
        with self._lock:
            cached = self._states.get(session)
            if cached is None:
                return self._rebuild(session)
            state, seen = cached
            new = self.ledger.entries(session, seen)
            try:
                self._fold(state, new)
            except InvalidInput:  # the chain branched: start over from the head
                return self._rebuild(session)
            self._states[session] = (state, seen + len(new))
            return state

    def _rebuild(self, session: str) -> S:
        head = self.ledger.head(session)
        chain = self.ledger.chain_to_root(head) if head else []
        state = self._build(chain)
        self._states[session] = (state, chain[-1].seq + 1 if chain else 0)
        return state


def fold_unseen(view: SessionView, entries: Sequence[StoredEntry]) -> None:
    """Fold in what was appended since the last look, past what the view already holds: the packets,
    resets and plans an actor wrote are folded in as it writes them (the plan after them reads them)."""
    index = view.index
    view.add_all(e for e in entries if index.turn_of(e.id) is None and e.id not in index.preamble)
