"""The farm's progress actor, in a module of its own that imports nothing heavy.

Ray starts the actor in a fresh worker process, which imports the module its class is defined in. Kept in
``vak_context.farm.tasks`` it pulled in pyarrow, httpx and the model-unit code: about 1.5 s of CPU per run for an
actor that only keeps a dict (docs/FARM.md "Benchmark").

One actor serves every run on a cluster (named ``farmprogress``, detached, got if it exists): a new
actor is a new worker process, whose start (Python and Ray's imports) cost about 1.3 s of CPU per run,
more than the progress calls of a hundred units. Each run's log is its own, and the driver drops it at
the end (``forget``). The driver reads the log from where it last stopped (``since``), so one poll costs
the starts that are new, not every start of the run so far.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

PROGRESS_ACTOR = "farmprogress"
Answer = tuple[str, list[tuple[str, str]]]  # the actor's token, and starts as (unit, node)


class FarmProgressActor:
    """Which units started, where, and in which order (a retried unit starts again), per run."""

    def __init__(self) -> None:
        self.token = uuid.uuid4().hex  # a restarted actor has a new one: its logs start empty
        self.logs: dict[str, list[tuple[str, str]]] = {}

    def started(self, run_id: str, unit: str, node: str) -> None:
        self.logs.setdefault(run_id, []).append((unit, node))

    def since(self, run_id: str, n: int) -> Answer:
        """This actor's token and run ``run_id``'s starts from the ``n``-th on."""
        return self.token, self.logs.get(run_id, [])[n:]

    def forget(self, run_id: str) -> None:
        self.logs.pop(run_id, None)


class StartsReader:
    """The driver's side: every start of one run, read from the actor a piece at a time.

    A restarted actor (it lost its node) knows only what it heard since: what was read before stays.
    """

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.starts: dict[str, list[str]] = {}
        self.token = ""
        self.read = 0

    def poll(self, ask: Callable[[int], Answer | None]) -> bool:
        """Read the starts heard since the last poll; True when there were any. ``ask(n)`` is the actor's
        ``since(run_id, n)``, or None when the actor cannot answer now (it is restarting): then what was read
        stays as it is."""
        answer = ask(self.read)
        if answer is not None and answer[0] != self.token and self.read:  # restarted: its log starts over
            answer = ask(0)
        if answer is None:
            return False
        token, new = answer
        if token != self.token:
            self.token, self.read = token, 0
        for unit, node in new:
            self.starts.setdefault(unit, []).append(node)
        self.read += len(new)
        return bool(new)


def asker(actor: Any, run_id: str) -> Callable[[int], Answer | None]:
    """``StartsReader.poll``'s ``ask`` for the Ray actor ``actor``."""
    import ray

    def ask(n: int) -> Answer | None:
        try:
            answer: Answer = ray.get(actor.since.remote(run_id, n), timeout=30)
        except ray.exceptions.RayError:
            return None
        return answer

    return ask


def progress_actor(driver_node: str) -> Any:
    """The cluster's progress actor, started on the driver's node (if it can) when there is none yet."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from vak_context.actors.factory import NAMESPACE, remote_class

    return remote_class(FarmProgressActor).options(
        name=PROGRESS_ACTOR, namespace=NAMESPACE, lifetime="detached", get_if_exists=True, num_cpus=0,
        max_restarts=-1, scheduling_strategy=NodeAffinitySchedulingStrategy(driver_node, soft=True),
    ).remote()
