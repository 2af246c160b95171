"""The caller-side client coalesces concurrent appends into one call to the real LedgerActor on the local Ray
(issue 14); the coalescing rules themselves: tests/unit/test_ledger_perf_client.py."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import ray

from vak_context.actors.factory import ledger_actor
from vak_context.actors.ledger.client import LedgerClient
from vak_context.errors import UnknownKind
from vak_context.events.payloads import Nudge


@pytest.mark.ray
def test_sixteen_writers_through_the_client_build_one_verified_chain(ray_cluster: Any, ledger_dir: Path) -> None:
    """16 threads append through one LedgerClient on the real actor: every append's ids are its
    own, consecutive in the one chain; a bad payload fails only its own append, with its typed
    error; the ledger verifies."""
    actor = ledger_actor(ledger_dir)
    client = LedgerClient(str(ledger_dir), actor)
    got: dict[int, list[list[str]]] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(16)

    def writer(w: int) -> None:
        start.wait()
        got[w] = [client.append("c", [Nudge(tag=f"w{w}", text=f"{i}a"), Nudge(tag=f"w{w}", text=f"{i}b")])
                  for i in range(12)]
        try:
            client.append("c", [{"kind": "no-such-kind"}])
        except UnknownKind as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(errors) == 16
    chain = [e.id for e in ray.get(actor.chain_to_root.remote(ray.get(actor.head.remote("c"))))]
    assert len(chain) == 16 * 12 * 2
    position = {eid: k for k, eid in enumerate(chain)}
    for w, appends in got.items():
        for ids in appends:
            assert len(ids) == 2 and position[ids[1]] == position[ids[0]] + 1
        entries = [ray.get(actor.get.remote(ids[0])) for ids in appends[:2]]
        assert all(b'"tag":"w%d"' % w in e.payload for e in entries)
    assert ray.get(actor.verify.remote()).ok
    ray.kill(actor, no_restart=True)
