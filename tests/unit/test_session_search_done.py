"""Issue 25's first done-when, through ``session_search`` itself: for each recorded session of
``../shared/data/trajectories/`` and for generated sessions (as they are, behind a packet, behind a
reset), ten rare terms picked mechanically (idf in the top decile, in tool results of the first quarter
of the turns, in no card, packet or handoff) are searched with the engine's tool over the session's
writer; for at least 9 of 10 the result lists the term's evidence in its top 5, and the recall call it
names, answered by the engine's recall (the EvidenceActor), returns the exact text holding the term."""

from __future__ import annotations

from pathlib import Path

from tests.fakes.imported import Imported
from tests.fakes.planning import prepare
from tests.fakes.rare_terms import exact_text, rare_terms, recorded_sessions
from vak_context.actors.local_services import InProcessServices
from vak_context.agent.tools import EngineCall, ToolRegistry, engine_tools, surface_for
from vak_context.agent.tools.sessionsearch import recall_calls
from vak_context.bm25 import terms
from vak_context.context.capacity.profile import CapacityProfile, Ewma, Horizon, ProfileKey
from vak_context.context.history.packets import compaction_payload
from vak_context.context.planner.plan import Plan
from vak_context.context.planner.records import Fidelity
from vak_context.context.planner.view import SessionView
from vak_context.events.payloads import ResetWithHandoff
from vak_context.sessions.generator import generate_session
from vak_context.storage.ledger import LedgerStore


async def _found(store: LedgerStore, session: str, picked: list[tuple[str, str]]) -> int:
    """How many of ``picked`` session_search lists in its top 5 with a recall that returns the exact text."""
    services = InProcessServices(store, session)
    tool = engine_tools().get("session_search")
    assert tool is not None
    registry = ToolRegistry()
    found = 0
    for term, eid in picked:
        text, is_error = await tool.answer(EngineCall({"query": term}, "t", services, surface_for(registry), registry))
        assert not is_error, text
        calls = recall_calls(text)
        assert len(calls) <= 5
        args = next((a for a in calls if a.get("id") == eid[:12]), None)
        if args is None:
            continue
        recalled = services.evidence.recall(session, args)  # the engine's recall, not stored
        want = exact_text(store, eid, args)
        found += (not recalled["is_error"] and recalled["content"] == want and term in terms(recalled["content"]))
    return found


async def test_rare_terms_of_each_recorded_session_are_found_by_session_search(imported: Imported) -> None:
    total = 0
    for session in recorded_sessions(imported):
        picked = rare_terms(imported.store, session)
        total += len(picked)
        found = await _found(imported.store, session, picked)
        print(f"session_search {session}: {found}/{len(picked)} rare terms in the top 5, recalled exactly")
        assert found >= len(picked) - 1, (session, picked, found)  # at least 9 of 10
    assert total >= 40, total


def _profile(name: str, horizon: int) -> CapacityProfile:
    return CapacityProfile(ProfileKey("local", name), 8_192, Horizon(horizon, 0.9, 0.0), Ewma(0.25, 5), 256)


PACKED = _profile("packed", 2_200)  # a summary packet over the early turns of a 12-turn session
DEAD = _profile("dead", 0)  # followed the instruction at no size: a rescue's reset-with-handoff


async def _plan(store: LedgerStore, session: str, profile: CapacityProfile) -> Plan:
    """Plan the next turn as the PlannerActor does, writing the packet or the reset the plan needs."""
    view = SessionView()
    for entry in store.entries(session):
        view.add(entry)

    async def summarise(v: SessionView, p: Plan) -> list[str]:
        assert p.packet is not None
        packet = compaction_payload(v.index, p.packet.first_ordinal, p.packet.last_ordinal,
                                    "Earlier turns looked at the repository's docs.", model=p.model)
        ids = store.append(session, [packet])
        view.add(store.get(ids[0]))
        return ids

    prep = await prepare(view, profile, "And what did we find first?", ledger=store, session=session,
                         summarise=summarise, model=profile.key.model, system="You are an agent.")
    return prep.plan


async def test_rare_terms_of_generated_sessions_are_found_as_they_are_behind_a_packet_and_behind_a_reset(
        tmp_path: Path) -> None:
    for seed in (11, 3):  # seed 5's first quarter holds no term that qualifies
        session = f"g{seed}"
        with LedgerStore(tmp_path / "ledger") as store:
            generate_session(seed=seed, turns=12, append=lambda p, b, s=session: store.append(s, [p], blobs=[b])[0])
            picked = rare_terms(store, session)
            assert len(picked) >= 8, picked
            found = await _found(store, session, picked)
            print(f"session_search {session} as written: {found}/{len(picked)}")
            assert found >= len(picked) - 1, (seed, "as written")

            packed = await _plan(store, session, PACKED)
            assert packed.packet is not None
            quarter = 12 // 4  # the generator's session opens behind its own reset (turn 1); the packet follows
            hidden = (Fidelity.PACKET, Fidelity.BEHIND_RESET)
            assert all(packed.fidelity(t) in hidden for t in range(1, quarter + 1))
            assert packed.fidelity(quarter) == Fidelity.PACKET
            picked = rare_terms(store, session)  # the packet's text now counts as shown
            found = await _found(store, session, picked)
            print(f"session_search {session} behind a packet: {found}/{len(picked)}")
            assert found >= len(picked) - 1, (seed, "behind a packet")

            reset = await _plan(store, session, DEAD)
            assert any(isinstance(store.payload(e.id), ResetWithHandoff) for e in store.entries(session)
                       if e.kind == "reset_handoff")
            assert all(t.fidelity == Fidelity.BEHIND_RESET for t in reset.turns if t.ordinal <= 12)
            picked = rare_terms(store, session)
            found = await _found(store, session, picked)
            print(f"session_search {session} behind a reset: {found}/{len(picked)}")
            assert found >= len(picked) - 1, (seed, "behind a reset")
