"""``vak serve``'s ways into the stated state (docs/STATE.md, issue 34), in front of a scripted upstream on
loopback: an ``x-vak-pin`` header pins a statement before the request's turn (the upstream's request carries
it in its ``<work_contract>``; the same header on every request writes it once); what a user message states is
extracted at turn close; and a client withdrawing that message never unpins it; a bad header is a 400. With
``stated_pass="model"`` the upstream also reads each closed turn's user message, after the reply is out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from tests.fakes.httpserver import serve
from tests.fakes.stated_model import StatedModel
from tests.fakes.vak_server import CLIENT_KEY, running
from vak_context.engine.api import Engine
from vak_context.events.envelope import Mapper
from vak_context.events.payloads import WorkContract

SPEC = "openai-compat:scripted"


def post(base: str, messages: list[dict[str, Any]], pins: tuple[str, ...] = ()) -> httpx.Response:
    headers = [("authorization", f"Bearer {CLIENT_KEY}"), ("x-vak-session", "pinned"),
               *(("x-vak-pin", p) for p in pins)]
    return httpx.post(f"{base}/chat/completions", json={"model": "scripted", "messages": messages},
                      headers=headers, timeout=60)


def stated(ledger: Path) -> list[WorkContract]:
    with Engine.open(ledger) as engine:
        mapper = Mapper()
        return [p for e in engine.ledger().entries("pinned") if e.kind == "work_contract"
                and isinstance(p := mapper.payload_of(e), WorkContract)]


def test_a_pin_header_and_a_withdrawn_statement(tmp_path: Path) -> None:
    model, ledger = StatedModel(), tmp_path / "ledger"
    pin = ("rule: Never run migrations on prod.",)
    first = {"role": "user", "content": "Hi. The base commit is 9f3e2d1."}
    with serve(model.handle) as up, running(ledger, SPEC, up.base_url) as server:
        r1 = post(server.base_url, [first], pin)
        assert r1.status_code == 200
        answer1 = r1.json()["choices"][0]["message"]["content"]
        r2 = post(server.base_url, [first, {"role": "assistant", "content": answer1},
                                    {"role": "user", "content": "go on"}], pin)
        assert r2.status_code == 200
        answer2 = r2.json()["choices"][0]["message"]["content"]
        # The client withdraws the message that stated the base commit (and the reply to it).
        r3 = post(server.base_url, [{"role": "user", "content": "go on"}, {"role": "assistant", "content": answer2},
                                    {"role": "user", "content": "and then"}], pin)
        assert r3.status_code == 200
        bad = post(server.base_url, [{"role": "user", "content": "x"}], ("rule:",))
        assert bad.status_code == 400 and "x-vak-pin" in bad.text
    items = stated(ledger)
    assert [(i.category, i.text, i.via) for i in items] == [
        ("rule", "Never run migrations on prod.", "serve"),  # the same header three times: written once
        ("fact", "The base commit is 9f3e2d1.", "directive")]
    contracts = model.contracts()
    assert "rule: Never run migrations on prod." in contracts[0] and "9f3e2d1" not in contracts[0]
    # Withdrawn, the message is still stated: the fact stays in force (carried wherever its turn is not whole).
    with Engine.open(ledger) as engine:
        reader = engine.ledger()
        assert any(e.kind == "activity" and "history.withdrawn" in e.payload.decode() for e in reader.entries("pinned"))
    assert all("rule: Never run migrations on prod." in c for c in contracts)


def test_the_model_pass_runs_after_the_reply_when_the_operator_turns_it_on(tmp_path: Path) -> None:
    said = "Hands off the vendored folder."  # a prohibition the engine's patterns do not read
    model = StatedModel(stated_answer=f'[{{"category": "rule", "text": "{said}"}}]')
    ledger = tmp_path / "ledger"
    with serve(model.handle) as up, running(ledger, SPEC, up.base_url, stated_pass="model") as server:
        r1 = post(server.base_url, [{"role": "user", "content": f"Hi. {said} Fix the parser, please."}])
        assert r1.status_code == 200
    # Shut down once the work after the reply is written: the pass's call came after the turn's request.
    assert model.order == ["turn", "stated"]
    assert [(i.category, i.text, i.via) for i in stated(ledger)] == [("rule", said, "model")]
