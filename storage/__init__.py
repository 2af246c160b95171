"""On-disk storage: the Arrow IPC ledger (``ledger``, the ``segment`` files) and its verifier (``verify``); and the
in-memory ledger (``memory``) that holds to the same contract, for tests."""

from vak_context.storage.ledger import LedgerStore
from vak_context.storage.memory import InMemoryLedger
from vak_context.storage.verify import BadEntry, VerifyReport

__all__ = ["BadEntry", "InMemoryLedger", "LedgerStore", "VerifyReport"]
