"""Per-session state folded from the ledger, kept current incrementally (the Evidence and Planner actors).

The first call for a session builds the state from the chain between the session's root and its
head; each later call folds in only the entries appended since. When those do not continue the
chain the state was built from (the session branched: the fold raises ``InvalidInput``), it is
rebuilt from the new head.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from vak_context.actors.ledger.client import LedgerClient
from vak_context.context.planner.view import SessionView
from vak_context.errors import InvalidInput
from vak_context.events.envelope import StoredEntry

S = TypeVar("S")
WRITTEN_KEPT = 64  # payloads noted by ``wrote`` and not folded yet, at most (the oldest go first)
NEW_KEPT = 4096  # entries kept for ``take_new`` per session, at most (past it the follower reads for itself)


class FoldedSessions(Generic[S]):
    """``build`` makes a session's state from its chain; ``fold`` adds newer entries to it, in place."""

    def __init__(self, ledger: LedgerClient, build: Callable[[Sequence[StoredEntry]], S],
                 fold: Callable[[S, Sequence[StoredEntry]], None], lock: threading.RLock | None = None) -> None:
        self.ledger = ledger
        self._build, self._fold = build, fold
        self._lock = lock if lock is not None else threading.RLock()
        self._states: dict[str, tuple[S, int]] = {}  # session -> (state, entries folded in)
        # Payloads this actor appended itself, by entry id (ids are content hashes): folded from the model
        # they were written from rather than decoded again (a plan entry at 1,000 turns is ~275 KB of JSON).
        self._written: dict[str, Any] = {}
        # With ``keep_new``: the entries read since ``take_new`` last took them, per session (None: not known,
        # after a rebuild), so a follower of this state (the PlannerActor, following the AssemblerActor) is
        # handed them instead of reading the ledger again.
        self._new: dict[str, list[StoredEntry] | None] | None = None

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
            self._note_new(session, new)
            return state

    def _note_new(self, session: str, new: Sequence[StoredEntry]) -> None:
        """Keep ``new`` (folded in just now) for ``take_new``, where ``keep_new`` asked for it."""
        if self._new is not None and new:
            kept = self._new.get(session, [])
            self._new[session] = kept + list(new) if kept is not None and len(kept) + len(new) <= NEW_KEPT else None

    def seen(self, session: str) -> int | None:
        """How many of the session's entries its state has folded in (the next ``feed`` starts there), None
        for a session not built yet."""
        with self._lock:
            cached = self._states.get(session)
            return cached[1] if cached is not None else None

    def keep_new(self) -> None:
        """Keep what each read brings in for ``take_new``."""
        self._new = {}

    def take_new(self, session: str) -> list[StoredEntry] | None:
        """The entries read for ``session`` since the last call (None where they are not all known: the
        state was rebuilt from its chain, or too many came in); none kept unless ``keep_new`` was called."""
        with self._lock:
            if self._new is None:
                return None
            return self._new.pop(session, [])

    def feed(self, session: str, entries: Sequence[StoredEntry]) -> S:
        """The session's state, brought up to date from ``entries`` (the session's entries from some
        sequence number on, as another reader read them) where they continue what it holds; else (a gap,
        a state not built yet) read as ``get`` reads."""
        with self._lock:
            cached = self._states.get(session)
            if cached is None:
                return self.get(session)
            state, seen = cached
            fresh = [e for e in entries if e.seq >= seen]
            if fresh and fresh[0].seq != seen:  # entries this reader never saw: read them
                return self.get(session)
            try:
                self._fold(state, fresh)
            except InvalidInput:  # the chain branched: start over from the head
                return self._rebuild(session)
            self._states[session] = (state, seen + len(fresh))
            self._note_new(session, fresh)
            return state

    def forget(self, session: str) -> None:
        """Drop the session's state (it may hold entries that were never written): the next look reads."""
        with self._lock:
            self._states.pop(session, None)
            if self._new is not None:
                self._new[session] = None

    def wrote(self, entry_id: str, payload: Any) -> None:
        """``payload`` was appended as ``entry_id`` by this actor: the fold that meets it takes it from here."""
        with self._lock:
            self._written[entry_id] = payload
            while len(self._written) > WRITTEN_KEPT:  # a session that is not read again: decoded if it is
                del self._written[next(iter(self._written))]

    def written(self, entry_id: str) -> Any:
        """The payload ``wrote`` noted for ``entry_id`` (taken: an entry is folded once), else None."""
        with self._lock:
            return self._written.pop(entry_id, None)

    def _rebuild(self, session: str) -> S:
        head = self.ledger.head(session)
        chain = self.ledger.chain_to_root(head) if head else []
        self._written.clear()  # the build decodes every entry of the chain
        if self._new is not None:
            self._new[session] = None  # a follower reads for itself
        state = self._build(chain)
        self._states[session] = (state, chain[-1].seq + 1 if chain else 0)
        return state


def fold_unseen(view: SessionView, entries: Sequence[StoredEntry],
                known: Callable[[str], Any] | None = None) -> None:
    """Fold in what was appended since the last look, past what the view already holds: the packets,
    resets and plans an actor wrote are folded in as it writes them (the plan after them reads them).
    ``known``: an entry's payload where the actor holds it already (``FoldedSessions.written``), else None."""
    index = view.index
    for e in entries:
        if index.turn_of(e.id) is None and e.id not in index.preamble:
            view.add(e, known(e.id) if known is not None else None)
