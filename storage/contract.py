"""The one ledger contract: what every way of reaching a ledger offers, with one result type per call.

Three things implement it: ``vak_context.storage.ledger.LedgerStore`` (this process holds the folder),
``vak_context.actors.ledger.actor.LedgerActor`` (the same calls, the folder's one writer on Ray: a threaded actor) and
``vak_context.actors.ledger.client.LedgerClient`` (either of those behind one object; what callers hold).
``tests/test_ledger_contract.py`` runs one test class against all of them.

Failure cases every implementation reports with the same typed error (``vak/errors.py``): a bad
session name (``InvalidName``), an unknown session (``UnknownSession``) or entry id
(``UnknownEntry``), a payload canonical JSON cannot encode (``NonCanonicalValue``) or that fails its
schema (``InvalidPayload``), stored bytes that do not decode (``LedgerCorrupt``), and, through
Ray, an actor that cannot be reached (``ActorError``). A tampered entry is what ``verify()``
reports, in its ``VerifyReport``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from pydantic import BaseModel

from vak_context.events.envelope import StoredEntry
from vak_context.storage.verify import BadEntry, VerifyReport

Payload = BaseModel | dict[str, Any]

__all__ = ["BadEntry", "Ledger", "LedgerStats", "Payload", "VerifyReport"]


@dataclass(frozen=True)
class LedgerStats:
    """Sessions, entries by kind, bytes on disk and heads: what `vak inspect` prints."""

    sessions: int
    entries: int
    by_kind: dict[str, int] = field(default_factory=dict)
    bytes: int = 0
    heads: dict[str, str | None] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class Ledger(Protocol):
    """A ledger as callers use it: appends (each returns once durable), reads, and maintenance."""

    def append(
        self, session: str, payloads: Sequence[Payload], *, parent: str | None = None,
        blobs: Sequence[bytes | None] | None = None,
    ) -> list[str]:
        """Append entries as one chain (parent: the session head by default); their ids once durable."""
        ...

    def head(self, session: str) -> str | None: ...

    def get(self, entry_id: str) -> StoredEntry: ...

    def entries(self, session: str, start: int = 0, stop: int | None = None) -> list[StoredEntry]:
        """Entries with ``start <= seq < stop``, in seq order."""
        ...

    def chain_to_root(self, entry_id: str) -> list[StoredEntry]:
        """The entries from the session root down to ``entry_id``, oldest first."""
        ...

    def sessions(self) -> list[str]: ...

    def profile_entry(self, provider: str, model: str, quantisation: str = "") -> StoredEntry | None:
        """The newest ``capacity_profile`` entry recorded for the model key in any session (by entry time;
        on a tie the later session by name, then the later seq); None when none is."""
        ...

    def verify(self, session: str | None = None) -> VerifyReport:
        """Re-read the session(s) from disk and check every hash link."""
        ...

    def stats(self) -> LedgerStats: ...

    def checkpoint(self) -> None:
        """Seal open segments so plain Arrow readers see every durable entry."""
        ...
