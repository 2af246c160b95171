"""A compaction named by its range (``covered_evidence`` null, as the engine writes it): every reader derives the
evidence ids a listed one names, its bytes do not grow with the range, and a listed entry is read as it lists.

The engine's packet writer (``write_packet``) writes it so; a listed entry (older ledgers, importers, the session
generator) is read as before, its own list standing even where the range holds other bodies.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path

import httpx
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fakes.sessions import SessionBuilder, body_for, build_session, ledger_session
from vak_context.agent.summarise import Summariser, write_packet
from vak_context.context.capacity.profile import CapacityProfile, Ewma, Horizon, ProfileKey
from vak_context.context.history.packets import compaction_payload, render_stored
from vak_context.context.history.turns import TurnIndex
from vak_context.context.planner.plan import PacketPlan
from vak_context.events.envelope import Mapper
from vak_context.events.payloads import Compaction, CoveredEvidence
from vak_context.providers.openai_compat import OpenAICompatProvider
from vak_context.storage.ledger import LedgerStore


def _both(turns: int, tools: int, first: int, last: int, open_last: bool = False) -> tuple[SessionBuilder, ...]:
    """Two copies of one session, one given a listed packet over ``first..last`` and one a packet by range."""
    out = []
    for listed in (True, False):
        b = build_session(turns, tools_per_turn=tools)
        if open_last:  # a packet may cover the open turn's steps so far (``through_step``)
            b.turn("and the rest?", [("bash", {"cmd": "ls"}, body_for("bash", 99), False)], close=False)
        b.add(compaction_payload(b.view.index, first, last, "They asked about copper.", model="m", listed=listed))
        out.append(b)
    return tuple(out)


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 12), st.integers(0, 3), st.data())
def test_a_packet_by_range_reads_as_the_listed_one(turns: int, tools: int, data: st.DataObject) -> None:
    """For any range (with or without bodies, up to the open turn): the same ids, the same rendering, the same
    index dump but for the entry ids."""
    open_last = data.draw(st.booleans())
    n = turns + open_last
    first = data.draw(st.integers(1, n))
    last = data.draw(st.integers(first, n))
    listed, ranged = _both(turns, tools, first, last, open_last)
    a, b = listed.view.index.summaries[-1], ranged.view.index.summaries[-1]
    assert b.covered_evidence == a.covered_evidence
    assert list(b.covered_evidence) == [e for o in range(first, last + 1) for e in ranged.view.index.turn(o).evidence]
    assert (b.first_ordinal, b.last_ordinal, b.through_step) == (a.first_ordinal, a.last_ordinal, a.through_step)
    for brief in (False, True):
        assert render_stored(ranged.view.index, b, brief=brief) == render_stored(listed.view.index, a, brief=brief)


def test_its_bytes_do_not_grow_with_the_range_and_say_null() -> None:
    b = build_session(40, tools_per_turn=3)
    sizes = {}
    for last in (4, 20, 40):
        listed = Mapper().encode_payload(compaction_payload(b.view.index, 1, last, "s", model="m"))[1]
        ranged = Mapper().encode_payload(compaction_payload(b.view.index, 1, last, "s", model="m", listed=False))[1]
        assert json.loads(ranged)["covered_evidence"] is None
        assert len(json.loads(listed)["covered_evidence"]) == 3 * last
        sizes[last] = (len(listed), len(ranged))
    assert sizes[40][0] > 9 * sizes[4][0] // 2  # listed: a line per body
    assert sizes[40][1] == sizes[20][1] == sizes[4][1]  # by range: the same bytes (ids are fixed-length)


def test_a_listed_entry_keeps_its_own_list() -> None:
    """An entry that lists (an importer's, an older engine's) is read as it lists, never derived: an empty list
    stays empty though its range holds bodies."""
    b = build_session(6, tools_per_turn=2)
    index = b.view.index
    b.add(Compaction(first_turn_id=index.turn(1).id, last_turn_id=index.turn(3).id, summary="s", model="m"))
    one = CoveredEvidence(id=index.turn(2).evidence[0], description="read")
    b.add(Compaction(first_turn_id=index.turn(1).id, last_turn_id=index.turn(4).id, summary="s", model="m",
                     covered_evidence=(one,)))
    empty, named = b.view.index.summaries[-2:]
    assert empty.covered_evidence == () and named.covered_evidence == (one.id,)


def test_the_engine_writes_packets_by_range_and_a_rebuild_reads_them_alike(tmp_path: Path) -> None:
    """``write_packet`` (the PlannerActor's, ``vak serve``'s and the caller's loop's) stores the range; the index
    kept as it wrote and one rebuilt from the ledger's chain are the same."""
    store, view = ledger_session(tmp_path / "ledger", 10)
    prof = CapacityProfile(ProfileKey("local", "small"), 100_000, Horizon(100_000, 0.9, 0.0), Ewma(0.25, 1), 256)
    plan = view.plan(prof, "next question", prefix_tokens=0, tail_tokens=0)
    index = view.index
    pk = PacketPlan(1, 8, index.turn(1).id, index.turn(8).id, "summary", 500, 500, 120, None, None)
    async def write() -> list[str]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(lambda r: httpx.Response(500))) as client:
            summariser = Summariser(OpenAICompatProvider(client, base_url="http://127.0.0.1:9/v1"), "m",
                                    window_tokens=8192, enabled=False)
            return await write_packet(store, "s", view, replace(plan, packet=pk), summariser)

    ids = asyncio.run(write())
    packet = store.payload(ids[1])
    assert isinstance(packet, Compaction) and packet.covered_evidence is None
    assert b'"covered_evidence":null' in store.get(ids[1]).payload
    rebuilt = TurnIndex.build(store.chain_to_root(store.head("s") or ""), 0.25)
    assert rebuilt.dump() == view.index.dump()
    assert rebuilt.summaries[-1].covered_evidence == tuple(e for o in range(1, 9) for e in rebuilt.turn(o).evidence)
    assert len(rebuilt.summaries[-1].covered_evidence) == 8
    store.close()
    with LedgerStore(tmp_path / "ledger", readonly=True) as again:  # and after a reopen
        assert TurnIndex.build(again.chain_to_root(again.head("s") or ""), 0.25).dump() == view.index.dump()

