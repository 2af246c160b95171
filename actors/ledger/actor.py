"""LedgerActor: a ledger folder's one writer, so every process of a cluster appends through the same store.

A plain class, wrapped by ``vak_context.actors.factory``. It offers the calls of
``vak_context.storage.contract.Ledger`` with the same result types (``VerifyReport``, ``LedgerStats``);
callers reach it through ``vak_context.actors.ledger.client.LedgerClient``."""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from vak_context.events.envelope import At, StoredEntry
from vak_context.storage.contract import LedgerStats, Payload, VerifyReport
from vak_context.storage.group_commit import COMMITS
from vak_context.storage.ledger import LedgerStore
from vak_context.storage.sessionsearch import SEARCH_LIMIT, Found, search_sessions

T = TypeVar("T")
log = logging.getLogger(__name__)


def _foreground(method: Callable[..., T]) -> Callable[..., T]:
    """A call on a turn's path (an append, a read of the session's entries): the store's background search
    catch-ups give way to it (``storage/catchup.py``, ``Foreground``), as in-process they give way to a step's
    assembly. On Ray nothing else in this process marks a turn's work: without it a turn's close queued a
    catch-up that ran at once, beside the next turn's appends (about 40% of this actor's CPU a step, sampled
    with py-spy on bench/embed.py --ray), instead of in the model's time."""
    @functools.wraps(method)
    def held(self: LedgerActor, *args: Any, **kwargs: Any) -> T:
        with self.store.foreground.hold():
            return method(self, *args, **kwargs)
    return held


def append_since(store: LedgerStore, session: str, payloads: Sequence[Payload], since: int,
                 behind: bool = False) -> tuple[list[str], list[StoredEntry]]:
    """``LedgerActor.append_since`` on a store."""
    if not behind:
        return store.append(session, payloads), store.entries(session, since)
    [answer] = store.append_many(session, [(payloads, None)], behind=True)
    if isinstance(answer, BaseException):
        raise answer
    return answer, store.entries(session, since)


class LedgerActor:
    """The folder's one writer on Ray: it owns the LedgerStore, and every method is a thin, blocking call into it.

    On Ray it is a threaded actor (``vak_context.actors.factory.ledger_actor``): each call runs in one of the
    actor's threads, so concurrent appends share fsyncs through the store's group commit and reads
    that touch the disk never stall them. Plain methods rather than coroutines because an async
    actor costs each call two more thread hand-offs (Ray's thread to the event loop, the event loop
    to the store's committer thread, and back): about a third of the actor's CPU per call
    (docs/PERFORMANCE.md, "The actor path"). A restarted actor reopens the folder, sealing what the
    dead one left open.
    """

    def __init__(self, root: str) -> None:
        self.root = root
        # No index on the append path (docs/SEARCH.md): indexing in this process holds the GIL and
        # multiplied an append's median time by about 10 here. A session's index is caught up when one of
        # its turns closes (``index_later``, on the store's own background thread), and at its
        # session_search (``session_search`` below); `vak reindex` builds it.
        self.store = LedgerStore(root)
        self._syncs = ThreadPoolExecutor(1, thread_name_prefix="vak-sync")  # ``append_chain(behind=True)``'s fsyncs
        self.store.catch_up_index()  # a format-1 ledger's sessions get their index files (storage/ledger_index.py)
        # What a killed writer left behind, caught up as Engine.open does in one process (issue 35 item 5): the
        # card indexes whose documents never committed, now, and the search indexes, in the background.
        from vak_context.agent.carddocs import catch_up_cards
        from vak_context.storage.catchup import catch_up_behind

        catch_up_cards(self.store)
        catch_up_behind(self.store)

    @_foreground
    def append(
        self, session: str, payloads: Sequence[Payload], parent: str | None = None,
        blobs: Sequence[bytes | None] | None = None,
    ) -> list[str]:
        return self.store.append(session, payloads, parent=parent, blobs=blobs)

    @_foreground
    def append_since(self, session: str, payloads: Sequence[Payload], since: int,
                     behind: bool = False) -> tuple[list[str], list[StoredEntry]]:
        """Append at the head, and hand back the session's entries from ``since`` on (these included): the
        turn loop's driver passes them to the AssemblerActor with its next step, which folds them in
        instead of reading the ledger again (``RayServices``; ``since`` is where the assembler's view ends).
        ``behind`` (a held turn's directive): written, and synced on this actor's sync thread while the call
        returns, beside the turn's first pass (which commits nothing of its own: ``Assembled.unwritten``)."""
        answer = append_since(self.store, session, payloads, since, behind)
        if behind:
            self._syncs.submit(self._sync, session)
        return answer

    @_foreground
    def append_batch(
        self, session: str, requests: list[tuple[list[Payload], list[bytes | None] | None]],
    ) -> list[list[str] | BaseException]:
        """Appends a caller-side client coalesced (vak_context.actors.ledger.client): one call, one commit,
        written by this call's thread unless another commit is being written; each request's ids,
        or its own error, in order."""
        return self.store.append_many(session, requests)

    @_foreground
    def append_chain(
        self, session: str, requests: list[tuple[list[Payload], list[bytes | None], At]], behind: bool = False,
    ) -> list[list[str] | BaseException]:
        """Entries a caller chained itself (``LedgerClient.append_chain``), each request where its ``At``
        says the head is: one call, one commit, each request's ids or its error (``ChainMoved``), in order.
        ``behind`` (a held turn's step, ``RayServices``): written, and synced on this actor's sync thread while
        the call returns, so the fsync runs beside the step's model call, as in-process (a failed sync breaks
        the session's writer: the turn's next commit raises)."""
        answers = self.store.append_many(session, requests, behind=behind)
        if behind:
            self._syncs.submit(self._sync, session)
        return answers

    def _sync(self, session: str) -> None:
        try:
            self.store.sync(session)
        except Exception:  # the session's writer is broken (its next commit raises), or the store closed
            log.warning("a written-behind commit of %s was not synced", session, exc_info=True)

    def synced(self) -> None:
        """Once every sync queued before this call has run (``append_chain(behind=True)``)."""
        self._syncs.submit(lambda: None).result()

    def head(self, session: str) -> str | None:
        return self.store.head(session)

    @_foreground
    def get(self, entry_id: str) -> StoredEntry:
        return self.store.get(entry_id)

    @_foreground
    def payload(self, entry_id: str) -> Any:
        return self.store.payload(entry_id)

    @_foreground
    def entries(self, session: str, start: int = 0, stop: int | None = None) -> list[StoredEntry]:
        return self.store.entries(session, start, stop)

    @_foreground
    def chain_to_root(self, entry_id: str) -> list[StoredEntry]:
        return self.store.chain_to_root(entry_id)

    def sessions(self) -> list[str]:
        return self.store.sessions()

    def profile_entry(self, provider: str, model: str, quantisation: str = "") -> StoredEntry | None:
        return self.store.profile_entry(provider, model, quantisation)

    def verify(self, session: str | None = None) -> VerifyReport:
        return self.store.verify(session)

    def stats(self) -> LedgerStats:
        return self.store.stats()

    def commit_tally(self) -> dict[str, float]:
        """This actor's process's durable commits so far (``vak_context.storage.group_commit.COMMITS``)."""
        return COMMITS.snapshot()

    def session_search(self, session: str, query: str, scope: str | None = None,
                       limit: int = SEARCH_LIMIT) -> Found:
        """``session_search`` run here, where the session's writer lock is: its index caught up from the
        ledger and searched (``storage/sessionsearch.py``); other sessions of the scope read-only."""
        return search_sessions(self.store, session, query, scope, limit)

    def index_later(self, session: str) -> bool:
        """A turn of ``session`` closed: queue a catch-up of its search index on the store's background
        thread (``storage/catchup.py``) and return at once, so this actor's threads stay free for appends
        (the catch-up still shares this process's interpreter with them)."""
        return self.store.index_later(session)

    def index_idle(self) -> None:
        """Return once no background catch-up is queued or running here (tests, benches)."""
        self.store.index_idle()

    def recoveries(self) -> list[dict[str, Any]]:
        return list(self.store.recoveries)

    def checkpoint(self) -> None:
        self.store.checkpoint()

    def pid(self) -> int:
        return os.getpid()

    def close(self) -> None:
        self._syncs.shutdown(wait=True)
        self.store.close()
