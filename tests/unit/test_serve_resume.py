"""A turn resumed from the caller's history (issue 35, item 1): ``serve/resume.py`` reads the exchanges pending
at the end of a client's new items, and ``Turn.earlier_step`` records one as the new turn's first step, its
result stored as evidence (or referred to, where an earlier try stored it) and carried like any result."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

import vak_context
from tests.fakes.script_upstream import ScriptUpstream, text
from vak_context.events.envelope import Mapper
from vak_context.serve.protocol import ClientCall, ClientRequest, Item
from vak_context.serve.resume import pending_exchanges

ASK = Item("user", "Why does the spool service fail?")
C1, C2 = ClientCall("c1", "read_log", {"service": "spool"}), ClientCall("c2", "df", {})
REPLY = Item("assistant", "", (C1, C2))
R1, R2 = Item("tool", "log", call_id="c1"), Item("tool", "disk full", call_id="c2", is_error=True)


def request(*items: Item) -> ClientRequest:
    return ClientRequest("openai", "scripted", "", items, ())


def test_results_of_the_reply_the_session_holds_are_its_pending_exchange() -> None:
    before, earlier = pending_exchanges(request(ASK, REPLY, R1, R2), [R1, R2])
    assert before == [] and len(earlier) == 1
    assert earlier[0].calls == (C1, C2) and earlier[0].results == {"c1": ("log", False), "c2": ("disk full", True)}


def test_a_history_brought_whole_keeps_the_users_words_before_the_exchanges() -> None:
    again = Item("assistant", "", (ClientCall("c3", "read_log", {"service": "disk"}),))
    r3 = Item("tool", "ok", call_id="c3")
    items = (ASK, REPLY, R1, again, r3)
    before, earlier = pending_exchanges(request(*items), list(items))
    assert before == [ASK]
    assert [e.calls for e in earlier] == [(C1,), again.calls]  # c2 got no result: only what was answered


@pytest.mark.parametrize("new", [
    [Item("tool", "?", call_id="nobody")],  # no reply made that call
    [R1, R1],  # one call answered twice
    [R1, Item("assistant", "", (ClientCall("c9", "df", {}),))],  # a reply whose calls are not answered
    [ASK],  # no result at all
], ids=["unknown-call", "answered-twice", "unanswered-reply", "no-result"])
def test_a_run_that_does_not_read_as_exchanges_is_left_as_it_was(new: list[Item]) -> None:
    assert pending_exchanges(request(ASK, REPLY, *new), new) == (new, [])


async def test_earlier_step_stores_the_result_once_and_carries_it_like_any_result(tmp_path: Path) -> None:
    upstream = ScriptUpstream([text("The spool disk is full."), text("Still full.")])
    body = "\n".join(f"line {i}: worker handled request {i}" for i in range(2_000))  # about 70 KB
    call = vak_context.Call("c1", "read_log", {"service": "spool"})

    def read_log(service: str) -> str:
        """The service's log."""
        raise AssertionError("the caller runs its tools")

    async with httpx.AsyncClient(transport=httpx.MockTransport(upstream.handle)) as client:
        with vak_context.Engine.open(tmp_path / "ledger") as engine:
            async with engine.session("s", model="openai-compat:scripted", base_url="http://127.0.0.1:9/v1",
                                      api_key="k", http_client=client, tools=[read_log], window=8_192) as session:
                turn = await session.begin("Why does the spool service fail?")
                with pytest.raises(vak_context.InvalidInput, match="every call needs its result"):
                    await turn.earlier_step([call], {})
                await turn.earlier_step([call], {"c1": (body, False)})
                sent = await turn.request()
                assert sent is not None
                with pytest.raises(vak_context.InvalidInput, match="only before the turn's first request"):
                    await turn.earlier_step([call], {"c1": (body, False)})
                assert (await turn.reply(upstream.handle(_post(sent.body)).json())).done
                assert turn.result.answer == "The spool disk is full."
                ledger = engine.ledger()
                evidence = [e.id for e in ledger.entries("s") if e.kind == "evidence_body"]
                # A retry of the same exchange: the stored result is referred to, not stored again.
                again = await session.begin("(continuing) Why does the spool service fail?")
                await again.earlier_step([call], {"c1": (body, False)}, stored={"c1": evidence[0]})
                second = await again.request()
                assert second is not None
                await again.reply(upstream.handle(_post(second.body)).json())
                entries = ledger.entries("s")
    assert len(evidence) == 1 and [e.id for e in entries if e.kind == "evidence_body"] == evidence
    mapper = Mapper()
    results = [mapper.payload_of(e) for e in entries if e.kind == "tool_result"]
    assert [(r.tool_use_id, r.evidence_id, r.windowed) for r in results] == [("c1", evidence[0], True)] * 2
    for sent_body in upstream.requests:
        tool_messages = [m for m in sent_body["messages"] if m["role"] == "tool"]
        assert tool_messages and all(len(m["content"]) < len(body) for m in tool_messages)
        users = [m for m in sent_body["messages"] if m["role"] == "user"]
        assert "line 1500:" not in json.dumps(users)  # nothing quoted into the directive


def _post(body: dict[str, Any]) -> httpx.Request:
    return httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions", json=body)
