"""An actor class that notes each call it receives, so a Ray test can count a step's process crossings.

``counting(cls)`` is ``cls`` with every public method wrapped: each call notes the method's name and the
machine's monotonic clock (one clock for every process of the machine) when it arrived and when it
returned; ``received()`` hands the notes over. The wrapped class runs as the real actor does (same code,
same options): the notes are all it adds. A call the actor makes to its own methods is not noted (a context
variable says a received call is being answered, in its task or thread). A test creates the folder's actors from these classes under the
names ``vak_context.actors.factory`` gives them, so the engine's wiring gets them by name."""

from __future__ import annotations

import contextvars
import functools
import inspect
import time
from collections.abc import Callable
from typing import Any

Note = tuple[str, int, int]  # method, arrived (ns), returned (ns)
MOST = 3  # issue 37's target: a step's calls on its critical path


def counting(cls: type) -> type:
    """``cls`` whose public methods note each call (``received`` returns and clears the notes)."""

    def wrap(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        if inspect.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def call_async(self: Any, *args: Any, **kwargs: Any) -> Any:
                if self._inside.get():  # the actor calling itself
                    return await fn(self, *args, **kwargs)
                arrived, token = time.monotonic_ns(), self._inside.set(True)
                try:
                    return await fn(self, *args, **kwargs)
                finally:
                    self._inside.reset(token)
                    self._notes.append((name, arrived, time.monotonic_ns()))
            return call_async

        @functools.wraps(fn)
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            if self._inside.get():  # the actor calling itself
                return fn(self, *args, **kwargs)
            arrived, token = time.monotonic_ns(), self._inside.set(True)
            try:
                return fn(self, *args, **kwargs)
            finally:
                self._inside.reset(token)
                self._notes.append((name, arrived, time.monotonic_ns()))
        return call

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        self._notes = []
        self._inside = contextvars.ContextVar("inside", default=False)
        cls.__init__(self, *args, **kwargs)

    def received(self: Any) -> list[Note]:
        notes, self._notes = self._notes, []
        return notes

    members: dict[str, Any] = {"__init__": init, "received": received}
    for name, fn in inspect.getmembers(cls, inspect.isfunction):
        if not name.startswith("_"):
            members[name] = wrap(name, fn)
    return type(f"Counting{cls.__name__}", (cls,), members)


def counting_actors(root: str) -> dict[str, Any]:
    """The folder's Ledger, Planner, Assembler and Evidence actors as ``vak_context.actors.factory`` makes
    them (same names, namespace and options), each class wrapped to note the calls it receives."""
    from vak_context.actors.assembler import AssemblerActor
    from vak_context.actors.evidence import EvidenceActor
    from vak_context.actors.factory import (
        LEDGER_THREADS,
        NAMESPACE,
        assembler_actor_name,
        evidence_actor_name,
        ledger_actor_name,
        planner_actor_name,
        remote_class,
    )
    from vak_context.actors.ledger.actor import LedgerActor
    from vak_context.actors.planner import PlannerActor
    from vak_context.context.capacity.tokens import PRIOR_TOKENS_PER_CHAR

    options = {"namespace": NAMESPACE, "lifetime": "detached", "max_restarts": -1, "max_task_retries": 0,
               "num_cpus": 0}
    ledger = remote_class(counting(LedgerActor)).options(
        name=ledger_actor_name(root), max_concurrency=LEDGER_THREADS, **options).remote(root)
    planner = remote_class(counting(PlannerActor)).options(name=planner_actor_name(root), **options).remote(
        root, ledger, PRIOR_TOKENS_PER_CHAR)
    assembler = remote_class(counting(AssemblerActor)).options(name=assembler_actor_name(root), **options).remote(
        root, ledger, None, PRIOR_TOKENS_PER_CHAR, planner=planner)
    evidence = remote_class(counting(EvidenceActor)).options(name=evidence_actor_name(root), **options).remote(
        root, ledger, PRIOR_TOKENS_PER_CHAR)
    return {"ledger": ledger, "planner": planner, "assembler": assembler, "evidence": evidence}


Call = tuple[int, int, str]  # arrived, returned, "actor.method"


def steps_of(notes: dict[str, list[Note]]) -> list[list[tuple[str, list[str]]]]:
    """Per step, the calls the driver made (in the order they arrived), each with the calls it led to.

    A call another counted call encloses (between its arrival and its return) was made by the actor answering
    that one: the Evidence and Ledger actors call on synchronously, so a call enclosed by a ``store_result`` is
    its own; the AssemblerActor also waits there on the results stored behind, so only what no other call
    encloses is the assembler's (its planner's call and its plan's append). A step starts with the driver's
    ``assemble``; any other call of the driver's belongs to the last step whose ``assemble`` had returned
    when it arrived (the driver waits on that answer before making the step's other calls); those before the
    first (the turn's directive, its stated items) are the turn's start, not counted."""
    calls = sorted((a, r, f"{actor}.{name}") for actor, ns in notes.items() for name, a, r in ns)

    def parent(c: Call) -> Call | None:
        around = [o for o in calls if o is not c and o[0] <= c[0] and c[1] <= o[1]]
        behind = [o for o in around if o[2] != "assembler.assemble"]
        return max(behind or around, default=None)  # the latest to arrive: the innermost

    parents = {c: parent(c) for c in calls}
    top = [c for c in calls if parents[c] is None]
    asked = [c for c in top if c[2] == "assembler.assemble"]
    steps: list[list[tuple[str, list[str]]]] = [[] for _ in asked]
    for c in top:
        step = asked.index(c) if c in asked else sum(a[1] <= c[0] for a in asked) - 1
        if step < 0:
            continue  # the turn's start (its directive, the stated items): before its first step
        nested = [n for n in calls if under(n, c, parents)]
        steps[step].append((c[2], [n[2] for n in nested]))
    return steps


def under(n: Call, c: Call, parents: dict[Call, Call | None]) -> bool:
    up = parents[n]
    while up is not None and up != c:
        up = parents[up]
    return up == c
