"""The caller-side client coalesces concurrent appends into one LedgerActor call (issue 14).

The test drives the coalescing rules with a small hand-written stand-in for the actor handle
(pure code: which appends go out in which call, and who gets which answer). The real LedgerActor on
the local Ray: tests/ray/test_ledger_perf_client_ray.py.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from vak_context.actors.append_coalescer import AppendCoalescer
from vak_context.errors import InvalidPayload


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


