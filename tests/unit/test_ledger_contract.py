"""The ledger conformance suite (tests/fakes/ledger_contract.py) on every way to reach a ledger in this
process; over the LedgerActor on Ray: tests/ray/test_ledger_contract_ray.py."""

from __future__ import annotations

from pathlib import Path

from tests.fakes.ledger_contract import LedgerContract
from tests.fakes.ledgers import ActorInProcess
from vak_context.actors.ledger_client import LedgerClient
from vak_context.storage.contract import Ledger
from vak_context.storage.ledger import LedgerStore


class TestLedgerStore(LedgerContract):
    def create_ledger(self, root: Path) -> Ledger:
        return LedgerStore(root)

    def close_ledger(self, ledger: Ledger) -> None:
        assert isinstance(ledger, LedgerStore)
        ledger.close()


class TestLedgerActorInProcess(LedgerContract):
    def create_ledger(self, root: Path) -> Ledger:
        return ActorInProcess(root)

    def close_ledger(self, ledger: Ledger) -> None:
        assert isinstance(ledger, ActorInProcess)
        ledger.close()


class TestLedgerClientOverAStore(LedgerContract):
    def create_ledger(self, root: Path) -> Ledger:
        return LedgerClient(str(root), LedgerStore(root))

    def close_ledger(self, ledger: Ledger) -> None:
        assert isinstance(ledger, LedgerClient) and ledger.store is not None
        ledger.store.close()
