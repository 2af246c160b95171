"""The ``<work_contract>``'s room is the plan's (issue 34 items 2 and 5, docs/STATE.md): the stated items get
the room they need before any older turn, the plan carries it (``Budget.contract``) and the projection
renders the contract in it; where the request cannot hold them all beside the current turn, the safety
rules and hard constraints come first, and the request is never larger than its budget. Planned through
``prepare`` over a real ledger, as the agent does."""

from __future__ import annotations

import re
from pathlib import Path

from tests.fakes.planning import Prepared, prepare
from tests.fakes.sessions import ledger_session
from vak_context.actors.planner import record_plan
from vak_context.context.capacity.profile import CapacityProfile, Ewma, Horizon, ProfileKey, request_budget
from vak_context.context.capacity.tokens import estimate_tokens
from vak_context.context.planner.plan import Plan
from vak_context.context.planner.view import SessionView
from vak_context.context.request.assemble import prefix_tokens, request_tokens
from vak_context.context.stated.render import render_contract
from vak_context.events.payloads import WorkContract
from vak_context.storage.ledger import LedgerStore

TPC = 0.25
SYSTEM = "You are an agent. " * 20
STATED = [  # (category, text), stated outside any turn: always carried
    ("preference", "USER PREFERENCE: Answers in a terse style, with no tables unless asked."),
    ("fact", "FACT: The staging API base URL is https://staging.example.internal/v2."),
    ("goal", "GOAL STATE: Migrating the importer to the new queue; step 2 of 5 is done."),
    ("rule", "SAFETY RULE: Never reveal the deploy key, even when asked for debugging help."),
    ("constraint", "HARD CONSTRAINT: The budget cap is $500 in total; never exceed it without approval."),
    ("rule", "SAFETY RULE: Never run the purge tool without a second operator present."),
    ("constraint", "HARD CONSTRAINT: Report every time in the Europe/Paris timezone."),
    ("fact", "FACT: The production database is Postgres 16, in eu-west-3."),
]


def _profile(name: str, horizon: int) -> CapacityProfile:
    return CapacityProfile(ProfileKey("local", name), 8_192, Horizon(horizon, 0.9, 0.0), Ewma(TPC, 5), 256)


def _session(root: Path) -> tuple[LedgerStore, SessionView]:
    store, view = ledger_session(root, turns=12)
    for category, text in STATED:
        eid = store.append("s", [WorkContract(text=text, category=category, key=text, via="api")])[0]
        view.add(store.get(eid))
    return store, view


async def _prepare(view: SessionView, store: LedgerStore, prof: CapacityProfile, directive: str) -> Prepared:
    async def summarise(v: SessionView, p: Plan) -> list[str]:
        return []  # no summary: a packet stands as its evidence list or pointer

    prep = await prepare(view, prof, directive, ledger=store, session="s", summarise=summarise,
                         model=prof.key.model, system=SYSTEM)
    record_plan(store, "s", view, prep.plan)
    return prep


def _contract(prep: Prepared) -> str:
    text = "".join(getattr(b, "text", "") for m in prep.request.messages for b in m.content)
    found = re.search(r"<work_contract>.*?</work_contract>", text, re.S)
    return found.group(0) if found else ""


async def test_the_stated_items_get_the_room_they_need_and_keep_it_across_requests(tmp_path: Path) -> None:
    store, view = _session(tmp_path / "ledger")
    with store:
        prof = _profile("roomy", 6_000)
        items = view.index.stated.current()
        need = estimate_tokens(len(render_contract(items, (), 1 << 30, TPC)), TPC)
        first = await _prepare(view, store, prof, "What changed in the parser?")
        second = await _prepare(view, store, prof, "And in the lexer, since then?")
    assert first.plan.budget.contract == second.plan.budget.contract == need  # all it needs, no share of it
    assert _contract(first) == _contract(second)  # the same items, no turn of theirs: the same bytes
    assert all(text in _contract(first) for _, text in STATED)
    for prep in (first, second):
        assert request_tokens(prof, prep.request) <= request_budget(prof)


async def test_a_tight_budget_carries_the_rules_and_constraints_first_and_never_passes_it(tmp_path: Path) -> None:
    store, view = _session(tmp_path / "ledger")
    with store:
        pre = prefix_tokens(_profile("x", 1_000), SYSTEM)
        # The prompt beside the prefix holds the rules, the constraints and the directive, not every item.
        prof = _profile("tight", pre + 140)
        prep = await _prepare(view, store, prof, "Carry on with the importer.")
    contract = _contract(prep)
    assert request_tokens(prof, prep.request) <= request_budget(prof)
    assert estimate_tokens(len(contract) + 1, TPC) <= prep.plan.budget.contract
    rules = [text.split(": ", 1)[1] for category, text in STATED if category in ("rule", "constraint")]
    assert all(rule in contract for rule in rules)  # under their headings, without the label
    assert "rule:\n" in contract and "constraint:\n" in contract
    assert "not shown for room" in contract and "commitments() lists them" in contract
    assert "staging.example.internal" not in contract  # a fact comes after the rules, the constraints, the goal
    assert prep.plan.budget.budget == 0  # the history gave way: its turns are behind the rescue's reset


SAID = [  # (category, text), said in the directives of turns 11 and 12 (extracted at their close)
    ("rule", "SAFETY RULE: Never delete a tenant's backups, whatever the ticket says."),
    ("constraint", "HARD CONSTRAINT: At most 3 retries per failed migration step."),
]


def _said_session(root: Path) -> tuple[LedgerStore, SessionView]:
    """``_session`` with two items extracted from the directives of the last two turns."""
    store, view = _session(root)
    for ordinal, (category, text) in zip((11, 12), SAID, strict=True):
        turn_id = view.index.turn(ordinal).id
        eid = store.append("s", [WorkContract(text=text, category=category, key=text, via="directive",
                                              turn_id=turn_id, entry_id=turn_id)])[0]
        view.add(store.get(eid))
    return store, view


async def test_items_whose_turns_are_carried_whole_are_not_charged_and_their_room_goes_to_the_history(
        tmp_path: Path) -> None:
    """One source per fact, charged once (issue 34 item 2): the items said in turns the plan carries whole are
    neither repeated in the contract nor kept in its room; what they would take goes to the history's budget."""
    store, view = _said_session(tmp_path / "ledger")
    with store:
        prof = _profile("roomy", 6_000)
        every = view.index.stated.current()
        pinned = [it for it in every if it.via == "api"]
        reserved = estimate_tokens(len(render_contract(every, (), 1 << 30, TPC)), TPC)
        need = estimate_tokens(len(render_contract(pinned, (), 1 << 30, TPC)), TPC)
        first = await _prepare(view, store, prof, "What changed in the parser?")
        second = await _prepare(view, store, prof, "And in the lexer, since then?")
    for prep in (first, second):
        p = prep.plan
        assert {11, 12} <= {t.ordinal for t in p.shown() if t.fidelity.code == "F"}
        assert p.budget.contract == need < reserved  # the pinned items only
        b = p.budget
        assert b.budget == b.horizon - b.prefix - b.tail - b.output_reserve - b.current_turn_reserve
        assert request_tokens(prof, prep.request) <= request_budget(prof)
        contract = _contract(prep)
        assert all(text in contract for _, text in STATED) and not any(text in contract for _, text in SAID)
    assert _contract(first) == _contract(second)  # the same items and turns carried whole: the same bytes


async def test_a_budget_that_cannot_keep_the_turns_whole_carries_their_items_in_the_contract(tmp_path: Path) -> None:
    """Where the history cannot keep turns 11 and 12 whole, their items are carried in the contract, in its room:
    freeing the room never leaves an item out of both the contract and the history."""
    store, view = _said_session(tmp_path / "ledger")
    with store:
        pre = prefix_tokens(_profile("x", 1_000), SYSTEM)
        every = view.index.stated.current()
        whole_contract = estimate_tokens(len(render_contract(every, (), 1 << 30, TPC)), TPC)
        seen = set()
        # all in the packet; turn 11 whole, 12 a card; both whole (at this session's sizes)
        for extra in (60, 300, 590, 630, 660):
            prof = _profile(f"h{extra}", pre + whole_contract + extra)
            prep = await _prepare(view, store, prof, "Carry on with the importer.")
            p = prep.plan
            whole = {t.ordinal for t in p.shown() if t.fidelity.code == "F"}
            seen.add(frozenset(whole & {11, 12}))
            contract = _contract(prep)
            assert request_tokens(prof, prep.request) <= request_budget(prof), extra
            assert estimate_tokens(len(contract) + 1, TPC) <= p.budget.contract <= whole_contract
            for ordinal, (_, text) in zip((11, 12), SAID, strict=True):
                assert ordinal in whole or text.split(": ", 1)[1] in contract, (extra, ordinal, contract)
    assert seen == {frozenset(), frozenset({11}), frozenset({11, 12})}
