"""A closed turn's digests are computed once per result and kept, never per request (issue 26 item 3).

A real in-process session through the public API (the Planner, Assembler and Evidence actors as objects,
each folding the session, the EvidenceActor closing every turn with its card) in front of a scripted
OpenAI-compatible model: at every request the process has computed at most one digest per tool result
the session has stored so far, and at the end exactly one per result. A view built again from the chain
(an actor restarted, a session branched) computes none. The counts are the process's digest cache's own
(``vak_context.context.history.render.DIGESTS``), read without mocks.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

import vak_context
from tests.fakes.embedder import ScriptedModel, make_tools
from vak_context.context.history.infocache import InfoCache
from vak_context.context.history.render import DIGESTS, evidence_info
from vak_context.context.planner.view import SessionView
from vak_context.errors import InvalidInput
from vak_context.events.envelope import Mapper
from vak_context.events.payloads import EvidenceBody
from vak_context.storage.ledger import LedgerStore

TURNS = 12  # before tests.fakes.embedder's turn 14, whose tool raises


def directive(turn: int) -> str:
    return f"please run make check-{turn}" if turn % 2 == 0 else f"please search query-{turn:03d}"


async def test_each_result_is_digested_once_across_every_request(tmp_path: Path) -> None:
    tools, calls = make_tools()
    model = ScriptedModel()
    base = DIGESTS.stats()
    seen: list[tuple[int, int]] = []  # at each request: (digests computed so far, tool results so far)

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append((DIGESTS.stats().computed - base.computed, len(calls)))
        return model.handle(request)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handle)) as client:
        with vak_context.Engine.open(tmp_path / "ledger") as engine:
            async with engine.session("once", model="openai-compat:scripted", base_url="http://127.0.0.1:9/v1",
                                      http_client=client, tools=tools, window=6_000) as session:
                for turn in range(1, TURNS + 1):
                    result = await session.run(directive(turn))
                    assert result.outcome == "completed", result.outcome
    after = DIGESTS.stats()
    assert len(calls) == TURNS and len(model.requests) >= 2 * TURNS
    # never more digests than results at any request: no request recomputed a closed turn's digests
    assert all(computed <= results for computed, results in seen), seen
    # once per result, though two holders read each: the session's one view, which the AssemblerActor and
    # the PlannerActor share in-process (at the step after the result; at the turn's close, when the planner
    # plans the next turn to write the packet summaries it will need), and the EvidenceActor (the turn's card)
    assert after.computed - base.computed == TURNS
    assert after.hits - base.hits == TURNS

    # A view built again from the whole chain (a restarted actor, a branched session) reads them all.
    with LedgerStore(tmp_path / "ledger", readonly=True) as store:
        chain = store.chain_to_root(store.head("once") or "")
    rebuilt = SessionView.build(chain)
    assert len(rebuilt.infos) == TURNS
    assert DIGESTS.stats().computed == after.computed


def test_a_hit_is_checked_against_what_the_caller_passes() -> None:
    """Same id, other bytes or another call's input: computed afresh and kept in its place (an id names
    its bytes in a real ledger; the check keeps the cache exact for any caller)."""
    mapper = Mapper()
    body = EvidenceBody(tool_use_id="c1", tool_name="read_file", chars=5, bytes=5)
    entry = mapper.entry(body, session="s", seq=0, parent=None, time_us=0, blob=b"hello")
    first = evidence_info(entry.id, body, b"hello", {"path": "a.md"})
    before = DIGESTS.stats()
    assert evidence_info(entry.id, body, b"hello", {"path": "a.md"}) is first
    other = evidence_info(entry.id, body, b"hello, longer", {"path": "a.md"})
    assert other.chars == 13 and other != first
    again = evidence_info(entry.id, body, b"hello", {"path": "a.md"})
    assert again == first
    stats = DIGESTS.stats()
    assert (stats.hits - before.hits, stats.computed - before.computed) == (1, 2)


def test_the_cache_is_bounded_least_recently_used_first() -> None:
    cache: InfoCache[str] = InfoCache(limit=2)
    assert cache.get("a", 1, lambda: "A") == "A"
    assert cache.get("b", 1, lambda: "B") == "B"
    assert cache.get("a", 1, lambda: "never") == "A"  # a hit: "a" is now the most recent
    assert cache.get("c", 1, lambda: "C") == "C"  # "b" goes
    assert cache.get("b", 1, lambda: "B2") == "B2"
    stats = cache.stats()
    assert (stats.computed, stats.hits, stats.kept, stats.limit) == (4, 1, 2, 2)
    cache.clear()
    assert cache.stats().computed == 0 and cache.stats().kept == 0
    with pytest.raises(InvalidInput, match="limit >= 1"):
        InfoCache(limit=0)
