"""The one place ``ray.remote`` is applied. Actor classes stay plain and testable without Ray.

Actors are named and detached in the ``vak`` namespace, so a job, a notebook and another actor
reach the same one with ``get_if_exists``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import blake3
import ray

from vak_context.actors.ledger.actor import LedgerActor
from vak_context.context.capacity.tokens import PRIOR_TOKENS_PER_CHAR
from vak_context.errors import ActorError

NAMESPACE = "vak"
LEDGER_THREADS = 64  # concurrent calls a LedgerActor runs; each waiting append holds one thread


def remote_class(cls: type) -> Any:
    """``ray.remote(cls)``, for actors of layers above this one (the farm's model servers and progress
    actor): their classes stay plain and testable without Ray, and Ray is applied here alone."""
    return ray.remote(cls)


def remote_function(fn: Callable[..., Any]) -> Any:
    """``ray.remote(fn)``: a Ray task of a layer above this one (the farm's units)."""
    return ray.remote(fn)


def _detached(cls: type, name: str, namespace: str, **options: Any) -> Any:
    """``ray.remote(cls)`` as a named, detached, restartable actor, got if it already exists.

    Every actor here keeps its state on disk (the ledger, the card index), so a restart rereads it
    (``max_restarts=-1``). Calls are never retried (``max_task_retries=0``): an append that died with
    the actor may or may not be durable, and only the caller can decide to resend. ``num_cpus=0``:
    they wait on disks and model servers, not on a core.
    """
    return ray.remote(cls).options(
        name=name, namespace=namespace, lifetime="detached", get_if_exists=True,
        max_restarts=-1, max_task_retries=0, num_cpus=0, **options,
    )


def _folder_key(root: str | os.PathLike[str]) -> str:
    """Each ledger folder's actors are named after its resolved path: one of each per folder."""
    real = os.path.realpath(os.fspath(root))
    return blake3.blake3(real.encode()).hexdigest()[:16]


def _writer(root: str, ledger: Any, namespace: str) -> Any:
    """The folder's LedgerActor handle: the one given, else the one that owns ``root`` (got or created)."""
    return ledger if ledger is not None else ledger_actor(root, namespace=namespace)


def ledger_actor_name(root: str | os.PathLike[str]) -> str:
    """One LedgerActor per ledger folder, named after the folder's resolved path."""
    return "ledger-" + _folder_key(root)


def ledger_actor(root: str | os.PathLike[str], *, namespace: str = NAMESPACE) -> Any:
    """Get or create the detached LedgerActor that owns ``root``."""
    root = os.path.realpath(os.fspath(root))
    # A threaded actor: concurrent calls run in its threads, and appends share group commits.
    return _detached(LedgerActor, ledger_actor_name(root), namespace, max_concurrency=LEDGER_THREADS).remote(root)


def get_ledger_actor(root: str | os.PathLike[str], *, namespace: str = NAMESPACE) -> Any:
    """The existing LedgerActor for ``root`` (``ActorError`` if none is running)."""
    try:
        return ray.get_actor(ledger_actor_name(root), namespace=namespace)
    except ValueError as exc:  # Ray's answer for "no actor of that name"
        raise ActorError(f"no LedgerActor is running for {root} in namespace {namespace!r}: start it with "
                         "vak_context.actors.factory.ledger_actor(root), on a Ray cluster this process is connected to") from exc


def evidence_actor_name(root: str | os.PathLike[str]) -> str:
    """One EvidenceActor per ledger folder."""
    return "evidence-" + _folder_key(root)


def evidence_actor(
    root: str | os.PathLike[str], *, ledger: Any = None, tokens_per_char: float = PRIOR_TOKENS_PER_CHAR, namespace: str = NAMESPACE
) -> Any:
    """Get or create the detached EvidenceActor for ``root``.

    ``ledger`` is the folder's LedgerActor handle (the one writer); None gets or creates it. Calls run
    one at a time: each reads the session's TurnIndex and appends after it, and the card index has one
    writer.
    """
    from vak_context.actors.evidence import EvidenceActor  # imported here: it pulls in the pure engine

    root = os.path.realpath(os.fspath(root))
    ledger = _writer(root, ledger, namespace)
    return _detached(EvidenceActor, evidence_actor_name(root), namespace).remote(root, ledger, tokens_per_char)


def probe_actor_name(root: str | os.PathLike[str]) -> str:
    """One ProbeActor per ledger folder (it writes its probes to that ledger)."""
    return "probe-" + _folder_key(root)


def probe_actor(
    root: str | os.PathLike[str], *, session: str = "capacity", config: Any = None, namespace: str = NAMESPACE
) -> Any:
    """Get or create the detached ProbeActor that writes probes to the ledger at ``root``.

    An async actor holding no CPU: probes wait on the model server, not on this process. ``config``
    is a ``vak_context.config.VakConfig``; None loads the operator's file inside the actor.
    """
    from vak_context.actors.probe import (
        ProbeActor,  # imported here: it pulls in the providers and the probe runner
    )

    root = os.path.realpath(os.fspath(root))
    # A restart loses only in-flight probes; profiles are reread from the ledger.
    return _detached(ProbeActor, probe_actor_name(root), namespace, max_concurrency=64).remote(
        ledger_actor(root, namespace=namespace), session=session, config=config
    )


def planner_actor_name(root: str | os.PathLike[str]) -> str:
    """One PlannerActor per ledger folder."""
    return "planner-" + _folder_key(root)


def planner_actor(
    root: str | os.PathLike[str], *, ledger: Any = None, tokens_per_char: float = PRIOR_TOKENS_PER_CHAR, namespace: str = NAMESPACE
) -> Any:
    """Get or create the detached PlannerActor for ``root``.

    ``ledger`` is the folder's LedgerActor handle (the one writer); None gets or creates it. An async actor
    (``plan_step`` awaits the summariser): its sync calls run one at a time on its event loop, and a
    session's step plans one at a time (a lock per session).
    """
    from vak_context.actors.planner import PlannerActor  # imported here: it pulls in the pure engine

    root = os.path.realpath(os.fspath(root))
    ledger = _writer(root, ledger, namespace)
    return _detached(PlannerActor, planner_actor_name(root), namespace).remote(root, ledger, tokens_per_char)


def assembler_actor_name(root: str | os.PathLike[str]) -> str:
    """One AssemblerActor per ledger folder."""
    return "assembler-" + _folder_key(root)


def assembler_actor(
    root: str | os.PathLike[str], *, ledger: Any = None, tokens_per_char: float = PRIOR_TOKENS_PER_CHAR, namespace: str = NAMESPACE
) -> Any:
    """Get or create the detached AssemblerActor for ``root`` (an async actor: ``assemble`` awaits the
    PlannerActor and the model's counter). ``ledger`` is the folder's LedgerActor handle (None: get or
    create it); its plans come from the folder's PlannerActor (got or created here)."""
    from vak_context.actors.assembler import AssemblerActor  # imported here: it pulls in the pure engine

    root = os.path.realpath(os.fspath(root))
    ledger = _writer(root, ledger, namespace)
    planner = planner_actor(root, ledger=ledger, tokens_per_char=tokens_per_char, namespace=namespace)
    return _detached(AssemblerActor, assembler_actor_name(root), namespace).remote(
        root, ledger, None, tokens_per_char, planner=planner
    )


def session_leases_name(root: str | os.PathLike[str]) -> str:
    """One SessionLeases per ledger folder: every `vak serve` worker of the folder asks the same one."""
    return "leases-" + _folder_key(root)


def session_leases(root: str | os.PathLike[str], *, namespace: str = NAMESPACE) -> Any:
    """Get or create the detached SessionLeases actor of ``root`` (``vak_context.actors.leases``): an async
    actor (a waiting lease is a suspended coroutine), holding no CPU."""
    from vak_context.actors.leases import SessionLeases

    return _detached(SessionLeases, session_leases_name(os.path.realpath(os.fspath(root))), namespace,
                     max_concurrency=1000).remote()
