"""The LedgerActor as it was before it became a threaded actor, kept so the benches measure both side
by side (docs/PERFORMANCE.md, "The actor path"): an async actor whose ``append_batch`` is a coroutine
on the actor's event loop that hands its group to the store's committer thread and waits to be woken.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

from vak_context.storage.contract import Payload
from vak_context.storage.ledger import LedgerStore


class AsyncLedgerActor:
    """The calls the benches make, as the async LedgerActor made them."""

    def __init__(self, root: str) -> None:
        self.store = LedgerStore(root)

    async def append_batch(
        self, session: str, requests: list[tuple[list[Payload], list[bytes | None] | None]],
    ) -> list[list[str] | BaseException]:
        return await self.store.append_many_async(session, requests)

    async def head(self, session: str) -> str | None:
        return await asyncio.to_thread(self.store.head, session)

    async def sessions(self) -> list[str]:
        return self.store.sessions()

    async def pid(self) -> int:
        return os.getpid()


def async_ledger_actor(root: str | os.PathLike[str]) -> Any:
    """Start an AsyncLedgerActor on the connected Ray, declared as the LedgerActor was (async, 256 calls)."""
    from ray import cloudpickle

    from vak_context.actors.factory import remote_class

    # Sent by value: a worker need not find the bench folder on its path.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    return remote_class(AsyncLedgerActor).options(max_concurrency=256, num_cpus=0).remote(os.fspath(root))
