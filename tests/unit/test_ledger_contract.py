"""The ledger conformance suite (tests/fakes/ledger_contract.py) on every ledger and way to reach one in this
process: the in-memory ledger, the Arrow store, the LedgerActor class, a LedgerClient over a store. Over
the LedgerActor on Ray: tests/ray/test_ledger_contract_ray.py; the two backends side by side:
tests/unit/test_ledger_memory.py."""

from __future__ import annotations

from pathlib import Path

from tests.fakes.ledger_contract import DiskLedgerContract, LedgerContract
from tests.fakes.ledgers import ActorInProcess
from vak_context.actors.ledger.client import LedgerClient
from vak_context.storage.contract import Ledger
from vak_context.storage.ledger import LedgerStore
from vak_context.storage.memory import InMemoryLedger


class TestInMemoryLedger(LedgerContract):
    def create_ledger(self, root: Path) -> Ledger:
        return InMemoryLedger()  # no folder: ``root`` is left alone

    def close_ledger(self, ledger: Ledger) -> None:
        assert isinstance(ledger, InMemoryLedger)
        ledger.close()


class TestLedgerStore(DiskLedgerContract):
    def create_ledger(self, root: Path) -> Ledger:
        return LedgerStore(root)

    def close_ledger(self, ledger: Ledger) -> None:
        assert isinstance(ledger, LedgerStore)
        ledger.close()


class TestLedgerActorInProcess(DiskLedgerContract):
    def create_ledger(self, root: Path) -> Ledger:
        return ActorInProcess(root)

    def close_ledger(self, ledger: Ledger) -> None:
        assert isinstance(ledger, ActorInProcess)
        ledger.close()


class TestLedgerClientOverAStore(DiskLedgerContract):
    def create_ledger(self, root: Path) -> Ledger:
        return LedgerClient(str(root), LedgerStore(root))

    def close_ledger(self, ledger: Ledger) -> None:
        assert isinstance(ledger, LedgerClient) and ledger.store is not None
        ledger.store.close()
