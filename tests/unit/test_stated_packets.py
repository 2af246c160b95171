"""A packet's summary keeps the stated items its turns said, verbatim (issue 34 item 3): the deterministic extract
and a model's summary both open with them (rules, limits, facts, goals in budget order), whole items within the
room, each left out named with the ``recall`` that returns it, never dropped whole. Over a real on-disk ledger,
the summariser a scripted llama.cpp behind ``httpx.MockTransport``."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import httpx

from tests.fakes.provider_bodies.wire import body
from tests.fakes.sessions import ledger_session
from vak_context.agent.summarise import Summariser, write_packet
from vak_context.context.capacity.profile import CapacityProfile, Ewma, Horizon, ProfileKey
from vak_context.context.history.packets import extract_summary, seed_packet
from vak_context.context.planner.plan import PacketPlan, Plan
from vak_context.context.planner.view import SessionView
from vak_context.context.stated.render import SAID_HEADER, said_block, without_said
from vak_context.events.payloads import Compaction, WorkContract
from vak_context.providers.base import RetryPolicy
from vak_context.providers.openai_compat import OpenAICompatProvider
from vak_context.storage.ledger import LedgerStore

SAID = {  # turn -> (category, text): said in that turn's directive
    2: ("preference", "USER PREFERENCE: Keep answers under ten lines."),
    3: ("rule", "SAFETY RULE: Never run the purge job on a weekday."),
    5: ("constraint", "HARD CONSTRAINT: The budget for API calls is $120 this month."),
    6: ("fact", "FACT: The staging cluster is named kestrel-7."),
    7: ("goal", "GOAL STATE: Migrating billing to the new queue; step 3 of 5 is done."),
}


def _session(root: Path, turns: int = 9) -> tuple[LedgerStore, SessionView]:
    store, view = ledger_session(root, turns)
    for ordinal, (category, text) in SAID.items():
        turn_id = view.index.turn(ordinal).id
        eid = store.append("s", [WorkContract(text=text, category=category, key=text, via="directive",
                                              turn_id=turn_id, entry_id=turn_id)])[0]
        view.add(store.get(eid))
    return store, view


def _plan_with_packet(view: SessionView, first: int, last: int, summary_tokens: int) -> Plan:
    prof = CapacityProfile(ProfileKey("local", "small"), 100_000, Horizon(100_000, 0.9, 0.0), Ewma(0.25, 1), 256)
    p = view.plan(prof, "next question", prefix_tokens=0, tail_tokens=0)
    index = view.index
    seed = seed_packet(index, index.turn(first).id, last)
    pk = PacketPlan(first, last, index.turn(first).id, index.turn(last).id, "summary", 500, 500, summary_tokens,
                    None, seed.id if seed else None)
    return replace(p, packet=pk)


class Summaries:
    """A scripted llama.cpp answering every summariser call with ``texts`` in turn; prompts recorded."""

    def __init__(self, *texts: str) -> None:
        self.texts = list(texts)
        self.prompts: list[str] = []
        self.max_tokens: list[int] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        sent = json.loads(request.content)
        self.prompts.append(sent["messages"][1]["content"])
        self.max_tokens.append(sent["max_tokens"])
        reply = body("openai_compat", "llamacpp_chat_repeat")
        reply["choices"][0]["message"]["content"] = self.texts.pop(0)
        return httpx.Response(200, json=reply)


async def _write(store: LedgerStore, view: SessionView, plan: Plan, server: Summaries) -> Compaction:
    async with httpx.AsyncClient(transport=httpx.MockTransport(server)) as client:
        provider = OpenAICompatProvider(client, base_url="http://127.0.0.1:9/v1", retry=RetryPolicy(attempts=1))
        ids = await write_packet(store, "s", view, plan, Summariser(provider, "smollm2", window_tokens=8192))
    packet = store.payload(ids[-1])
    assert isinstance(packet, Compaction)
    return packet


def test_the_extract_opens_with_the_items_its_turns_said_verbatim_in_budget_order(tmp_path: Path) -> None:
    store, view = _session(tmp_path / "ledger")
    with store:
        text = extract_summary(view.index, 1, 8, 1_200)
    block, turns = text.split("\n\n", 1)
    lines = block.splitlines()
    assert lines[0] == SAID_HEADER
    order = [3, 5, 7, 6, 2]  # rule, constraint, goal, fact, preference
    assert lines[1:] == [f"- {SAID[t][1]} (turn {t})" for t in order]
    assert turns.startswith("- Turn 1") and len(text) <= 1_200
    assert without_said(text) == turns  # what a summariser growing this packet is given


def test_a_small_extract_keeps_whole_items_first_and_names_each_one_left_out(tmp_path: Path) -> None:
    """At 440 characters: the rule and the constraint whole (then the shorter preference, where the goal and the
    fact do not fit), the rest named by the recall that returns each or counted with the tool that lists them,
    and still the first turn's line: reduced by whole items, never to nothing."""
    store, view = _session(tmp_path / "ledger")
    with store:
        items = view.index.stated.current()
        text = extract_summary(view.index, 1, 8, 440)
        by_text = {it.text: it for it in items}
    assert len(text) <= 440
    block, turns = text.split("\n\n", 1)
    assert SAID[3][1] in block and SAID[5][1] in block  # the rule and the constraint, word for word
    for t in (6, 7):
        item = by_text[SAID[t][1]]
        assert SAID[t][1] not in block
        assert f'recall({{"id": "{item.id[:12]}"}})' in block or "commitments() lists them" in block
    assert turns.startswith("- Turn 1")


def test_said_block_is_deterministic_and_empty_only_without_room() -> None:
    assert said_block((), 1_000) == ""


async def test_a_model_summary_carries_the_items_verbatim_beside_it_within_its_room(tmp_path: Path) -> None:
    store, view = _session(tmp_path / "ledger")
    server = Summaries("Turns one to eight: bookings, copper and the release checks.")
    with store:
        plan = _plan_with_packet(view, 1, 8, 400)
        packet = await _write(store, view, plan, server)
    assert packet.source == "summariser"
    block, summary = packet.summary.split("\n\n", 1)
    assert summary == "Turns one to eight: bookings, copper and the release checks."
    assert all(text in block for _, text in SAID.values())
    # the model was asked for less, by what the block takes: the two fit the summary's room together
    assert server.max_tokens[0] + len(block) * 0.25 <= 400 * 0.75 + 2


async def test_a_grown_packet_writes_its_block_anew_and_never_feeds_the_old_one_to_the_summariser(
        tmp_path: Path) -> None:
    store, view = _session(tmp_path / "ledger", turns=12)
    server = Summaries("Turns one to four: bookings.", "Turns one to nine: bookings and the purge.")
    with store:
        first = await _write(store, view, _plan_with_packet(view, 1, 4, 400), server)
        grown = await _write(store, view, _plan_with_packet(view, 1, 9, 400), server)
    assert SAID[3][1] in first.summary and SAID[7][1] not in first.summary  # turns 1-4 said the rule only
    assert "<previous_summary>\nTurns one to four: bookings.\n</previous_summary>" in server.prompts[1]
    assert SAID_HEADER not in server.prompts[1]
    assert all(text in grown.summary for _, text in SAID.values()) and grown.summary.count(SAID_HEADER) == 1
