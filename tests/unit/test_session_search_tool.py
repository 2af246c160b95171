"""``session_search``, the engine's tool (issue 25 item 5), through both drivers: the engine's loop answers
it and stores its result as evidence, the recall a hit names returns the exact lines, the caller's loop
answers it inside (the caller never gets the call); a query that matches nothing says so and points at
``recall({"turn": N})``; a scope reads earlier sessions without taking their writer lock, and their recall
names the session; the repeated-call rule treats it as read-only; what its declaration costs a 6k-token
profile's stable prefix is printed (docs/SEARCH.md quotes it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

import vak_context
from tests.fakes.tool_turns import PROFILE, completion
from vak_context.actors.local_services import InProcessServices
from vak_context.agent.loop import TurnConfig, TurnLoop
from vak_context.agent.tools import EngineCall, ToolRegistry, engine_tools, surface_for
from vak_context.agent.tools.sessionsearch import SESSION_SEARCH, recall_calls
from vak_context.context.capacity.profile import CapacityProfile, Ewma, Horizon, ProfileKey
from vak_context.context.evidence.digest import RECALL_TOOL
from vak_context.context.request.assemble import prefix_tokens, system_prompt
from vak_context.context.request.surface import schema_chars
from vak_context.events.envelope import Mapper
from vak_context.events.payloads import Directive, EvidenceBody
from vak_context.providers.base import RetryPolicy
from vak_context.providers.openai_compat import OpenAICompatProvider
from vak_context.storage.ledger import LedgerStore
from vak_context.storage.search import read_index

LOG = "".join(f"row {i} filler words here\n" for i in range(1, 201)).replace("row 120 ", "row 120 quokka ")


def _registry(ran: list[str]) -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool(read_only=True, observes=True)
    def fetch_log(name: str) -> str:
        """Fetch a service's log."""
        ran.append(name)
        return LOG

    return registry


class Script:
    """Each reply computed from the request it answers (so it can copy a recall call a result named)."""

    def __init__(self, *replies: Any) -> None:
        self.replies, self.bodies = list(replies), []  # type: list[Any], list[dict[str, Any]]

    def handle(self, request: httpx.Request) -> httpx.Response:
        if not request.url.path.endswith("/chat/completions"):
            return httpx.Response(404, json={"error": "no tokenizer here"})
        body = json.loads(request.content)
        self.bodies.append(body)
        reply = self.replies[len(self.bodies) - 1]
        return httpx.Response(200, json=reply(body) if callable(reply) else reply)


def _last_tool_text(body: dict[str, Any]) -> str:
    return next(m["content"] for m in reversed(body["messages"]) if m["role"] == "tool")


def _follow_first_hit(body: dict[str, Any]) -> dict[str, Any]:
    return completion(calls=[("recall", recall_calls(_last_tool_text(body))[0])])


def _loop(store: LedgerStore, script: Script, registry: ToolRegistry, session: str = "s1") -> TurnLoop:
    client = httpx.AsyncClient(transport=httpx.MockTransport(script.handle))
    provider = OpenAICompatProvider(client, base_url="http://127.0.0.1:9/v1", retry=RetryPolicy(attempts=1))
    surface = surface_for(registry)
    config = TurnConfig(model="scripted", provider="openai-compat", system=system_prompt(surface.catalogue()),
                        surface=surface, max_steps=6, max_tokens=128)
    return TurnLoop(InProcessServices(store, session), provider, PROFILE, config, tools=registry,
                    clock=lambda: 1_764_504_000.0)


def _payloads(store: LedgerStore, session: str, kind: str) -> list[Any]:
    mapper = Mapper()
    return [mapper.payload_of(e) for e in store.entries(session) if e.kind == kind]


async def test_the_engines_loop_answers_it_stores_its_result_and_the_named_recall_returns_the_lines(
        tmp_path: Path) -> None:
    ran: list[str] = []
    registry = _registry(ran)
    script = Script(
        completion(calls=[("fetch_log", {"name": "billing"})]), completion("The log is long."),
        completion(calls=[("session_search", {"query": "quokka"})]), _follow_first_hit,
        completion("Row 120 names the quokka."))
    with LedgerStore(tmp_path / "ledger") as store:
        loop = _loop(store, script, registry)
        await loop.run("fetch the billing log")
        report = await loop.run("which row named the animal?")
        assert report.outcome == "completed" and ran == ["billing"]
        assert "session_search" in {t["function"]["name"] for t in script.bodies[0]["tools"]}
        results = _payloads(store, "s1", "tool_result")
        found = next(r for r in results if r.tool_name == "session_search")
        [evidence] = [b for b in _payloads(store, "s1", "evidence_body") if b.tool_name == "fetch_log"]
        eid = next(e.id for e in store.entries("s1") if e.kind == "evidence_body"
                   and store.payload(e.id).tool_name == "fetch_log")
        assert evidence.chars == len(LOG)
        assert found.content.startswith("session_search 'quokka': 1 hit(s) in this session")
        assert f"1. turn 1, lines 91-130 of evidence {eid[:12]} (fetch_log): row 120 quokka filler words here" \
            in found.content
        assert f'recall({{"id": "{eid[:12]}", "range": [91, 130]}})' in found.content
        assert found.evidence_id is not None  # its result is evidence like any other
        assert store.payload(found.evidence_id).tool_name == "session_search"
        recalled = next(r for r in results if r.tool_name == "recall")
        assert not recalled.is_error and recalled.content == "".join(LOG.splitlines(keepends=True)[90:130])


async def test_the_callers_loop_answers_it_inside_and_the_caller_never_gets_the_call(tmp_path: Path) -> None:
    ran: list[str] = []
    script = Script(
        completion(calls=[("fetch_log", {"name": "billing"})]), completion("The log is long."),
        completion(calls=[("session_search", {"query": "quokka"})]), completion("Row 120."))
    async with httpx.AsyncClient(transport=httpx.MockTransport(script.handle)) as client:
        with vak_context.Engine.open(tmp_path / "ledger") as engine:
            async with engine.session("s", model="openai-compat:scripted", base_url="http://127.0.0.1:9/v1",
                                      window=8_000, http_client=client, tools=_registry(ran)) as session:
                seen: list[str] = []
                for directive in ("fetch the billing log", "which row named the animal?"):
                    async with session.begin(directive) as turn:
                        while (request := await turn.request()) is not None:
                            response = script.handle(httpx.Request("POST", request.url, json=request.body))
                            action = await turn.reply(response.json(), status=response.status_code)
                            for call in action.calls:
                                seen.append(call.name)
                                await turn.tool_result(call.id, "".join(LOG))
                    assert turn.result.outcome == "completed"
    assert seen == ["fetch_log"]  # session_search was answered by the engine
    hit = _last_tool_text(script.bodies[-1])
    assert hit.startswith("session_search 'quokka': 1 hit(s)") and "row 120 quokka" in hit
    assert recall_calls(hit)[0]["range"] == [91, 130]


async def _answer(store: LedgerStore, session: str, args: dict[str, Any]) -> tuple[str, bool]:
    tool = engine_tools().get("session_search")
    assert tool is not None
    registry = ToolRegistry()
    return await tool.answer(EngineCall(args, "t", InProcessServices(store, session), surface_for(registry), registry))


def _write(store: LedgerStore, session: str, text: str, turns: int = 1) -> str:
    for _ in range(turns):
        store.append(session, [Directive(text="look")])
    body = EvidenceBody(tool_use_id="t", tool_name="read_file", chars=len(text), bytes=len(text))
    return store.append(session, [body], blobs=[text.encode()])[0]


@pytest.mark.parametrize("query", ["wombat", "the of and"])
async def test_a_query_that_matches_nothing_says_so_and_points_at_recall_by_turn(tmp_path: Path, query: str) -> None:
    with LedgerStore(tmp_path / "ledger") as store:
        _write(store, "s", LOG, turns=3)
        text, is_error = await _answer(store, "s", {"query": query})
    assert not is_error
    assert text.startswith(f"session_search {query!r}: no match in this session (turns 1-3)")
    assert text.endswith('recall({"turn": N}) returns the whole record of turn N.')
    assert ("no searchable words" in text) == (query == "the of and")


async def test_bad_arguments_are_an_error_result_that_says_how_to_call_it(tmp_path: Path) -> None:
    with LedgerStore(tmp_path / "ledger") as store:
        _write(store, "s", LOG)
        for args in ({}, {"query": ""}, {"query": 3}, {"query": "x", "limit": 9}, {"query": "x", "scope": 4}):
            text, is_error = await _answer(store, "s", args)  # type: ignore[arg-type]
            assert is_error and 'session_search' in text and '"query"' in text, args


async def test_a_scope_reads_earlier_sessions_read_only_and_their_recall_names_the_session(tmp_path: Path) -> None:
    root = tmp_path / "ledger"
    with LedgerStore(root) as store:
        old = _write(store, "old", LOG.replace("quokka", "numbat"))
    with LedgerStore(root) as store:
        _write(store, "new", "nothing of note\n")
        assert (await _answer(store, "new", {"query": "numbat"}))[0].startswith("session_search 'numbat': no match")
        for scope in ("ledger", "old", "new, old"):
            text, is_error = await _answer(store, "new", {"query": "numbat", "scope": scope})
            assert not is_error and f"1. session 'old', turn 1, lines 91-130 of evidence {old[:12]}" in text, scope
            [args] = recall_calls(text)
            assert args == {"session": "old", "id": old[:12], "range": [91, 130]}
        with LedgerStore(root) as other_writer:  # the scope took no writer lock of 'old'
            other_writer.append("old", [Directive(text="still writable")])
        services = InProcessServices(store, "new")
        recalled = await services.recall(args, "r1")  # answered from 'new', stored in 'new'
        assert not recalled["is_error"] and recalled["content"] == "".join(LOG.replace("quokka", "numbat")
                                                                          .splitlines(keepends=True)[90:130])
        text, is_error = await _answer(store, "new", {"query": "numbat", "scope": "nope"})
        assert is_error and "scope names no session 'nope'" in text and "new" in text


async def test_the_repeated_call_rule_treats_it_as_read_only(tmp_path: Path) -> None:
    ran: list[str] = []
    script = Script(
        completion(calls=[("fetch_log", {"name": "billing"})]),
        completion(calls=[("session_search", {"query": "quokka"})]),
        completion(calls=[("session_search", {"query": "quokka"})]),
        completion("Row 120."))
    with LedgerStore(tmp_path / "ledger") as store:
        report = await _loop(store, script, _registry(ran)).run("find the animal")
        results = [r for r in _payloads(store, "s1", "tool_result") if r.tool_name == "session_search"]
        searched = [b for b in _payloads(store, "s1", "evidence_body") if b.tool_name == "session_search"]
        activities = [a.activity for a in _payloads(store, "s1", "activity")]
    assert report.outcome == "completed"
    assert [r.is_error for r in results] == [False, True] and results[1].content.startswith("[repeated-call]")
    assert [b.is_error for b in searched] == [False, True]  # the search ran once; the rule answered the repeat
    assert "rule.repeated_call" in activities
    assert engine_tools().get("session_search").decl.read_only  # type: ignore[union-attr]


def test_what_the_declaration_costs_a_6k_token_profiles_stable_prefix() -> None:
    """Printed for docs/SEARCH.md: the tool's schema and recall's new ``session`` property, in characters
    and in tokens at the prior 0.25 tokens per character (a model's receipts calibrate it)."""
    profile = CapacityProfile(ProfileKey("local", "6k"), 6_144, Horizon(6_144, 0.9, 0.0), Ewma(0.25, 3), 512)
    surface = surface_for(ToolRegistry())
    without = tuple(t for t in surface.schemas if t.name != "session_search")
    old_recall = RECALL_TOOL.model_copy(update={"input_schema": {
        **RECALL_TOOL.input_schema, "properties": {k: v for k, v in RECALL_TOOL.input_schema["properties"].items()
                                                   if k != "session"}}})
    before = tuple(old_recall if t.name == "recall" else t for t in without)
    system = system_prompt(surface.catalogue())
    old, new = prefix_tokens(profile, system, before), prefix_tokens(profile, system, surface.schemas)
    cost = new - old
    chars = schema_chars([SESSION_SEARCH]) + schema_chars([RECALL_TOOL]) - schema_chars([old_recall])
    print(f"session_search: declaration {schema_chars([SESSION_SEARCH])} chars, recall's session property "
          f"{schema_chars([RECALL_TOOL]) - schema_chars([old_recall])} chars; the stable prefix grows by {cost} "
          f"tokens ({chars} chars; system prompt and the engine's tools: {old} -> {new}), "
          f"{cost / profile.instruction_horizon.tokens:.1%} of a 6,144-token horizon")
    assert 0 < cost <= 0.03 * profile.instruction_horizon.tokens


async def test_a_one_character_term_tells_results_apart(tmp_path: Path) -> None:
    """26 results that differ only by their number: "topic 1 vector databases" finds topic 1 first and
    scores it above the rest (a digit is a term; it was dropped, which scored all 26 alike)."""
    with LedgerStore(tmp_path / "ledger") as store:
        for n in range(1, 27):
            _write(store, "s", f"topic {n}\nvector databases compared for topic {n}\n")
        text, is_error = await _answer(store, "s", {"query": "topic 1 vector databases"})
        hits, _note = read_index(store, "s", "topic 1 vector databases", 5)
    assert not is_error
    assert text.splitlines()[1].startswith("1. turn 1, lines 1-2 of evidence") and text.splitlines()[1].endswith(": topic 1")
    assert hits[0].turn == 1 and hits[0].score > hits[1].score
    assert len({round(h.score, 6) for h in hits[1:]}) == 1  # the other 25 share the common terms only
