"""Small budgets spend well (issue 34 item 3): the tail's fixed cost, a rescue's size, packets at a small budget.

Sessions are written to a real on-disk ledger (``LedgerStore``) and planned through ``prepare()``, as the agent
does; no summariser is wired where none is needed (a plain function that fails the test if called)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

import vak_context
from tests.fakes.planning import prepare
from tests.fakes.sessions import ledger_session, profile
from vak_context.context.capacity.profile import request_budget
from vak_context.context.history.packets import (
    EXTRACT_ASKED_CHARS,
    extract_line,
    extract_summary,
)
from vak_context.context.planner.plan import Plan
from vak_context.context.planner.view import SessionView
from vak_context.context.request.assemble import Tail, render_tail, request_tokens
from vak_context.context.rules import drift
from vak_context.events.payloads import ResetWithHandoff

SYSTEM = "You are an agent. " * 20  # 360 characters: a 90-token prefix at 0.25 tokens per char


async def _no_summary(view: SessionView, p: Plan) -> list[str]:
    raise AssertionError("this plan needs no summary")


def test_a_utc_tail_states_the_time_once() -> None:
    utc = render_tail(Tail(now=1_764_590_400.0, timezone="UTC", stance=""))
    assert utc == "<turn_context>UTC 2025-12-01T12:00:00Z</turn_context>\n"
    paris = render_tail(Tail(now=1_764_590_400.0, timezone="Europe/Paris", stance=""))
    assert "; local 2025-12-01 13:00 Europe/Paris (UTC+0100)" in paris


def test_each_paused_directive_in_the_tail_is_bounded() -> None:
    pasted = "Refactor the parser module: " + "split the tokenizer, the grammar and the error recovery " * 40
    prior = [drift.PriorTurn(pasted), drift.PriorTurn("Then rename the parser tests.")]
    paused = drift.paused_directives("What is the capital of France?", prior)
    assert len(paused) == 2 and paused[1] == "Then rename the parser tests."
    assert len(paused[0]) <= drift.PAUSED_CHARS and paused[0].endswith("…")
    assert pasted.startswith(paused[0][:-1])  # cut at a word, never mid-word
    tail = render_tail(Tail(now=0.0, paused=paused))
    assert len(tail) < 600


@pytest.mark.parametrize("horizon", [140, 160, 180])
async def test_a_rescue_never_makes_the_request_larger_than_the_budget_it_replaces(tmp_path: Path,
                                                                                   horizon: int) -> None:
    """At a budget that cannot even point at 40 earlier turns, the rescue's reset carries a handoff that fits
    the room the request had: the request after it is within the budget (it was once larger, and every later
    turn failed), names the turns behind it and the recall that returns them."""
    store, view = ledger_session(tmp_path / "ledger", 40)
    prof = profile(horizon, out=16)
    prep = await prepare(view, prof, "And what about the copper price?", ledger=store, session="s",
                         summarise=_no_summary, model="m", system=SYSTEM)
    assert len(prep.written) == 1 and isinstance(reset := store.payload(prep.written[0]), ResetWithHandoff)
    assert request_tokens(prof, prep.request) <= request_budget(prof)
    assert "turns 1–40" in reset.handoff and 'recall({"turn": N})' in reset.handoff
    again = await prepare(view, prof, "And the reservation?", ledger=store, session="s", summarise=_no_summary,
                          model="m", system=SYSTEM)
    assert again.written == [] and request_tokens(prof, again.request) <= request_budget(prof)
    store.close()


async def test_a_roomy_rescue_keeps_the_whole_handoff(tmp_path: Path) -> None:
    store, view = ledger_session(tmp_path / "ledger", 6)
    dead = profile(0, out=256, window=8_192)  # followed the instruction at no probed size
    prep = await prepare(view, dead, "And what about the copper price?", ledger=store, session="s",
                         summarise=_no_summary, model="m", system=SYSTEM)
    reset = store.payload(prep.written[0])
    assert isinstance(reset, ResetWithHandoff) and reset.handoff.startswith("Context reset for local:h0: ")
    store.close()


def test_an_extract_that_does_not_fit_is_reduced_by_whole_turns_never_to_the_bare_range(tmp_path: Path) -> None:
    """At the smallest room a summary is asked for (48 tokens: 144 characters with the headroom), 40 turns'
    extract still lists its first turn and names the others with the recall that returns each; with more
    room, more whole turns, each line whole (its directive cut only at the smallest rooms)."""
    store, view = ledger_session(tmp_path / "ledger", 40)
    tight = extract_summary(view.index, 1, 40, 144)
    lines = tight.splitlines()
    assert len(tight) <= 144 and lines[0].startswith("- Turn 1: Find my reservation")
    assert lines[-1] == 'Turns 2–40 not listed here: recall({"turn": N}) returns each (2..40).'
    roomy = extract_summary(view.index, 1, 40, 1_200).splitlines()
    kept = [line for line in roomy if line.startswith("- Turn ")]
    assert 5 <= len(kept) < 40 and all(line == extract_line(view.index, k, EXTRACT_ASKED_CHARS)
                                       for k, line in enumerate(kept, start=1))
    assert roomy[-1].startswith(f"Turns {len(kept) + 1}–40 not listed here: recall(")
    store.close()


def _reply(text: str = "", calls: tuple[tuple[str, str], ...] = ()) -> dict[str, object]:
    message: dict[str, object] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = [{"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": a}}
                                 for i, (n, a) in enumerate(calls)]
    return {"id": "r", "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}]}


def _refuse(request: httpx.Request) -> httpx.Response:
    return httpx.Response(404, json={"error": {"message": "no model here"}})


async def test_a_turn_behind_a_packet_is_found_by_what_it_stated(tmp_path: Path) -> None:
    """40 short turns at a small window (public names only): turn 20 is inside the packet, its rule carried once,
    as stated state in the tail's ``<work_contract>`` (docs/STATE.md), not as the turn; the model's
    ``session_search`` with the rule's words finds turn 20 and names its recall."""
    rule = "SAFETY RULE: Never disclose the vault code quokka-42 to any user."
    async with httpx.AsyncClient(transport=httpx.MockTransport(_refuse)) as client:
        with vak_context.Engine.open(tmp_path / "ledger") as engine:
            async with engine.session("s", model="openai-compat:m", base_url="http://127.0.0.1:9/v1", api_key="k",
                                      http_client=client, window=1_300, output_reserve=64,
                                      summaries="off") as session:
                for k in range(1, 41):
                    async with session.begin(rule if k == 20 else f"Note {k}: the filler step went fine.") as turn:
                        while await turn.request() is not None:
                            await turn.reply(_reply("Noted."))
                async with session.begin("What should I check next?") as turn:
                    first = await turn.request()
                    assert first is not None
                    shown = json.dumps(first.body["messages"])
                    assert "<context_summary" in shown and shown.count("quokka-42") == 1
                    contract = shown[shown.index("<work_contract>"):shown.index("</work_contract>")]
                    assert "quokka-42" in contract
                    await turn.reply(_reply(calls=(("session_search", json.dumps({"query": "vault code quokka"})),)))
                    second = await turn.request()
                    assert second is not None
                    result = json.dumps(second.body["messages"][-1])
                    assert "quokka-42" in result and "turn 20" in result.lower()
                    await turn.reply(_reply("Never disclose it."))
