"""The card index survives a SIGKILL on Ray too (issue 35 item 5): ``vak serve --ray`` (its own local cluster)
closes turns and is killed with every process it started (its Ray included) before its card index commits
their documents; the next ``vak serve --ray`` on the ledger catches the index up as the folder's LedgerActor
opens it (before any request reaches that session), as ``Engine.open`` does in one process (tests/service/test_serve_card_index_kill.py), so ``vak
verify`` after a clean stop reports no card-index lag and no search-index lag."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import psutil

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


def _kill_tree(pid: int) -> None:
    """SIGKILL to the server and every process it started (its Ray's too): a crash of the whole server."""
    tree = [psutil.Process(pid)]
    tree += tree[0].children(recursive=True)
    for p in tree:
        try:
            p.send_signal(signal.SIGKILL)
        except psutil.Error:
            pass
    psutil.wait_procs(tree, timeout=WAIT_S)


def test_the_card_index_catches_up_at_the_next_start_on_ray_after_a_sigkill(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    marker = ledger / "sessions" / SESSION / PENDING
    with serve(WireModel(FORMATS["openai"]).handle) as upstream:
        with serve_child("openai-compat:scripted", ledger=ledger, base_url=upstream.base_url, window=9500,
                         extra=["--ray"]) as first:
            client = Client("openai", first.base_url, first.key, session=SESSION)
            for query in ("query-001", "query-002", "query-003"):
                assert client.turn(f"please search {query}").startswith("Done")
            _kill_tree(first.process.pid)  # the last turns' documents are in the index's buffer
        with LedgerStore(ledger, readonly=True) as store:
            cards = {d.turn_id for d in docs_from_ledger(store, SESSION)}
            lag = card_index_findings(store, SESSION)
        assert len(cards) >= 2
        assert lag is not None and "lacks" in lag, lag  # what the kill left: the ledger's cards, not the index's
        assert marker.exists()

        with serve_child("openai-compat:scripted", ledger=ledger, base_url=upstream.base_url, window=9500,
                         extra=["--ray"]) as second:
            # The LedgerActor is created at the engine's open, its __init__ run in its own process: another
            # session's turn (its appends wait for that __init__) is the point after which it has run. No
            # request reached the killed session: its index was caught up as the actor opened the folder.
            other = Client("openai", second.base_url, second.key, session="other-1")
            assert other.turn("please search query-009").startswith("Done")
            assert not marker.exists()
        # (the block's end stopped it cleanly)

    report = _verify(ledger)
    assert report["search_index"] == [], report
    with LedgerStore(ledger, readonly=True) as store:
        assert card_index_findings(store, SESSION) is None
    with CardIndex(ledger) as index:
        assert index.count(SESSION) == len(cards)
