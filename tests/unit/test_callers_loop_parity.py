"""One implementation, two drivers: the engine's loop (``session.run``) and the caller's loop
(``session.begin``), scripted with the same replies, write the same ledger kinds in the same order and send
the same request bytes (an over-length 400, find_tools, two calls in one step and a recall included). And
the caller's loop refuses misuse with an InvalidInput that says what to do; a non-overflow error status
closes the turn failed and raises the adapter's typed error; an unfinished turn closed is ``cancelled``."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

import vak_context
from tests.fakes.embedder import make_tools
from tests.fakes.provider_bodies.wire import body as documented
from tests.fakes.scripted import payloads_of
from tests.fakes.wire_models import FORMATS, WireModel
from vak_context.storage.ledger import LedgerStore

KEY = "sk-test-parity-0123456789abcdef"
# The over-length 400 comes once the request is near the budget (a rejection of a small request leaves no
# room for the turn: the engine then closes it failed, which both drivers would record alike too).
DIRECTIVES = ["please search query-001", "please run make check-2", "please find tools that run a shell command",
              "please search query-004 and run make both-4",
              *(f"please search query-{n:03d}" for n in range(5, 12)),
              "a long one: please run make check-12", "recall turn 1's search result in full"]
NOW = 1_764_504_000.0  # one clock for both runs: the tail carries the time


async def _session(engine: vak_context.Engine, client: httpx.AsyncClient) -> vak_context.Session:
    functions, _ = make_tools()
    session = await engine.session("s", model="openai:gpt-4o-mini", api_key=KEY, http_client=client,
                                   tools=functions, window=8_000).start()
    session._loop.clock = lambda: NOW  # type: ignore[union-attr]
    return session


async def _engine_run(folder: Path) -> tuple[list[bytes], list[str]]:
    model = WireModel(FORMATS["openai"])
    async with httpx.AsyncClient(transport=httpx.MockTransport(model.handle)) as client:
        with vak_context.Engine.open(folder) as engine:
            session = await _session(engine, client)
            for text in DIRECTIVES:
                result = await session.run(text)
                assert result.outcome == "completed", (text, result.answer)
            await session.close()
    return model.sent, _kinds(folder)


async def _caller_run(folder: Path) -> tuple[list[bytes], list[str]]:
    model = WireModel(FORMATS["openai"])
    functions, _ = make_tools()
    tools = {f.__name__: f for f in functions}
    async with httpx.AsyncClient(transport=httpx.MockTransport(model.handle)) as client:
        with vak_context.Engine.open(folder) as engine:
            session = await _session(engine, client)
            for text in DIRECTIVES:
                async with session.begin(text) as turn:
                    while (request := await turn.request()) is not None:
                        sent = await client.post(request.url, json=request.body, headers=dict(request.headers))
                        action = await turn.reply(sent.json(), status=sent.status_code)
                        for call in action.calls:
                            await turn.tool_result(call.id, tools[call.name](**call.arguments))
                assert turn.result.outcome == "completed"
            await session.close()
    return model.sent, _kinds(folder)


def _ids_out(sent: bytes) -> bytes:
    """The request with its entry and evidence ids masked: they hash entries that carry their write time,
    so two runs never share them; everything else must be byte for byte the same."""
    return re.sub(rb"[0-9a-f]{12,64}", b"<id>", sent)


def _kinds(folder: Path) -> list[str]:
    with LedgerStore(folder, readonly=True) as store:
        return [e.kind for e in store.entries("s")]


async def test_both_drivers_write_the_same_ledger_and_send_the_same_bytes(tmp_path: Path) -> None:
    engine_sent, engine_kinds = await _engine_run(tmp_path / "engine")
    caller_sent, caller_kinds = await _caller_run(tmp_path / "caller")
    assert caller_kinds == engine_kinds
    assert {"plan", "receipt", "tool_result", "turn_card", "capacity_profile"} <= set(engine_kinds)
    assert len(caller_sent) == len(engine_sent) >= 2 * len(DIRECTIVES) + 1  # the over-length retry's too
    for i, (ours, theirs) in enumerate(zip(caller_sent, engine_sent, strict=True)):
        assert _ids_out(ours) == _ids_out(theirs), i


@pytest.fixture
async def session(tmp_path: Path) -> Any:
    model = WireModel(FORMATS["openai"])
    functions, _ = make_tools()
    async with httpx.AsyncClient(transport=httpx.MockTransport(model.handle)) as client:
        with vak_context.Engine.open(tmp_path / "ledger") as engine:
            async with engine.session("s", model="openai:gpt-4o-mini", api_key=KEY, http_client=client,
                                      tools=functions, window=8_000) as opened:
                opened.scripted = model  # type: ignore[attr-defined]
                yield opened


async def test_misuse_is_invalid_input_saying_what_to_do(session: vak_context.Session) -> None:
    model: WireModel = session.scripted  # type: ignore[attr-defined]
    turn = await session.begin("please search query-001")
    with pytest.raises(vak_context.InvalidInput, match="before request"):
        await turn.reply({})
    with pytest.raises(vak_context.InvalidInput, match="already running a turn"):
        await session.begin("another")
    with pytest.raises(vak_context.InvalidInput, match="already running a turn"):
        await session.run("another")
    with pytest.raises(vak_context.InvalidInput, match="still open"):
        turn.result  # noqa: B018
    request = await turn.request()
    assert request is not None and await turn.request() is request  # asked again: the same request
    action = await turn.reply(model.answer(request.body)[1])
    [call] = action.calls
    assert call.name == "web_search" and call.arguments == {"query": "query-001"} and not action.done
    with pytest.raises(vak_context.InvalidInput, match="pending"):
        await turn.request()
    with pytest.raises(vak_context.InvalidInput, match="no pending call has that id"):
        await turn.tool_result("call_nope", "x")
    await turn.tool_result(call.id, {"ok": True})
    request = await turn.request()
    assert request is not None
    final = await turn.reply(model.answer(request.body)[1])
    assert final.done and final.answer.startswith("Done:") and turn.done
    assert await turn.request() is None
    with pytest.raises(vak_context.InvalidInput, match="the turn is done"):
        await turn.tool_result(call.id, "again")
    assert turn.result.outcome == "completed" and turn.result.card.asked == "please search query-001"
    assert (await session.run("please run make check-2")).outcome == "completed"


async def test_an_error_status_closes_the_turn_failed_and_raises_the_typed_error(
        session: vak_context.Session) -> None:
    turn = await session.begin("please search query-001")
    assert await turn.request() is not None
    with pytest.raises(vak_context.ProviderRequestError, match="API key"):
        await turn.reply(documented("openai_compat", "openai_bad_key"), status=401)
    assert turn.done and turn.result.outcome == "failed"
    [card] = session.cards()
    assert card.outcome == "failed"
    # An over-length reply whose count leaves no room ends the turn failed, with no request it would refuse:
    # 9,000 tokens for this small request is a rate at which the stable prefix alone passes the 8,000-token
    # window, so the plan again says it cannot fit and nothing more is sent (at most one retry a step:
    # tests/unit/test_step_policy.py).
    turn = await session.begin("please search query-002")
    request = await turn.request()
    assert request is not None
    too_long = FORMATS["openai"].overflow(prompt=9_000, limit=8_000)  # the documented body, sized
    action = await turn.reply(json.dumps(too_long), status=400)
    assert not action.done and not action.calls  # the step policy plans again, smaller
    assert await turn.request() is None and turn.done and turn.result.outcome == "failed"
    assert "cannot fit" in turn.result.answer and "prefix" in turn.result.answer


async def test_closing_an_unfinished_turn_cancels_it_and_the_next_works(session: vak_context.Session) -> None:
    turn = await session.begin("please search query-001")
    assert await turn.request() is not None
    await turn.close()
    assert turn.done and turn.result.outcome == "cancelled"
    assert (await session.run("please search query-002")).outcome == "completed"
    assert [c.outcome for c in session.cards()] == ["cancelled", "completed"]


async def test_a_cancelled_task_inside_the_turn_closes_it_cancelled(session: vak_context.Session) -> None:
    entered = asyncio.Event()

    async def caller() -> None:
        async with session.begin("please search query-001") as turn:
            assert await turn.request() is not None
            entered.set()
            await asyncio.Event().wait()  # the caller's own await, cancelled from outside

    task = asyncio.create_task(caller())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [c.outcome for c in session.cards()] == ["cancelled"]
    assert (await session.run("please search query-002")).outcome == "completed"


async def test_a_text_answer_naming_a_call_is_the_answer_in_the_callers_loop(session: vak_context.Session) -> None:
    """A model with native calls (nothing declares or measured it writing calls as text) answers in text that
    names one of the embedder's tools: the turn is done with that text as its answer, no call handed back."""
    text = 'Search it yourself with web_search({"query": "query-001"}); I have not run it.'
    assert session.calls == "native"
    turn = await session.begin("how would I search for query-001?")
    assert await turn.request() is not None
    action = await turn.reply({"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-4o-mini",
                               "choices": [{"index": 0, "finish_reason": "stop",
                                            "message": {"role": "assistant", "content": text}}],
                               "usage": {"prompt_tokens": 90, "completion_tokens": 20, "total_tokens": 110}})
    assert action.done and not action.calls and action.answer == text
    assert (turn.result.outcome, turn.result.answer) == ("completed", text)



UNOFFERED = '```json\n{"name": "lookup_value", "arguments": {"key": "k1"}}\n```'  # a tool nobody offered
REPLY = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-4o-mini",
         "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": UNOFFERED}}],
         "usage": {"prompt_tokens": 90, "completion_tokens": 20, "total_tokens": 110}}


async def _unoffered(folder: Path, drive: Callable[[vak_context.Session], Awaitable[None]]) -> tuple[int, Any]:
    """A model declared to write its calls as text answers every request with a fenced call of a tool
    neither the embedder nor the engine offers; ``drive(session)`` runs one turn. (Model calls, the ledger.)"""
    sent: list[bytes] = []

    def handle(request: httpx.Request) -> httpx.Response:
        sent.append(request.content)
        return httpx.Response(200, json=REPLY)

    functions, _ = make_tools()
    async with httpx.AsyncClient(transport=httpx.MockTransport(handle)) as client:
        with vak_context.Engine.open(folder) as engine:
            async with engine.session("s", model="openai:gpt-4o-mini", api_key=KEY, http_client=client,
                                      tools=functions, window=8_000, calls="text", max_steps=3) as session:
                await drive(session)
    return len(sent), LedgerStore(folder, readonly=True)


async def test_a_text_call_of_a_tool_nobody_offered_is_the_answer_in_the_callers_loop(tmp_path: Path) -> None:
    """Where the engine is not the agent (issue 33): the reply's text reaches the caller whole as the answer,
    with no step the engine answered itself (no "no tool named" result), and a ``turn.unoffered_call``
    activity names the tool for the operator."""
    async def drive(session: vak_context.Session) -> None:
        async with session.begin("read the value of k1") as turn:
            assert await turn.request() is not None
            action = await turn.reply(REPLY)
            assert action.done and not action.calls and action.answer == UNOFFERED
        assert (turn.result.outcome, turn.result.answer) == ("completed", UNOFFERED)

    _, ledger = await _unoffered(tmp_path / "ledger", drive)
    with ledger as store:
        assert payloads_of(store, "tool_result", "s") == [] and len(payloads_of(store, "assistant_step", "s")) == 1
        noted = [a for a in payloads_of(store, "activity", "s") if a.activity == "turn.unoffered_call"]
    assert [a.detail["tools"] for a in noted] == [["lookup_value"]]


async def test_the_engines_loop_answers_a_tool_nobody_offered_and_ends_on_the_models_last_words(
        tmp_path: Path) -> None:
    """The engine is the agent in ``session.run``: it answers each call "no tool named" so the model may
    correct itself; a model that never does spends the turn's steps, and the turn ends ``degraded`` with
    the model's last text as its answer, never an empty one."""
    async def drive(session: vak_context.Session) -> None:
        result = await session.run("read the value of k1")
        assert (result.outcome, result.answer) == ("degraded", UNOFFERED)

    calls, ledger = await _unoffered(tmp_path / "ledger", drive)
    with ledger as store:
        results = payloads_of(store, "tool_result", "s")
    assert calls == 3  # max_steps
    assert len(results) == 3 and all(r.is_error and "no tool named 'lookup_value'" in r.content for r in results)
