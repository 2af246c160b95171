"""The session leases of ``vak serve --workers`` (actors/leases.py), as a plain class on one event loop: one
worker at a time per session, the next one waiting; whether the session moved; a session whose turn a worker
holds open is forwarded to it; a dead worker's leases are dropped; a late release is ignored."""

from __future__ import annotations

import asyncio

from vak_context.actors import leases as leases_module
from vak_context.actors.leases import SessionLeases


def test_a_session_is_leased_to_one_worker_at_a_time() -> None:
    async def scenario() -> None:
        leases = SessionLeases()
        token, previous, elsewhere = await leases.acquire("s", "A")
        assert (previous, elsewhere) == (None, None)
        waiting = asyncio.create_task(leases.acquire("s", "B"))
        other = await leases.acquire("t", "B")  # another session is not held up
        assert other[2] is None
        await asyncio.sleep(0)
        assert not waiting.done()
        leases.release("s", token)
        token_b, previous_b, _ = await waiting
        assert previous_b == "A"  # B holds stale state of "s", if any: it moved
        leases.release("s", token_b)
        again = await leases.acquire("s", "B")
        assert again[1] == "B"  # did not move
        stats = leases.report()
        assert (stats.granted, stats.moved, stats.waited) == (4, 1, 1)

    asyncio.run(scenario())


def test_an_open_turn_keeps_its_session_with_its_worker() -> None:
    async def scenario() -> None:
        leases = SessionLeases()
        token, _, _ = await leases.acquire("s", "A")
        waiting = asyncio.create_task(leases.acquire("s", "B"))
        await asyncio.sleep(0)
        leases.release("s", token, open_at="http://127.0.0.1:9")  # the reply handed the client calls
        assert await waiting == (0, None, "http://127.0.0.1:9")  # B forwards it, no lease
        token, previous, elsewhere = await leases.acquire("s", "B", forwarded=True)  # came forwarded: served
        assert elsewhere is None and previous == "A"
        leases.release("s", token)  # closed the turn
        token, _, elsewhere = await leases.acquire("s", "A")
        assert elsewhere is None
        assert leases.report().forwarded == 1

    asyncio.run(scenario())


def test_a_dead_workers_leases_are_dropped_and_a_silent_ones_expire() -> None:
    async def scenario() -> None:
        leases = SessionLeases()
        await leases.acquire("s", "A")
        token, _, _ = await leases.acquire("t", "A")
        leases.release("t", token, open_at="http://127.0.0.1:9")
        waiting = asyncio.create_task(leases.acquire("s", "B"))
        await asyncio.sleep(0)
        assert leases.drop("A") == 1
        assert (await waiting)[2] is None
        assert (await leases.acquire("t", "B"))[2] is None  # its open turn went with it
        # A silent worker: its lease is taken by the next that waits.
        await leases.acquire("u", "C")
        leases._seen["C"] -= leases_module.EXPIRE_S + 1
        assert (await leases.acquire("u", "B"))[1] == "C"
        assert leases.report().expired == 1

    asyncio.run(scenario())


def test_a_late_release_of_a_lease_taken_again_is_ignored() -> None:
    async def scenario() -> None:
        leases = SessionLeases()
        first, _, _ = await leases.acquire("s", "A")
        second, previous, _ = await leases.acquire("s", "A")  # A's release of the first is still on its way
        assert previous == "A" and second != first
        leases.release("s", first)
        waiting = asyncio.create_task(leases.acquire("s", "B"))
        await asyncio.sleep(0)
        assert not waiting.done()  # still A's
        leases.release("s", second)
        assert (await waiting)[1] == "A"

    asyncio.run(scenario())
