"""Ways to reach a ledger that production code does not need, for the tests (the contract suite, the error edges).

``ActorInProcess``: the LedgerActor class without Ray, its methods called in this process.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from vak_context.actors.ledger.actor import LedgerActor
from vak_context.events.envelope import StoredEntry
from vak_context.storage.contract import LedgerStats, Payload, VerifyReport


class ActorInProcess:
    """The LedgerActor class without Ray, its methods called in this process: the plain class is
    held to the same (synchronous) contract as the others."""

    def __init__(self, root: Path) -> None:
        self.actor = LedgerActor(str(root))

    def append(self, session: str, payloads: Sequence[Payload], *, parent: str | None = None,
               blobs: Sequence[bytes | None] | None = None) -> list[str]:
        return self.actor.append(session, payloads, parent, blobs)

    def head(self, session: str) -> str | None:
        return self.actor.head(session)

    def get(self, entry_id: str) -> StoredEntry:
        return self.actor.get(entry_id)

    def entries(self, session: str, start: int = 0, stop: int | None = None) -> list[StoredEntry]:
        return self.actor.entries(session, start, stop)

    def chain_to_root(self, entry_id: str) -> list[StoredEntry]:
        return self.actor.chain_to_root(entry_id)

    def sessions(self) -> list[str]:
        return self.actor.sessions()

    def profile_entry(self, provider: str, model: str, quantisation: str = "") -> StoredEntry | None:
        return self.actor.profile_entry(provider, model, quantisation)

    def verify(self, session: str | None = None) -> VerifyReport:
        return self.actor.verify(session)

    def stats(self) -> LedgerStats:
        return self.actor.stats()

    def checkpoint(self) -> None:
        self.actor.checkpoint()

    def close(self) -> None:
        self.actor.close()
