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
