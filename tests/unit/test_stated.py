"""The stated state's pure parts (docs/STATE.md, issue 34): what the deterministic pass recognises in varied
phrasings and what it leaves alone, the keys that make a later statement supersede an earlier one (a paraphrase
too), the fold as of a turn, the ``<work_contract>`` (budget order, whole items, what does not fit named with
its recall, items whose directive is carried whole left out, the same bytes for the same inputs), the
``commitments`` tool's arguments, and the contradiction check."""

from __future__ import annotations

import pytest

from vak_context.agent.tools.commitments import parse_commitment
from vak_context.context.stated.conflict import contradictions
from vak_context.context.stated.extract import extract
from vak_context.context.stated.items import StatedItem, StatedState
from vak_context.context.stated.render import render_contract
from vak_context.events.payloads import WorkContract

RECOGNISED = [  # (directive, category, key)
    ("Never push to main.", "rule", "never push to main"),
    ("Please don't touch the migrations folder; the DBA owns it.", "rule",
     "don't touch the migrations folder the dba owns it"),
    ("You must not call the billing API from tests.", "rule", "you must not call the billing api from tests"),
    ("Force-pushing is strictly forbidden here.", "rule", "force-pushing is strictly forbidden here"),
    ("Always run the linter before you commit.", "rule", "always run the linter before you commit"),
    ("All commits must be signed.", "rule", "all commits must be signed"),
    ("From now on, answer in French.", "rule", "answer in french"),
    ("No external network calls from the sandbox.", "rule", "no external network calls from the sandbox"),
    ("Our budget is $1,200 for the quarter.", "constraint", "budget"),
    ("Spend no more than €50 on API calls.", "constraint", "budget"),
    ("You get at most 3 retries per call.", "constraint", "limit:retry"),
    ("Keep every answer under 200 words, please.", "constraint", "limit:word"),
    ("Touch a maximum of 5 files per change.", "constraint", "limit:file"),
    ("The deadline is Friday 17:00 UTC.", "constraint", "deadline"),
    ("It has to be done by Monday.", "constraint", "deadline"),
    ("Only use Python 3.11.", "constraint", "only use python 3.11"),
    ("My goal is to migrate auth to OAuth.", "goal", "goal"),
    ("We're trying to cut the p99 latency in half.", "goal", "goal"),
    ("The next step is wiring the audit log.", "goal", "next step"),
    ("Step 2 of 5 is done.", "goal", "phase"),
    ("The base commit is 3f9c2ab.", "fact", "base commit"),
    ("Our staging server is at 10.0.0.5.", "fact", "staging server"),
    ("This week's on-call owner is Priya.", "fact", "on-call owner"),
    ("We use Postgres 16 in production.", "fact", "we use postgres 16 in production"),
    ("I prefer tabs over spaces.", "preference", "prefer:spaces|tabs"),
    ("I'd rather have one decisive recommendation than a list.", "preference",
     "i'd rather have one decisive recommendation than a list"),
    ("Please answer in a terse style.", "preference", "answer in a terse style"),
    ("SAFETY RULE: Never reveal API keys, even when asked for debugging help.", "rule",
     "never reveal api keys even when asked for debugging help"),
    ("HARD CONSTRAINT: Budget cap is $500 total. Never exceed without explicit approval.", "constraint", "budget"),
    ("GOAL STATE: The next step is load testing the importer.", "goal", "next step"),
    ("USER PREFERENCE: User wants all measurements in metric units.", "preference",
     "user wants all measurements in metric units"),
]

LEFT_ALONE = [
    "Please fix the failing test in parser.py.",
    "I don't know why the build fails.",
    "Can you never do that again?",
    "There must be a bug in the parser.",
    "Never mind, it works now.",
    "The problem is that the cache is stale.",
    "What is the budget?",
    "```\nnever push to main\n```",
    "[the result of grep({})]: never push to main",
]


@pytest.mark.parametrize(("text", "category", "key"), RECOGNISED)
def test_a_statement_is_recognised_and_keyed(text: str, category: str, key: str) -> None:
    (draft,) = extract(text)
    assert (draft.category, draft.key, draft.text) == (category, key, text)


@pytest.mark.parametrize("text", LEFT_ALONE)
def test_requests_questions_and_quoted_text_state_nothing(text: str) -> None:
    assert extract(text) == []


def item(n: int, draft_text: str, *, turn: int | None = None, via: str = "directive", appended_in: int = 0,
         active: bool = True) -> StatedItem:
    (d,) = extract(draft_text)
    return StatedItem(f"{n:064x}", d.category, d.text, d.key, active, turn, None, None, via, appended_in)


def test_a_later_statement_of_the_same_key_supersedes_and_a_paraphrase_takes_its_key() -> None:
    state = StatedState()
    state.add(item(1, "The budget is $100.", turn=1, appended_in=1))
    state.add(item(2, "FACT: The production database runs in region eu-west-1.", turn=1, appended_in=1))
    now = state.current()
    (new_region,) = extract("FACT: Production's database is hosted in the eu-north-2 region.", now)
    assert new_region.key == now[1].key  # a paraphrase with a new value: the same subject
    state.add(item(3, "The budget is now $200.", turn=3, appended_in=3))
    assert [it.text for it in state.current()] == ["The budget is now $200.",
                                                   "FACT: The production database runs in region eu-west-1."]
    assert [it.text for it in state.current(3)] == ["The budget is $100.",  # as of turn 3: appended in it
                                                    "FACT: The production database runs in region eu-west-1."]
    state.add(StatedItem(f"{4:064x}", "constraint", "The budget is now $200.", "budget", False, appended_in=4))
    assert [it.key for it in state.current()] == ["production database"]
    assert extract("The budget is now $200.", (item(5, "The budget is now $200."),)) == []  # in force already


def test_the_contract_in_budget_order_whole_items_and_what_does_not_fit_named() -> None:
    items = [item(1, "I prefer tabs over spaces, with two blank lines between top-level definitions in every "
                     "Python module of the repository.", via="api"), item(2, "The base commit is 3f9c2ab.", via="api"),
             item(3, "Never push to main.", via="api"), item(4, "The deadline is Friday.", via="api"),
             item(5, "My goal is to ship the importer.", via="api")]
    state = StatedState(items)
    whole = render_contract(state.current(), (), 10_000, 0.25)
    assert whole.startswith("<work_contract>") and whole.endswith("</work_contract>\n")
    order = [whole.index(t) for t in ("rule:", "constraint:", "goal:", "fact:", "preference:")]
    assert order == sorted(order)
    assert render_contract(state.current(), (), 10_000, 0.25) == whole  # the same inputs, the same bytes
    tight = render_contract(state.current(), (), len(whole) // 4 - 10, 0.25)
    assert "Never push to main." in tight and "tabs" not in tight  # safety first, whole items only
    assert len(tight) // 4 <= len(whole) // 4 - 10
    assert f'recall({{"id": "{items[0].id[:12]}"}})' in tight  # the preference is named with its recall


def test_an_item_said_in_a_turn_carried_whole_is_not_repeated_a_pinned_one_is() -> None:
    said = item(1, "Never push to main.", turn=2)
    pinned = item(2, "The deadline is Friday.", turn=2, via="api")
    assert "push" not in render_contract((said, pinned), {2}, 1_000, 0.25)
    assert "push" in render_contract((said, pinned), {3}, 1_000, 0.25)
    assert render_contract((said,), {2}, 1_000, 0.25) == ""


def test_the_commitments_tool_reads_adds_and_says_how_to_call_it() -> None:
    assert parse_commitment({}, ()) is None
    added = parse_commitment({"text": "The budget is now $300", "category": "constraint"}, ())
    assert isinstance(added, WorkContract) and (added.key, added.via) == ("budget", "tool")
    assert "category must be one of" in str(parse_commitment({"text": "x", "category": "law"}, ()))
    assert "does not take 'remove'" in str(parse_commitment({"remove": "budget"}, ()))


def test_a_text_contradicting_a_prohibition_or_a_cap() -> None:
    rules = (item(1, "Never push to main."), item(2, "The budget is $100."), item(3, "At most 3 files per change."),
             item(4, "SAFETY RULE: Never reveal API keys or passwords."))
    found = {(it.key, s) for it, s in contradictions(rules, "Push the fix to main. Buy the $150 plan. "
                                                             "Sure, I can reveal the passwords.")}
    assert {k for k, _ in found} == {"never push to main", "budget", rules[3].key}
    assert contradictions(rules, "Do not push to main; open a PR. The $80 plan fits. Edit 2 files.") == []


@pytest.mark.parametrize(("first", "then"), [
    ("Never run migrations without a fresh backup.", "Never run the purge tool without a second operator."),
    ("The staging host is stg.internal.", "The production host is prod.internal."),
    ("I prefer short answers.", "I prefer code examples in Go."),
])
def test_a_different_subject_never_supersedes(first: str, then: str) -> None:
    (old,) = extract(first)
    (new,) = extract(then, (StatedItem("a" * 64, old.category, old.text, old.key),))
    assert new.key != old.key
