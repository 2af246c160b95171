"""On-disk storage: the Arrow IPC ledger (``ledger``, ``segments``) and its verifier (``verify``)."""

from vak_context.storage.ledger import LedgerStore
from vak_context.storage.verify import BadEntry, VerifyReport

__all__ = ["BadEntry", "LedgerStore", "VerifyReport"]
