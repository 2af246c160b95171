"""The ledger conformance suite (tests/fakes/ledger_contract.py) through a LedgerClient over the LedgerActor
on the shared local Ray."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import ray

from tests.fakes.ledger_contract import DiskLedgerContract
from vak_context.actors.factory import ledger_actor
from vak_context.actors.ledger.client import LedgerClient
from vak_context.storage.contract import Ledger


@pytest.mark.ray
class TestLedgerClientOverRay(DiskLedgerContract):
    @pytest.fixture(autouse=True)
    def _ray(self, ray_cluster: Any) -> None:
        """Every test here needs the shared local Ray."""

    def create_ledger(self, root: Path) -> Ledger:
        return LedgerClient(str(root), ledger_actor(root))

    def close_ledger(self, ledger: Ledger) -> None:
        assert isinstance(ledger, LedgerClient)
        handle = ledger_actor(ledger.root)
        ray.get(handle.close.remote())
        ray.kill(handle, no_restart=True)
