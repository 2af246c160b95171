"""``session_search``'s storage half: the session's whoosh index caught up lazily by whoever holds its writer lock.

Indexing stays off the append path: a store that does not index (``Engine.open``'s, the LedgerActor's)
appends exactly as before; the session's index (``storage/search.py``, ``sessions/<s>/_search/``) is caught
up in the background when a turn closes (``storage/catchup.py``), and opened at a search and caught up from
the ledger there (the open turn's entries, or all of it when the background catch-up is off or failed). ``WriterIndex`` does that on open: a sound index
is caught up from the seq its state names (the entries appended since the last search), a missing or
broken one is rebuilt from the entries; the documents are committed before the query, and the index is
closed again, so nothing of whoosh stays open between searches (no file handles, no whoosh lock held).
Without the turn-close catch-up the first search of a long session pays for indexing all of it; each
later one for what was appended since. A store opened with ``search=True`` keeps its own index current: its ``SearchIndexer`` answers.

Scope: this session (the default) is searched by its writer, as above; other sessions of the ledger
(``"ledger"`` or names separated by commas) are read through a store opened read-only (``read_index``:
never written; a missing, stale or broken index is completed in memory for that search, and says so in
a note).

On Ray the LedgerActor runs this (``LedgerActor.session_search``): the search runs where the session's
writer lock is. In-process ``InProcessServices`` runs it over the store the process holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vak_context.errors import InvalidInput, UnknownSession
from vak_context.storage.catchup import index_lock

if TYPE_CHECKING:  # whoosh is imported by a search, not by importing the services that may run one
    from vak_context.storage.search import Hit

SEARCH_LIMIT = 5  # hits a session_search returns
SCOPE_SESSIONS = 32  # sessions one search reads at most (each unindexed one is indexed in memory for it)
THIS_SESSION = "session"
WHOLE_LEDGER = "ledger"


@dataclass(frozen=True)
class Found:
    """A search's answer: the hits (best first), the sessions searched, how many turns the searching
    session has (the empty answer's recall suggestion), and notes (an index that could not be used whole,
    sessions left out of a scope)."""

    query: str
    session: str
    hits: tuple[Hit, ...]
    searched: tuple[str, ...]
    turns: int
    notes: tuple[str, ...] = ()


def scope_sessions(scope: str | None, session: str, names: list[str]) -> list[str]:
    """The sessions a scope names, this session first. ``None``, ``""`` or ``"session"``: this one;
    ``"ledger"``: every session of the ledger; else names separated by commas (an unknown one is refused)."""
    text = (scope or "").strip()
    if text in ("", THIS_SESSION, session):
        return [session]
    if text == WHOLE_LEDGER:
        return [session, *(n for n in names if n != session)]
    wanted = list(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    unknown = [n for n in wanted if n not in names and n != session]
    if unknown:
        listed = ", ".join(names[:20]) + (" …" if len(names) > 20 else "")
        raise InvalidInput(f"scope names no session {', '.join(map(repr, unknown))}; pass \"session\", "
                           f"\"ledger\" or names from this ledger ({listed})")
    return sorted(wanted, key=lambda n: n != session)


def _turns(store: Any, session: str) -> int:
    return sum(1 for _seq, _id, _parent, kind, _t in store.iter_metadata(session) if kind == "directive")


def own_session(store: Any, session: str, query: str, limit: int = SEARCH_LIMIT) -> list[Hit]:
    """Search ``session`` as its writer: the index opened, caught up from the ledger, searched, closed."""
    from vak_context.storage.search import WriterIndex, read_index

    indexer = getattr(store, "search_index", None)
    if indexer is not None:
        hits: list[Hit] = indexer.search(session, query, limit)
        return hits
    if getattr(store, "readonly", False):
        return read_index(store, session, query, limit)[0]
    with index_lock(Path(store.root), session):  # never beside a turn close's catch-up (storage/catchup.py)
        index = WriterIndex(store, session)  # catches up from its state's seq (or rebuilds) and commits
        try:
            return index.search(query, limit)
        finally:
            index.close()


def search_sessions(store: Any, session: str, query: str, scope: str | None = None,
                    limit: int = SEARCH_LIMIT) -> Found:
    """``session_search``'s answer for ``session`` over the writer ``store``: this session through its
    writer, the other sessions of the scope read-only. Raises ``InvalidInput`` for a scope naming an
    unknown session, ``UnknownSession`` when ``session`` itself is not in the ledger."""
    from vak_context.storage.ledger import LedgerStore
    from vak_context.storage.search import read_index

    if session not in store.sessions():
        raise UnknownSession(session)
    names = scope_sessions(scope, session, store.sessions())
    notes: list[str] = []
    if len(names) > SCOPE_SESSIONS:
        notes.append(f"the scope names {len(names)} sessions; searched the first {SCOPE_SESSIONS}")
        names = names[:SCOPE_SESSIONS]
    hits = list(own_session(store, session, query, limit)) if session in names else []
    others = [n for n in names if n != session]
    if others:
        with LedgerStore(store.root, readonly=True) as reader:  # never takes another session's writer lock
            for name in others:
                found, note = read_index(reader, name, query, limit)
                hits += found
                if note:
                    notes.append(note)
    hits.sort(key=lambda h: (-h.score, h.session != session, h.session, h.ref, h.start))
    return Found(query, session, tuple(hits[:limit]), tuple(names), _turns(store, session), tuple(notes))
