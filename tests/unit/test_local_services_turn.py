"""What the in-process services spare a held turn (actors/local_services.py), as the Ray services do.

* The stated items in force (docs/STATE.md): asked of the EvidenceActor once, then kept while nothing that states
  or withdraws an item is written through the services (``RayServices.stated``): a turn's close asks again for
  what its directive states, and needs no thread hand-off. Anything stating one, and the end of the hold, sends
  the next ask to the actor.
* The hold taken on the event loop where the store has the session open (``LedgerStore.hold_open``).
* The card the close wrote handed to the turn's result (``closed_card``), not looked up again.
* A tool's result stored on the loop where the turn is held and nothing waits (``append_held``): the evidence body
  and the tool result naming it in one append, as the EvidenceActor writes them; else the actor stores it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vak_context.actors.evidence import EvidenceActor
from vak_context.actors.local_services import InProcessServices
from vak_context.context.history.turns import WITHDRAWN
from vak_context.context.stated.items import StatedItem
from vak_context.events.payloads import Activity, Directive, TurnTail, WorkContract
from vak_context.storage.ledger import LedgerStore


class CountingEvidence(EvidenceActor):
    """The real actor, counting how often the services ask it for the stated items and to store a result."""

    asked = 0
    stored = 0

    def stated(self, session: str) -> tuple[StatedItem, ...]:
        self.asked += 1
        return super().stated(session)

    def store_result(self, session: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        self.stored += 1
        return super().store_result(session, *args, **kwargs)


async def test_a_held_turn_keeps_the_stated_items_until_something_states_one(tmp_path: Path) -> None:
    with LedgerStore(tmp_path / "ledger") as store:
        evidence = CountingEvidence(str(tmp_path / "ledger"), store)
        services = InProcessServices(store, "s", evidence=evidence)
        await services.hold()
        directive = (await services.append([Directive(text="keep the tests green"), TurnTail(text="now")]))[0]
        assert await services.stated() == () and evidence.asked == 1
        assert await services.stated() == () and evidence.asked == 1  # kept: nothing stating was written
        await services.append([Activity(activity="rule.note", detail={})])  # states nothing
        assert await services.stated() == () and evidence.asked == 1
        await services.append([WorkContract(text="never push to main", category="rule", key="push",
                                            turn_id=directive, via="directive")])
        texts = [item.text for item in await services.stated()]
        assert texts == ["never push to main"] and evidence.asked == 2  # asked again, and it is in force
        await services.stated()
        assert evidence.asked == 2
        await services.append([Activity(activity=WITHDRAWN, detail={"turns": [directive]})])
        await services.stated()
        assert evidence.asked == 3  # a withdrawal may drop items: asked again
        await services.release()
        await services.stated()
        await services.stated()
        assert evidence.asked == 5  # not held (a caller's loop, or between turns): asked each time
        evidence.close()


def test_hold_open_holds_only_a_session_the_store_has_open(tmp_path: Path) -> None:
    """What lets the services hold a turn on the event loop: no disk read, else False and nothing held."""
    with LedgerStore(tmp_path / "ledger") as store:
        assert not store.hold_open("s")
        store.append("s", [Directive(text="first")])
        assert store.hold_open("s")
        store.append("s", [Directive(text="second")])
        assert store.written_behind("s")  # held: written behind until a sync
        store.release("s")
        assert not store.written_behind("s")


async def test_a_turn_s_result_carries_the_card_its_close_wrote(tmp_path: Path) -> None:
    """In-process, the card the close wrote is the turn result's (no second look-up), equal to the card the
    session's index gives for it."""
    import httpx

    import vak_context
    from tests.fakes.embedder import ScriptedModel, make_tools

    model = ScriptedModel()
    tools, _calls = make_tools()
    async with httpx.AsyncClient(transport=httpx.MockTransport(model.handle)) as client:
        with vak_context.Engine.open(tmp_path / "ledger") as engine:
            async with engine.session("s", model="openai-compat:scripted", base_url="http://127.0.0.1:9/v1",
                                      http_client=client, tools=tools, window=32_000) as session:
                results = [await session.run(f"please search query-{turn:03d}") for turn in (1, 2)]
                assert [r.card for r in results] == await session.cards_async()


async def test_a_held_turn_stores_a_result_on_the_loop_as_the_actor_would(tmp_path: Path) -> None:
    body = "line one\nline two ünïcode\n" * 40
    with LedgerStore(tmp_path / "ledger") as store:
        evidence = CountingEvidence(str(tmp_path / "ledger"), store)
        services = InProcessServices(store, "s", evidence=evidence)
        await services.hold()
        await services.append([Directive(text="read the notes"), TurnTail(text="now")])
        held = await services.store_result("call_1", "read_file", body, False)
        assert evidence.stored == 0  # on the loop
        await services.release()
        alone = await services.store_result("call_2", "read_file", body, True)
        assert evidence.stored == 1  # not held: the actor stores it
        entries = store.entries("s")
        for answer in (held, alone):
            result = next(e for e in entries if e.id == answer["result_id"])
            body_entry = entries[entries.index(result) - 1]  # the body, then the result naming it, one append
            assert body_entry.kind == "evidence_body" and result.kind == "tool_result"
            assert body_entry.id in result.payload.decode()
            assert (await services.recall({"id": body_entry.id}, None))["content"] == body  # byte for byte
        assert set(held) == set(alone) and store.verify("s").ok
        evidence.close()
