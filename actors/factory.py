"""The one place ``ray.remote`` is applied. Actor classes stay plain and testable without Ray.

Actors are named and detached in the ``vak`` namespace, so a job, a notebook and another actor
reach the same one with ``get_if_exists``.
"""

from __future__ import annotations

import os
from typing import Any

import blake3
import ray

from actors.ledger import LedgerActor

NAMESPACE = "vak"


def ledger_actor_name(root: str | os.PathLike[str]) -> str:
    """One LedgerActor per ledger folder, named after the folder's resolved path."""
    real = os.path.realpath(os.fspath(root))
    return "ledger-" + blake3.blake3(real.encode()).hexdigest()[:16]


def ledger_actor(root: str | os.PathLike[str], *, namespace: str = NAMESPACE) -> Any:
    """Get or create the detached LedgerActor that owns ``root``."""
    root = os.path.realpath(os.fspath(root))
    return (
        ray.remote(LedgerActor)
        .options(
            name=ledger_actor_name(root),
            namespace=namespace,
            lifetime="detached",
            get_if_exists=True,
            # A restart reopens the folder from disk. Calls are not retried: an append that died
            # with the actor may or may not be durable, and only the caller can decide to resend.
            max_restarts=-1,
            max_task_retries=0,
            max_concurrency=32,
            num_cpus=0,
        )
        .remote(root)
    )


def get_ledger_actor(root: str | os.PathLike[str], *, namespace: str = NAMESPACE) -> Any:
    """The existing LedgerActor for ``root`` (raises ValueError if none is running)."""
    return ray.get_actor(ledger_actor_name(root), namespace=namespace)
