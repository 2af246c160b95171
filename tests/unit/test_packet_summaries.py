"""Every packet carries what its turns did (issue 33, item 3): a 40-turn session through the engine's own
loop (the embedder's two tools, a scripted model, horizon 6,000 and 9,000) whose older turns go to
packets. With a summariser that answers, at least 90% of the requests that carry a packet carry its
model-written summary, and each packet range is summarised by exactly one call; every later request
carrying that range renders the same bytes, also after the ledger is reopened. With a summariser that
fails (or is turned off, ``summaries="off"``), each packet carries the engine's extract of its turns'
directives, outcomes and evidence ids, never "no summary of them fits", and the ledger says why.

Each summary is written when a turn closes, before the request that carries it is assembled (the turn's
close plans the next turn, its first step and a step grown as far as recent turns grew): the ledger
shows every ``packet.summarise`` activity between a turn's card and the next directive, and no request
waits on the summariser. A driver that never summarises ahead (the caller's loop with
``summarise_at_close = False``) still gets one call per range, on the request that forms it."""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

import vak_context
from tests.fakes.embedder import make_tools
from tests.fakes.packet_session import (
    PacketModel,
    SummaryMode,
    directive,
    packet_figures,
    summarised_after_the_last_turn,
    summary_timing,
)
from vak_context.events.envelope import Mapper
from vak_context.storage.ledger import LedgerStore

TURNS = 40


async def run_session(folder: Path, model: PacketModel, horizon: int, turns: range, *, summaries: str = "on") -> None:
    tools, _ = make_tools()
    async with httpx.AsyncClient(transport=httpx.MockTransport(model.handle)) as client:
        with vak_context.Engine.open(folder) as engine:
            async with engine.session("agent-1", model="openai-compat:scripted", base_url="http://127.0.0.1:9/v1",
                                      http_client=client, tools=tools, window=horizon, horizon=horizon,
                                      summaries=summaries) as session:
                for turn in turns:
                    result = await session.run(directive(turn))
                    assert result.outcome == "completed", (turn, result.outcome)


def summarise_activities(folder: Path) -> list[dict[str, Any]]:
    """The ``packet.summarise`` activities' details: what a bench counts summariser calls from."""
    mapper = Mapper()
    with LedgerStore(folder) as store:
        return [p.detail for e in store.entries("agent-1") if e.kind == "activity"
                and (p := mapper.payload_of(e)).activity == "packet.summarise"]


def same_bytes_per_range(ranges: list[str], packets: list[str]) -> dict[str, int]:
    """How many distinct texts each packet range was rendered as, across the requests that carried it."""
    seen: dict[str, set[str]] = defaultdict(set)
    for r, p in zip(ranges, packets, strict=True):
        seen[r].add(p)
    return {r: len(texts) for r, texts in seen.items()}


Answered = Callable[[int], tuple[Path, PacketModel]]


@pytest.fixture(scope="module")
def answered(tmp_path_factory: pytest.TempPathFactory) -> Answered:
    """The 40-turn session with a summariser that answers, at a horizon: (its ledger, its model), run once
    for the tests that only read it (two of them read the one at 6,000)."""
    made: dict[int, tuple[Path, PacketModel]] = {}

    def at(horizon: int) -> tuple[Path, PacketModel]:
        if horizon not in made:
            folder = tmp_path_factory.mktemp(f"answered-{horizon}") / "ledger"
            model = PacketModel(summaries="answer")
            asyncio.run(run_session(folder, model, horizon, range(1, TURNS + 1)))
            made[horizon] = (folder, model)
        return made[horizon]

    return at


@pytest.mark.parametrize("horizon", [6_000, 9_000])
def test_a_summariser_that_answers_summarises_each_range_once_and_every_packet_carries_it(
        answered: Answered, horizon: int) -> None:
    ledger, model = answered(horizon)
    f = packet_figures(model)
    assert f.packets, "the session is long enough for packets"
    assert f.model_summary >= 0.9 * len(f.packets), (f.model_summary, len(f.packets), f.ranges)
    assert f.bare == 0 and f.extract == 0
    # Exactly one summariser call per packet range the requests carried, and none for any other range but one
    # written ahead at the last turn's close for a next request the session never made.
    calls = Counter(f"{a}-{b}" for a, b in model.summary_ranges())
    unsent = summarised_after_the_last_turn(ledger, "agent-1")
    assert len(unsent) <= 1 and not set(unsent) & set(f.ranges), (unsent, f.ranges)
    assert calls == Counter(set(f.ranges) | set(unsent)), (calls, Counter(f.ranges))
    assert same_bytes_per_range(f.ranges, f.packets) == dict.fromkeys(set(f.ranges), 1)
    # The ledger counts them: one activity per range, each with its calls.
    details = summarise_activities(ledger)
    assert sum(len(d["calls"]) for d in details) == len(model.summary_prompts)
    assert {d["source"] for d in details} == {"summariser"} and not any("failed" in d for d in details)
    print(f"\nhorizon {horizon}: {f.model_summary} of {len(f.packets)} packet-bearing requests carry a model "
          f"summary; {len(model.summary_prompts)} summariser calls for {len(set(f.ranges))} ranges "
          f"({dict(Counter(f.ranges))})")


@pytest.mark.parametrize("mode", ["fail"])  # "junk" (an empty answer): tests/unit/test_packets.py
async def test_a_failing_summariser_leaves_the_extract_in_every_packet(tmp_path: Path, mode: SummaryMode) -> None:
    model = PacketModel(summaries=mode)
    await run_session(tmp_path / "ledger", model, 6_000, range(1, TURNS + 1))
    f = packet_figures(model)
    assert f.packets and f.extract == len(f.packets) and f.bare == 0 and f.model_summary == 0
    for packet in f.packets:  # each turn's directive, outcome and evidence ids (or the recall naming it)
        assert "- Turn 1: please search query-001" in packet and "evidence " in packet
    calls = Counter(f"{a}-{b}" for a, b in model.summary_ranges())
    assert calls == Counter(set(f.ranges))  # tried once per range, never again
    details = summarise_activities(tmp_path / "ledger")
    assert details and all(d["source"] == "extract" and d["failed"] for d in details)


async def test_summaries_off_make_no_call_and_carry_the_extract(tmp_path: Path) -> None:
    model = PacketModel(summaries="answer")
    await run_session(tmp_path / "ledger", model, 6_000, range(1, TURNS + 1), summaries="off")
    f = packet_figures(model)
    assert f.packets and f.extract == len(f.packets) and f.bare == 0
    assert model.summary_prompts == []
    assert all(d["failed"] == "off" and d["calls"] == [] for d in summarise_activities(tmp_path / "ledger"))
    with pytest.raises(vak_context.InvalidInput, match="summaries must be one of"):
        with vak_context.Engine.open(tmp_path / "other") as engine:
            engine.session("s", model="openai-compat:scripted", summaries="sometimes")


async def test_a_stored_summary_is_reused_after_the_ledger_is_reopened(tmp_path: Path) -> None:
    before = PacketModel(summaries="answer")
    await run_session(tmp_path / "ledger", before, 6_000, range(1, 31))
    first = packet_figures(before)
    after = PacketModel(summaries="answer")
    await run_session(tmp_path / "ledger", after, 6_000, range(31, TURNS + 1))
    second = packet_figures(after)
    carried_again = set(first.ranges) & set(second.ranges)
    assert carried_again, (first.ranges, second.ranges)
    for r in carried_again:  # byte for byte, and no new call for it
        assert {p for q, p in zip(second.ranges, second.packets, strict=True) if q == r} == \
               {p for q, p in zip(first.ranges, first.packets, strict=True) if q == r}
    new_calls = Counter(f"{a}-{b}" for a, b in after.summary_ranges())
    assert not carried_again & set(new_calls) and all(n == 1 for n in new_calls.values())


def test_each_summary_is_written_when_a_turn_closes_before_the_request_that_carries_it(answered: Answered) -> None:
    ledger, model = answered(6_000)
    ahead, on_path, carried = summary_timing(ledger, "agent-1")
    f = packet_figures(model)
    assert ahead and on_path == [], (ahead, on_path)  # no request waited on the summariser
    assert sorted(f"{a}-{b}" for a, b in ahead) == sorted(set(f.ranges))  # each carried range, once
    assert carried and set(carried.values()) == {"before"}, carried  # stored before its turn's directive
    assert len(model.summary_prompts) == len(ahead) and f.model_summary == len(f.packets)


async def run_callers_loop(folder: Path, model: PacketModel, horizon: int, turns: range, *, ahead: bool) -> None:
    """The session driven by the caller's loop (``Session.begin``): the caller posts each request and runs
    its own tools; ``ahead`` False: the turn never writes the next request's summary ahead."""
    tools, _ = make_tools()
    run = {t.__name__: t for t in tools}
    async with httpx.AsyncClient(transport=httpx.MockTransport(model.handle)) as client:
        with vak_context.Engine.open(folder) as engine:
            async with engine.session("agent-1", model="openai-compat:scripted", base_url="http://127.0.0.1:9/v1",
                                      http_client=client, tools=tools, window=horizon, horizon=horizon) as session:
                for n in turns:
                    async with session.begin(directive(n)) as turn:
                        turn.summarise_at_close = ahead
                        while (request := await turn.request()) is not None:
                            reply = await client.post(request.url, json=request.body, headers=dict(request.headers))
                            action = await turn.reply(reply.json(), status=reply.status_code)
                            for call in action.calls:
                                await turn.tool_result(call.id, run[call.name](**call.arguments))
                    assert turn.result.outcome == "completed", (n, turn.result.outcome)


@pytest.mark.parametrize("ahead", [True, False])
async def test_the_callers_loop_summarises_at_close_and_a_request_writes_a_missing_one_once(
        tmp_path: Path, ahead: bool) -> None:
    model = PacketModel(summaries="answer")
    await run_callers_loop(tmp_path / "ledger", model, 6_000, range(1, TURNS + 1), ahead=ahead)
    summarised_ahead, on_path, carried = summary_timing(tmp_path / "ledger", "agent-1")
    f = packet_figures(model)
    assert f.packets and f.model_summary >= 0.9 * len(f.packets) and f.bare == 0 and f.extract == 0
    calls = Counter(f"{a}-{b}" for a, b in model.summary_ranges())
    assert calls == Counter(set(f.ranges)), (calls, Counter(f.ranges))  # one call per range, either way
    if ahead:
        assert on_path == [] and set(carried.values()) == {"before"}
    else:  # nothing was written ahead: each range on the request that first carries it, never again
        assert summarised_ahead == [] and len(on_path) == len(set(f.ranges))
        assert "inside" in carried.values()
