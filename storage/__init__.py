"""On-disk storage: the Arrow IPC ledger (``ledger``, ``segments``) and its verifier (``verify``)."""

from storage.ledger import LedgerStore
from storage.verify import BadEntry, VerifyReport

__all__ = ["BadEntry", "LedgerStore", "VerifyReport"]
