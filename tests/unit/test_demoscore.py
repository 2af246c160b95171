"""The demo's answer score (cli/demoscore.py): each live directive's answer judged against the workspace, and
what it refuses to credit (empty answers, the directive quoted back, invented names, the wrong case)."""

from __future__ import annotations

from pathlib import Path

import pytest

from vak_context.cli.demoscore import (
    DEMO_CHECKS,
    STOP_WORDS,
    content_words,
    first_paragraph,
    names_in,
    render_score,
    score_answers,
    score_listing,
    score_readme,
    score_test_command,
    tokens,
    workspace_facts,
)
from vak_context.cli.mainjob import LIVE_DIRECTIVES

LISTING, README_Q, TESTS_Q = LIVE_DIRECTIVES
ENTRIES = ["Makefile", "README.md", "agent", "cli", "docs", "pyproject.toml", "tests", ".git"]
README = """# vak-context

A context engine for LLM agents: one append-only, hash-linked ledger per session; a measured
capacity profile per model.

## Two commands

make demo and make test, with a ledger and agents.
"""


def test_the_demos_directives_are_the_scored_ones_in_order() -> None:
    assert tuple(DEMO_CHECKS) == LIVE_DIRECTIVES
    assert list(DEMO_CHECKS.values()) == ["listing", "readme", "test_command"]


def test_tokens_and_content_words_are_defined_as_documented() -> None:
    """Lower-cased runs of letters and digits; content words are 3+ characters, not all digits, not stop words."""
    assert tokens("Hash-linked README.md, v2 LLM") == ["hash", "linked", "readme", "md", "v2", "llm"]
    assert content_words("This project is a Context engine for LLM agents in 2026, v2 of it.") == {
        "context", "engine", "llm", "agents"}
    assert {"the", "this", "project", "is", "what", "one", "sentence"} <= STOP_WORDS
    assert first_paragraph(README).startswith("A context engine") and "Two commands" not in first_paragraph(README)
    assert first_paragraph("# Title only\n") == "" and first_paragraph("") == ""


def test_a_real_listing_is_right_and_names_count_only_whole() -> None:
    answer = "The workspace holds Makefile, README.md, `agent/`, cli/ and pyproject.toml."
    verdict = score_listing(LISTING, answer, ENTRIES)
    assert verdict.right and verdict.found == ("Makefile", "README.md", "agent", "cli", "pyproject.toml")
    assert "5 real entries named" in verdict.reason
    # inside a longer word, a path segment with a suffix, or another name: not the entry
    assert names_in("a client of vak-cli uses cli.py and agents", ENTRIES) == []
    assert names_in("see docs. and tests", ENTRIES) == ["docs", "tests"]  # sentence punctuation is fine


@pytest.mark.parametrize("answer", [
    "",  # empty
    "   \n",
    "List the files in the workspace.",  # the directive quoted back
    "The workspace contains src/, lib/, main.py, setup.py and index.html.",  # invented names
    "makefile, readme.md, AGENT, Cli",  # the wrong case: file names are case-sensitive
    "Makefile and README.md",  # two are not three
])
def test_listings_that_are_wrong(answer: str) -> None:
    verdict = score_listing(LISTING, answer, ENTRIES)
    assert not verdict.right and "3 needed" in verdict.reason


def test_the_readme_sentence_shares_content_words_with_the_first_paragraph_only() -> None:
    right = score_readme(README_Q, "vak-context is a context engine for LLM agents with a hash-linked ledger.",
                         first_paragraph(README))
    assert right.right and right.found == ("agents", "context", "engine", "hash", "ledger", "linked", "llm")
    # case does not matter for words
    assert score_readme(README_Q, "A CONTEXT ENGINE FOR LLM AGENTS.", first_paragraph(README)).right
    # words that are only in a later paragraph ("demo", "commands") do not count
    later = score_readme(README_Q, "It has two commands, make demo and make test.", first_paragraph(README))
    assert not later.right and later.found == ()


@pytest.mark.parametrize("answer", [
    "",
    "Read README.md and say in one sentence what this project is.",  # the directive quoted back
    "This project is a project that is what the README says it is.",  # stop words only
    "It is a context thing.",  # one shared word
])
def test_readme_answers_that_are_wrong(answer: str) -> None:
    assert not score_readme(README_Q, answer, first_paragraph(README)).right


def test_without_a_readme_the_readme_answer_is_wrong_with_the_reason() -> None:
    verdict = score_readme(README_Q, "A context engine for LLM agents.", None)
    assert not verdict.right and "no README.md" in verdict.reason


@pytest.mark.parametrize(("answer", "right"), [
    ("Run `make test`.", True),
    ("The tests run with Make test, which lints first.", True),  # case
    ("MAKE   TEST", True),
    ("", False),
    ("Which command runs the tests, according to what you read? Answer in one sentence.", False),  # quoted
    ("Run make tests.", False),  # another command
    ("make test-unit", False),
    ("pytest runs the tests; make demo runs the demo.", False),
])
def test_the_test_command_must_be_make_test(answer: str, right: bool) -> None:
    assert score_test_command(TESTS_Q, answer).right is right


def test_a_directive_that_says_the_answer_credits_nothing_of_it() -> None:
    """What the directive itself says is subtracted: a directive naming entries or make test gives no credit."""
    directive = "Does `make test` use Makefile, cli and docs?"
    assert score_test_command(directive, "yes, make test").right is False
    assert score_listing(directive, "Makefile, cli, docs", ENTRIES).found == ()


def test_score_answers_scores_the_demos_directives_and_skips_others(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text(README)
    for name in ("Makefile", "cli", "docs"):
        (tmp_path / name).mkdir() if name != "Makefile" else (tmp_path / name).write_text("")
    entries, readme = workspace_facts(tmp_path)
    assert entries == ["Makefile", "README.md", "cli", "docs"] and readme == README
    score = score_answers([(LISTING, "Makefile, README.md, cli, docs", "completed"),
                           (README_Q, "A ledger.", "completed"), (TESTS_Q, "`make test`", "completed"),
                           ("Something else?", "x", "completed")], entries, readme)
    assert score is not None and (score.right, score.of) == (2, 3)
    assert [v["right"] for v in score.as_dict()["verdicts"]] == [True, False, True]
    text = render_score(score, 421.04)
    assert text.splitlines()[-1] == "demo score 2/3 in 421.0 s"
    assert "wrong  readme" in text and "right  listing" in text
    assert score_answers([("Something else?", "x", "completed")], entries, readme) is None
    assert workspace_facts(tmp_path / "cli") == ([], None)


def test_a_turn_a_rule_closed_is_wrong_whatever_its_statement_quotes() -> None:
    """The repeated-call close quotes the turn's results (the listing, the README): that is the engine's text,
    so a degraded or failed turn scores wrong even where its statement would pass the check."""
    quote = "The turn's results: Makefile README.md agent cli docs. A context engine for LLM agents. make test"
    score = score_answers([(LISTING, quote, "degraded"), (README_Q, quote, "failed"), (TESTS_Q, quote, "degraded")],
                          ENTRIES, README)
    assert score is not None and score.right == 0
    assert score.verdicts[0].reason.startswith("the turn ended degraded: its answer is a rule's")
    completed = score_answers([(LISTING, quote, "completed")], ENTRIES, README)
    assert completed is not None and completed.right == 1
