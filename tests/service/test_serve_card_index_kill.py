"""The card index survives a SIGKILL (issue 35 item 5): a ``vak serve`` child closes turns and is killed
before its card index commits their documents (it commits a buffer ``COMMIT_S`` after the first one); the
next start on the ledger catches the index up from the ledger as it opens, before any request, so ``vak
verify`` after a clean stop reports no card-index lag (before the fix it did until ``vak reindex``)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from tests.fakes.httpserver import serve
from tests.fakes.serve_clients import Client
from tests.fakes.wire_models import FORMATS, WireModel
from vak_context.agent.carddocs import card_index_findings, docs_from_ledger
from vak_context.serve.child import serve_child
from vak_context.storage.cardindex import PENDING, CardIndex
from vak_context.storage.ledger import LedgerStore

SESSION = "killed-1"
WAIT_S = 300


def _verify(ledger: Path) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-m", "vak_context.cli", "verify", str(ledger), "--json"],
                          capture_output=True, text=True, timeout=WAIT_S)
    assert done.returncode == 0, done.stdout + done.stderr
    report: dict[str, object] = json.loads(done.stdout)
    return report


def test_the_card_index_catches_up_at_the_next_start_after_a_sigkill(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    marker = ledger / "sessions" / SESSION / PENDING
    with serve(WireModel(FORMATS["openai"]).handle) as upstream:
        with serve_child("openai-compat:scripted", ledger=ledger, base_url=upstream.base_url, window=9500) as first:
            client = Client("openai", first.base_url, first.key, session=SESSION)
            for query in ("query-001", "query-002", "query-003"):
                assert client.turn(f"please search {query}").startswith("Done")
            # Killed at once: the last turns' documents are in the index's buffer (a commit is 5 s away).
            first.process.send_signal(signal.SIGKILL)
            assert first.process.wait(WAIT_S) == -signal.SIGKILL
        with LedgerStore(ledger, readonly=True) as store:
            cards = {d.turn_id for d in docs_from_ledger(store, SESSION)}
            lag = card_index_findings(store, SESSION)
        assert len(cards) >= 2
        assert lag is not None and "lacks" in lag, lag  # what the kill left: the ledger's cards, not the index's
        assert marker.exists()

        with serve_child("openai-compat:scripted", ledger=ledger, base_url=upstream.base_url, window=9500):
            # Caught up as the engine opened the folder: no request has reached the session.
            assert not marker.exists()
        # (the block's end stopped it cleanly)

    report = _verify(ledger)
    assert report["search_index"] == [], report
    with LedgerStore(ledger, readonly=True) as store:
        assert card_index_findings(store, SESSION) is None
    with CardIndex(ledger) as index:
        assert index.count(SESSION) == len(cards)
