"""A ledger folder's actors on the tests' one shared Ray, and how a test leaves none of them behind.

The engine's actors are detached (they outlive the engine that made them, for other processes): a test that
opens an engine on a folder of its own kills that folder's actors when it is done, so the next test on the
shared cluster starts from a clean slate (and a probe still in flight stops with them)."""

from __future__ import annotations

import os
from pathlib import Path

from vak_context.actors.factory import (
    NAMESPACE,
    assembler_actor_name,
    evidence_actor_name,
    ledger_actor_name,
    planner_actor_name,
    probe_actor_name,
)

ACTOR_NAMES = (probe_actor_name, planner_actor_name, assembler_actor_name, evidence_actor_name, ledger_actor_name)


def kill_folder_actors(folder: str | os.PathLike[str]) -> list[str]:
    """Kill the folder's actors (the ledger's last, after those that write through it); the names killed."""
    import ray

    root = os.path.realpath(Path(folder))
    killed = []
    for name_of in ACTOR_NAMES:
        name = name_of(root)
        try:
            actor = ray.get_actor(name, namespace=NAMESPACE)
        except ValueError:
            continue  # never started
        ray.kill(actor, no_restart=True)
        killed.append(name)
    return killed
