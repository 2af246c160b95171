"""Coalesced appends through the LedgerActor lose nothing and keep each writer's order (issue 14).

Many threads append through one LedgerClient on the real actor, with several coalesced calls in
flight at once (calls to an async actor may overlap), and the ledger is then read back from disk
by a separate read-only store.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
import ray

from vak_context.actors.factory import ledger_actor
from vak_context.actors.ledger.client import LedgerClient
from vak_context.events.payloads import Nudge
from vak_context.storage.ledger import LedgerStore

pytestmark = pytest.mark.ray

WRITERS = 12
APPENDS = 8


@pytest.mark.parametrize("in_flight", [2, 4])
def test_concurrent_writers_get_exactly_their_entries_chained_in_acknowledged_order(
    ray_cluster: Any, ledger_dir: Path, in_flight: int,
) -> None:
    """12 writers each append 8 times (1 or 2 entries each) through one client with ``in_flight``
    calls per session: on disk the session holds exactly the acknowledged ids, once each, as one
    parent-linked chain in seq order; each id holds the payload its writer sent; and each writer's
    entries come in the chain in the order its appends were acknowledged."""
    actor = ledger_actor(ledger_dir)
    client = LedgerClient(str(ledger_dir), actor, max_in_flight=in_flight)
    acked: dict[int, list[list[str]]] = {w: [] for w in range(WRITERS)}
    start = threading.Barrier(WRITERS)

    def writer(w: int) -> None:
        start.wait()
        for i in range(APPENDS):
            payloads = [Nudge(tag=f"w{w}", text=f"{i}.{k}") for k in range(1 + (w + i) % 2)]
            acked[w].append(client.append("s", payloads))  # acknowledged: durable, in this order

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(WRITERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ray.get(actor.checkpoint.remote())
    reader = LedgerStore(ledger_dir, readonly=True)
    try:
        on_disk = reader.entries("s")
    finally:
        reader.close()
    ray.kill(actor, no_restart=True)

    expected = [eid for w in range(WRITERS) for ids in acked[w] for eid in ids]
    assert sorted(e.id for e in on_disk) == sorted(expected)
    assert len(set(expected)) == len(expected)
    assert [e.seq for e in on_disk] == list(range(len(on_disk)))
    assert [e.parent for e in on_disk] == [None] + [e.id for e in on_disk[:-1]]
    position = {e.id: k for k, e in enumerate(on_disk)}
    body = {e.id: json.loads(e.payload) for e in on_disk}
    for w in range(WRITERS):
        sent = [(f"w{w}", f"{i}.{k}") for i, ids in enumerate(acked[w]) for k in range(len(ids))]
        ids = [eid for run in acked[w] for eid in run]
        assert [(body[eid]["tag"], body[eid]["text"]) for eid in ids] == sent
        assert [position[eid] for eid in ids] == sorted(position[eid] for eid in ids)
        for run in acked[w]:  # one append's entries stay adjacent
            assert [position[eid] for eid in run] == list(range(position[run[0]], position[run[0]] + len(run)))
