"""``Turn.note``: a driver's own activity appended through the open turn (``vak serve`` notes each client
request that way while a turn waits for the client's calls), in order with the turn's entries; refused once
the turn is done, when the ledger takes appends directly again."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

import vak_context
from tests.fakes.embedder import make_tools
from tests.fakes.wire_models import FORMATS, WireModel
from vak_context.errors import InvalidInput
from vak_context.events.envelope import Mapper


async def test_a_note_goes_into_the_open_turn_in_order_and_not_after_it(tmp_path: Path) -> None:
    model = WireModel(FORMATS["openai"])
    functions, _ran = make_tools()
    async with httpx.AsyncClient(transport=httpx.MockTransport(model.handle)) as client:
        with vak_context.Engine.open(tmp_path / "ledger") as engine:
            async with engine.session("s", model="openai:gpt-4o-mini", api_key="sk-test", http_client=client,
                                      tools=functions, window=9_500) as session:
                turn = await session.begin("search alpha")
                request = await turn.request()
                assert request is not None
                status, body = model.answer(request.body)
                action = await turn.reply(body, status)
                assert action.calls  # the turn waits for the call's result
                noted = await turn.note("driver.noted", {"calls": [c.id for c in action.calls], "n": 1})
                for call in action.calls:
                    await turn.tool_result(call.id, "alpha: 3 hits")
                while (request := await turn.request()) is not None:
                    status, body = model.answer(request.body)
                    await turn.reply(body, status)
                assert turn.done
                with pytest.raises(InvalidInput, match="the turn is done"):
                    await turn.note("driver.noted", {})
            ledger = engine.ledger()
            entries = ledger.entries("s")
    kinds = [e.kind for e in entries]
    at = [e.id for e in entries].index(noted)
    assert kinds[at] == "activity" and kinds.index("assistant_step") < at < kinds.index("tool_result")
    assert kinds[-1] == "turn_card" and sum(1 for e in entries if e.id == noted) == 1
    payload = Mapper().payload_of(entries[at])
    assert payload.activity == "driver.noted" and payload.detail == {"calls": [c.id for c in action.calls], "n": 1}
