"""Ray's errors, translated where the project waits on its actors (one map, one context manager).

Wherever the project calls ``ray.get`` on (or awaits) one of its actors, it does so inside
``map_ray_errors(what)``: an actor's own typed error (a ``VakError`` it raised, which Ray wraps in
a ``RayTaskError``) reaches the caller as that error, exactly as in-process; every other Ray error
becomes ``ActorError``, saying which call failed and what to do next. So callers catch the
project's errors only, never Ray's.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ray.exceptions import (
    GetTimeoutError,
    ObjectLostError,
    RayActorError,
    RayError,
    RayTaskError,
    TaskCancelledError,
)

from vak_context.errors import ActorError, VakError

# The most specific first: (Ray's error, what it means, what to do).
_RAY_ERRORS: tuple[tuple[type[RayError], str, str], ...] = (
    (RayActorError, "the actor died or cannot be reached",
     "it restarts by itself (max_restarts=-1): retry the call, and check `ray status` and the actor's log "
     "if it keeps failing (acknowledged ledger entries are on disk)"),
    (GetTimeoutError, "the actor did not answer in time",
     "retry with a longer timeout, or check `ray status` for a busy or lost node"),
    (ObjectLostError, "the call's result was lost with its node", "retry the call"),
    (TaskCancelledError, "the call was cancelled", "retry the call if it is still wanted"),
    (RayTaskError, "the actor raised an error it does not document",
     "read the actor's log (`ray logs`) for the traceback; this is a bug in the actor"),
)


@contextmanager
def map_ray_errors(what: str) -> Iterator[None]:
    """Translate Ray's errors raised inside the block: ``what`` names the call (``"ledger append"``)."""
    try:
        yield
    except RayError as exc:
        cause = getattr(exc, "cause", None)
        if isinstance(exc, RayTaskError) and isinstance(cause, VakError):
            raise cause from exc  # the actor's own typed error: the caller handles it as in-process
        raise as_actor_error(what, exc) from exc


def as_actor_error(what: str, exc: RayError) -> ActorError:
    """The ``ActorError`` for a Ray error from the call ``what``."""
    meaning, todo = next(((m, t) for kind, m, t in _RAY_ERRORS if isinstance(exc, kind)),
                         ("Ray failed", "check `ray status` and the Ray logs, then retry the call"))
    first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return ActorError(f"the {what} call failed: {meaning} ({type(exc).__name__}: {first_line}); {todo}")
