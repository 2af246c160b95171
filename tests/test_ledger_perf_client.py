"""The caller-side client coalesces concurrent appends into one LedgerActor call (issue 14).

The first test drives the coalescing rules with a small hand-written stand-in for the actor handle
(pure code: which appends go out in which call, and who gets which answer). The second runs the
real LedgerActor on the local Ray.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import ray

from vak_context.actors.append_coalescer import AppendCoalescer
from vak_context.actors.factory import ledger_actor
from vak_context.actors.ledger_client import LedgerClient
from vak_context.errors import InvalidPayload, UnknownKind
from vak_context.events.payloads import Nudge


class _ScriptedActor:
    """``append_batch.remote`` answers with made-up ids; the first ``held`` calls wait for ``release``."""

    def __init__(self, held: int) -> None:
        self.append_batch = self
        self.held = held
        self.calls: list[list[list[Any]]] = []
        self.lock = threading.Lock()
        self.arrived = [threading.Event() for _ in range(held)]  # arrived[k]: call k+1 is in flight
        self.release = threading.Event()

    def remote(self, session: str, requests: list[tuple[list[Any], Any]]) -> list[Any]:
        with self.lock:
            self.calls.append([list(payloads) for payloads, _ in requests])
            hold = len(self.calls) <= self.held
            if hold:
                self.arrived[len(self.calls) - 1].set()
        if hold:
            assert self.release.wait(60)
        return [InvalidPayload("bad payload") if "bad" in payloads else [f"{session}/{p}" for p in payloads]
                for payloads, _ in requests]


@pytest.mark.parametrize("slots", [1, 2])
def test_appends_queued_behind_calls_go_out_together_each_with_its_own_answer(slots: int) -> None:
    """While ``slots`` calls are in flight, 15 appends queue; they go out as the next single call, in
    the order they queued; each caller gets its own ids, and the one with a bad payload its own error."""
    actor = _ScriptedActor(held=slots)
    coalescer = AppendCoalescer(actor, get=lambda value: value, max_in_flight=slots)
    answers: dict[str, Any] = {}

    def append(name: str, payloads: list[str]) -> None:
        try:
            answers[name] = coalescer.append("s", payloads, None)
        except InvalidPayload as exc:
            answers[name] = exc

    firsts = [threading.Thread(target=append, args=(f"first{k}", ["a", "b"])) for k in range(slots)]
    for k, t in enumerate(firsts):  # each takes a free slot and sends its own call
        t.start()
        assert actor.arrived[k].wait(60)
    names = [f"w{k}" for k in range(15)]
    threads = []
    for k, name in enumerate(names):  # one at a time, so the queue order is known
        t = threading.Thread(target=append, args=(name, ["bad"] if k == 7 else [name]))
        t.start()
        threads.append(t)
        assert coalescer.wait_queued("s", k + 1, timeout=60)
    actor.release.set()
    for t in [*firsts, *threads]:
        t.join(60)
    assert actor.calls == [[["a", "b"]]] * slots + [[["bad"] if k == 7 else [n] for k, n in enumerate(names)]]
    assert coalescer.calls == slots + 1
    assert all(answers[f"first{k}"] == ["s/a", "s/b"] for k in range(slots))
    for k, name in enumerate(names):
        if k == 7:
            assert isinstance(answers[name], InvalidPayload)
        else:
            assert answers[name] == [f"s/{name}"]
    assert coalescer.queued("s") == 0


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
