"""Compaction packets (spec §4): rendering levels, range keys, seeds, and the summariser side call.

The summariser here is the real OpenAI-compatible adapter over ``httpx.MockTransport`` answering with
the local llama.cpp server's recorded body; the live model writes packets in ``test_replay_gate``.
"""

from __future__ import annotations

import asyncio
import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.provider_bodies.wire import body
from tests.fakes.sessions import SessionBuilder, build_session, ledger_session
from vak_context.agent.summarise import Summariser, write_packet
from vak_context.context.capacity.profile import CapacityProfile, Ewma, Horizon, ProfileKey
from vak_context.context.history.packets import (
    SUMMARISER_SYSTEM,
    CoveredItem,
    compaction_payload,
    covered_evidence,
    extract_summary,
    item_line,
    list_chars,
    packet_room,
    render_packet,
    seed_packet,
    stored_packet,
    summariser_prompt,
)
from vak_context.context.history.render import VERBATIM_CHARS
from vak_context.context.history.turncard import short_id
from vak_context.context.planner.plan import PacketPlan, Plan
from vak_context.context.planner.view import SessionView
from vak_context.context.request.assemble import project
from vak_context.errors import InvalidInput
from vak_context.events.payloads import Activity, Compaction, ResetWithHandoff
from vak_context.providers.base import RetryPolicy
from vak_context.providers.openai_compat import OpenAICompatProvider
from vak_context.storage.ledger import LedgerStore


def test_the_three_levels_say_what_they_cover_and_how_to_recall_it() -> None:
    items = [CoveredItem("a" * 64, "web_search result, 1,234 chars"), CoveredItem("b" * 64, "bash result, 9 chars, error")]
    pointer = render_packet(3, 10, level="pointer", total_evidence=2)
    assert pointer.startswith('<context_summary turns="3-10">') and pointer.endswith("</context_summary>")
    assert "Turns 3–10" in pointer and 'recall({"turn": N})' in pointer and "2 tool results" in pointer
    listed = render_packet(3, 10, level="list", evidence=items)
    assert "- aaaaaaaaaaaa: web_search result, 1,234 chars" in listed and "bbbbbbbbbbbb: bash result, 9 chars, error" in listed
    assert 'recall({"id": "<id>"})' in listed
    summary = render_packet(3, 10, level="summary", evidence=items, summary="  They booked a flight.  ")
    assert summary == listed.replace("\nEvidence in", "\nSummary:\nThey booked a flight.\nEvidence in", 1)
    assert render_packet(1, 1, level="list") .count("hold no tool results") == 1
    with pytest.raises(InvalidInput, match="needs the summary"):
        render_packet(1, 2, level="summary", summary=" ")
    with pytest.raises(InvalidInput, match="first"):
        render_packet(0, 2, level="pointer")


def test_packet_room_picks_the_richest_level_that_fits() -> None:
    b = build_session(10, tools_per_turn=2)
    items = covered_evidence(b.view.index, 1, 8)
    size = {"item_chars": sum(len(item_line(i)) for i in items), "items": len(items)}
    kw: dict[str, Any] = {"budget": 5_000, "tokens_per_char": 0.25, "card_tokens": 2_000, **size}
    roomy = packet_room(1, 8, share=1_000, **kw)
    assert roomy is not None and roomy.level == "summary" and roomy.summary_tokens >= 48
    assert roomy.list_tokens == math.ceil(len(render_packet(1, 8, level="list", evidence=items)) * 0.25)
    assert roomy.allowance == roomy.list_tokens + roomy.summary_tokens + 4  # "\nSummary:\n" and one spare
    compressed = packet_room(1, 8, share=1_000, budget=5_000, tokens_per_char=0.25, card_tokens=200, **size)
    assert compressed is not None and compressed.summary_tokens <= 100  # at most half of what the cards cost
    # Where the evidence lines leave no room for a summary, the summary goes with the evidence counted (brief):
    # what it costs does not grow with the tool results the turns hold.
    brief = packet_room(1, 8, share=roomy.list_tokens, **kw)
    brief_fixed = math.ceil(len(render_packet(1, 8, level="brief", summary="-", total_evidence=len(items))) * 0.25)
    assert brief is not None and brief.level == "brief" and brief.summary_tokens >= 48
    assert brief.allowance == brief_fixed + brief.summary_tokens + 4
    # Below the brief's own room (with a summary of at least MIN_SUMMARY_TOKENS), the list where it fits.
    listed = packet_room(1, 8, share=roomy.list_tokens, **{**kw, "card_tokens": 2 * 47})
    assert listed is not None and listed.level == "list" and listed.allowance == roomy.list_tokens
    pointer = packet_room(1, 8, share=10, **kw)
    assert pointer is not None and pointer.level == "pointer" and pointer.allowance == pointer.pointer_tokens
    kw["budget"] = pointer.pointer_tokens - 1
    assert packet_room(1, 8, share=10, **kw) is None


@pytest.mark.parametrize(("first", "last", "n"), [(1, 1, 0), (1, 8, 1), (9, 16, 5), (100, 1000, 40)])
def test_list_chars_is_the_length_of_the_rendered_list(first: int, last: int, n: int) -> None:
    items = [CoveredItem(f"{k:064x}", f"tool{k} result, {k * 97:,} chars" + (", error" if k % 3 else "")) for k in range(n)]
    text = render_packet(first, last, level="list", evidence=items)
    assert list_chars(first, last, sum(len(item_line(i)) for i in items), n) == len(text)


def test_a_compaction_is_keyed_by_its_range_and_names_every_result() -> None:
    b = build_session(6, tools_per_turn=2)
    index = b.view.index
    packet = compaction_payload(index, 2, 4, "They asked about copper.", model="local:small")
    assert (packet.first_turn_id, packet.last_turn_id) == (index.turn(2).id, index.turn(4).id)
    assert packet.model == "local:small" and packet.seeded_from is None
    assert [c.id for c in packet.covered_evidence] == [e for o in (2, 3, 4) for e in index.turn(o).evidence]
    assert all("result" in c.description for c in packet.covered_evidence)
    assert [c.evidence_id for c in covered_evidence(index, 2, 4)] == [c.id for c in packet.covered_evidence]
    with pytest.raises(InvalidInput, match="needs a summary"):
        compaction_payload(index, 2, 4, "", model="m")
    b.add(ResetWithHandoff(handoff="reset"))
    with pytest.raises(InvalidInput, match="behind a reset"):
        compaction_payload(b.view.index, 2, 4, "x", model="m")


def test_a_growing_packet_names_what_a_fresh_one_would() -> None:
    """Each turn's covered items are kept once made (a growing packet names its whole range again each time):
    the payload is the one made from the index as it is, for ranges that grow, overlap and shrink, and for
    another session's turns in the same process."""
    b = build_session(12, tools_per_turn=2)
    index = b.view.index

    def fresh(first: int, last: int) -> list[tuple[str, str]]:
        return [(c.evidence_id, c.description) for c in covered_evidence(index, first, last)]

    for first, last in [(1, 4), (1, 8), (1, 12), (3, 9), (2, 2), (1, 12)]:
        packet = compaction_payload(index, first, last, "summary", model="m")
        assert [(c.id, c.description) for c in packet.covered_evidence] == fresh(first, last)
    grown = build_session(12, tools_per_turn=3)  # another session in the same process: its own turns
    for first, last in [(1, 12), (4, 7)]:
        packet = compaction_payload(grown.view.index, first, last, "summary", model="m")
        assert [(c.id, c.description) for c in packet.covered_evidence] == [
            (c.evidence_id, c.description) for c in covered_evidence(grown.view.index, first, last)]
        assert len(packet.covered_evidence) == 3 * (last - first + 1)
    # a fork: the same first turn (the same directive, so the same turn id) holding another body
    forks = [SessionBuilder(), SessionBuilder()]
    for k, fork in enumerate(forks):
        fork.turn("read the notes", [("read_file", {"path": "notes.txt"}, "x" * (10 + k), False)], "Done.")
        assert compaction_payload(fork.view.index, 1, 1, "s", model="m").covered_evidence[0].id == \
            fork.view.index.turn(1).evidence[0]
    assert forks[0].view.index.turn(1).id == forks[1].view.index.turn(1).id
    # a range grown from a fork's: the same turns up to the last one the fork's packet covered, whose own body
    # differs here (the same turn id: its directive and what came before are the same)
    forks = [SessionBuilder(), SessionBuilder()]
    for k, fork in enumerate(forks):
        fork.turn("read the notes", [("read_file", {"path": "notes.txt"}, "x" * 10, False)], "Done.")
        fork.turn("and the plan?", [("read_file", {"path": "plan.txt"}, "p" * (20 + k), False)], "Done.")
        fork.turn("and the log?", [("read_file", {"path": "log.txt"}, "l" * 30, False)], "Done.")
    assert forks[0].view.index.turn(2).id == forks[1].view.index.turn(2).id
    assert forks[0].view.index.turn(2).evidence != forks[1].view.index.turn(2).evidence
    for first, last, fork in [(1, 2, forks[0]), (1, 3, forks[1]), (1, 3, forks[0])]:
        index = fork.view.index
        assert [c.id for c in compaction_payload(index, first, last, "s", model="m").covered_evidence] == [
            e for o in range(first, last + 1) for e in index.turn(o).evidence]


def test_seeds_are_the_longest_stored_packet_over_the_same_first_turn() -> None:
    b = build_session(20)
    index = b.view.index
    short = b.add(compaction_payload(index, 1, 8, "first eight", model="m"))
    longer = b.add(compaction_payload(index, 1, 16, "first sixteen", model="m"))
    b.add(compaction_payload(index, 2, 18, "another start", model="m"))
    assert seed_packet(b.view.index, index.turn(1).id, 20).id == longer  # type: ignore[union-attr]
    assert seed_packet(b.view.index, index.turn(1).id, 16).id == short  # type: ignore[union-attr]
    assert seed_packet(b.view.index, index.turn(1).id, 8) is None
    assert stored_packet(b.view.index, index.turn(1).id, index.turn(16).id).id == longer  # type: ignore[union-attr]
    assert stored_packet(b.view.index, index.turn(1).id, index.turn(12).id) is None


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
        assert sent["messages"][0] == {"role": "system", "content": SUMMARISER_SYSTEM}
        self.prompts.append(sent["messages"][1]["content"])
        self.max_tokens.append(sent["max_tokens"])
        reply = body("openai_compat", "llamacpp_chat_repeat")
        reply["choices"][0]["message"]["content"] = self.texts.pop(0)
        return httpx.Response(200, json=reply)


async def _summarise(store: LedgerStore, view: SessionView, plan: Plan, server: Summaries, window: int = 8192) -> tuple[list[str], Summariser]:
    async with httpx.AsyncClient(transport=httpx.MockTransport(server)) as client:
        provider = OpenAICompatProvider(client, base_url="http://127.0.0.1:9/v1", retry=RetryPolicy(attempts=1))
        summariser = Summariser(provider, "smollm2", window_tokens=window)
        return await write_packet(store, "s", view, plan, summariser), summariser


async def test_growing_a_packet_seeds_the_summariser_and_adds_only_the_newly_covered_turns(tmp_path: Path) -> None:
    store, view = ledger_session(tmp_path / "ledger", 18)
    server = Summaries("Turns one to eight: bookings.", "Turns one to sixteen: bookings and copper.")
    first_ids, _ = await _summarise(store, view, _plan_with_packet(view, 1, 8, 120), server)
    seed = store.payload(first_ids[-1])
    assert isinstance(seed, Compaction) and seed.summary == "Turns one to eight: bookings."
    assert "<previous_summary>" not in server.prompts[0]
    assert all(f'<turn n="{o}">' in server.prompts[0] for o in range(1, 9))

    plan = _plan_with_packet(view, 1, 16, 120)
    assert plan.packet is not None and plan.packet.seed_id == first_ids[-1]
    grown_ids, summariser = await _summarise(store, view, plan, server)
    prompt = server.prompts[1]
    assert "<previous_summary>\nTurns one to eight: bookings.\n</previous_summary>" in prompt
    assert [o for o in range(1, 17) if f'<turn n="{o}">' in prompt] == list(range(9, 17))
    activity, grown = (store.payload(e) for e in grown_ids)
    assert isinstance(activity, Activity) and activity.detail["seeded_from"] == first_ids[-1]
    assert activity.detail["new_turns"] == [9, 16] and len(activity.detail["calls"]) == summariser.calls == 1
    assert isinstance(grown, Compaction) and grown.seeded_from == first_ids[-1] and grown.model == "local:small"
    assert (grown.first_turn_id, grown.last_turn_id) == (view.index.turn(1).id, view.index.turn(16).id)
    assert server.max_tokens == [90, 90]  # three quarters of the plan's room: the summariser's tokenizer differs
    # the records carry each result as its digest with the evidence id, or whole when it is no longer
    # than a digest may be: never cut
    for o in range(9, 17):
        for ex in view.index.turn(o).exchanges:
            assert ex.result is not None and ex.result.evidence_id is not None
            if len(ex.result.content) <= VERBATIM_CHARS:
                assert ex.result.content in prompt
            else:
                assert f"[evidence:{short_id(ex.result.evidence_id)} — " in prompt
    # rendered only for exactly its range
    text = project(view.index, replace(plan, packet=replace(plan.packet, stored_id=grown_ids[-1])), model="m",
                   infos=view.infos).messages[0].text
    assert text.startswith('<context_summary turns="1-16">') and "bookings and copper" in text
    assert all(short_id(e) in text for o in range(1, 17) for e in view.index.turn(o).evidence)
    store.close()


async def test_a_small_summariser_window_takes_several_calls_each_seeded_by_the_last(tmp_path: Path) -> None:
    store, view = ledger_session(tmp_path / "ledger", 10)
    answers = [f"part {k}" for k in range(1, 9)]
    server = Summaries(*answers)
    ids, summariser = await _summarise(store, view, _plan_with_packet(view, 1, 8, 60), server, window=700)
    assert summariser.calls >= 2
    for k, prompt in enumerate(server.prompts[1:], 1):  # each call carries the previous call's answer
        assert f"<previous_summary>\npart {k}\n</previous_summary>" in prompt
    covered = [o for p in server.prompts for o in range(1, 9) if f'<turn n="{o}">' in p]
    assert covered == list(range(1, 9))  # every new turn exactly once, in order
    packet = store.payload(ids[-1])
    assert isinstance(packet, Compaction) and packet.summary == f"part {summariser.calls}"
    store.close()


async def test_an_empty_summary_stores_the_extract_and_says_why(tmp_path: Path) -> None:
    """A summariser that answers nothing: the packet stores the engine's extract (each turn's directive,
    outcome where it is not ``completed``, and evidence ids), marked as such, and the activity records the failure."""
    store, view = ledger_session(tmp_path / "ledger", 9)
    ids, _ = await _summarise(store, view, _plan_with_packet(view, 1, 8, 400), Summaries(""))
    packet = store.payload(ids[-1])
    activity = store.payload(ids[0])
    assert isinstance(packet, Compaction) and packet.source == "extract" and packet.seeded_from is None
    lines = packet.summary.splitlines()
    assert lines[0].startswith("- Turn 1: Find my reservation")
    for o in range(1, 9):
        assert all(short_id(e) in packet.summary for e in view.index.turn(o).evidence)
    assert isinstance(activity, Activity) and activity.detail["calls"][0]["empty"] is True
    assert activity.detail["source"] == "extract" and "answered nothing" in activity.detail["failed"]
    with pytest.raises(InvalidInput, match="needs no new packet summary"):
        await write_packet(store, "s", view, replace(_plan_with_packet(view, 1, 8, 120), packet=None), Summariser(
            OpenAICompatProvider(httpx.AsyncClient(), base_url="http://127.0.0.1:9/v1"), "m", window_tokens=100))
    store.close()


class Refuses:
    """A summariser server that fails every call (HTTP 500), counting them."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.calls += 1
        return httpx.Response(500, json={"error": {"message": "the summariser is down", "type": "server_error"}})


async def test_a_failing_summariser_leaves_the_extract_bounded_by_whole_turns(tmp_path: Path) -> None:
    """The summariser raises: the turn goes on with the extract, within the packet's room, each turn it
    leaves out named with the recall that returns it; rendered under its own heading, never "no summary"."""
    store, view = ledger_session(tmp_path / "ledger", 9)
    server = Refuses()
    # 100 tokens of room: 400 characters at 0.25 tokens a character, of which the extract takes at most 300
    # (the headroom a model's summary is asked for too: a later request's room may be a little smaller)
    plan = _plan_with_packet(view, 1, 8, 100)
    ids, summariser = await _summarise(store, view, plan, server)  # type: ignore[arg-type]
    assert server.calls == summariser.calls == 1
    activity, packet = (store.payload(e) for e in ids)
    assert isinstance(activity, Activity) and activity.detail["failed"].startswith("RetryableProviderError: openai-compat: HTTP 500")
    assert isinstance(packet, Compaction) and packet.source == "extract" and len(packet.summary) <= 300
    lines = packet.summary.splitlines()
    kept = [line for line in lines if line.startswith("- Turn ")]
    assert 1 <= len(kept) < 8
    assert lines[-1].startswith(f"Turns {len(kept) + 1}–8 not listed here: recall({{\"turn\": N}})")
    assert plan.packet is not None
    text = project(view.index, replace(plan, packet=replace(plan.packet, stored_id=ids[-1])), model="m",
                   infos=view.infos).messages[0].text
    assert "the engine's extract" in text and "Summary:" not in text and "no summary of them fits" not in text
    store.close()


async def test_summaries_off_store_the_extract_without_a_call(tmp_path: Path) -> None:
    store, view = ledger_session(tmp_path / "ledger", 9)
    server = Refuses()
    async with httpx.AsyncClient(transport=httpx.MockTransport(server)) as client:
        summariser = Summariser(OpenAICompatProvider(client, base_url="http://127.0.0.1:9/v1"), "m",
                                window_tokens=8192, enabled=False)
        ids = await write_packet(store, "s", view, _plan_with_packet(view, 1, 8, 400), summariser)
    activity, packet = (store.payload(e) for e in ids)
    assert server.calls == summariser.calls == 0
    assert isinstance(activity, Activity) and activity.detail["failed"] == "off" and activity.detail["calls"] == []
    assert isinstance(packet, Compaction) and packet.source == "extract"
    assert packet.summary == extract_summary(view.index, 1, 8, 1200)  # deterministic: the same bytes again
    store.close()


def test_summariser_prompt_is_the_previous_packet_plus_turn_records() -> None:
    prompt = summariser_prompt("before", [(3, "record three"), (4, "record four")], 1, 4, 50)
    assert prompt.index("<previous_summary>") < prompt.index('<turn n="3">') < prompt.index('<turn n="4">')
    assert prompt.endswith("in at most 50 words.") and "turns 1–4" in prompt
    with pytest.raises(InvalidInput):
        summariser_prompt(None, [], 1, 2, 10)


async def test_a_summariser_that_never_answers_times_out_into_the_extract(tmp_path: Path) -> None:
    """``Summariser.timeout_s``: a call that outlasts it leaves the extract, and the activity says so."""
    store, view = ledger_session(tmp_path / "ledger", 9)
    never = asyncio.Event()

    async def hangs(request: httpx.Request) -> httpx.Response:
        await never.wait()  # never set: the summariser's own timeout ends the call
        raise AssertionError("unreachable")

    async with httpx.AsyncClient(transport=httpx.MockTransport(hangs)) as client:
        summariser = Summariser(OpenAICompatProvider(client, base_url="http://127.0.0.1:9/v1"), "m",
                                window_tokens=8192, timeout_s=0.05)
        ids = await write_packet(store, "s", view, _plan_with_packet(view, 1, 8, 400), summariser)
    activity, packet = (store.payload(e) for e in ids)
    assert isinstance(activity, Activity) and activity.detail["failed"] == "timed out after 0.05 s"
    assert isinstance(packet, Compaction) and packet.source == "extract" and summariser.calls == 1
    store.close()
