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
