"""The freshness classifier (spec §7 "Stale data") on a table of directives, and the fail-closed statement."""

from __future__ import annotations

import pytest

from vak_context.context.rules.freshness import (
    RecordedFigure,
    accepts_no_live_data,
    fail_closed_statement,
    figure_of,
    last_figure,
    seeks_live_value,
)

MUST_FIRE = [
    "the current price of copper",  # the spec's example
    "the live score",  # the spec's example
    "What is the current price of copper?",
    "what's the live score of the match?",
    "What is the weather in Paris right now?",
    "How much is a barrel of Brent crude today?",
    "What is the latest news in AI?",
    "what is the current top news in AI",  # the spec's topic-mismatch directive
    "current temperature in Oslo",
    "Tell me the latest version of numpy on PyPI",
    "What is the EUR to USD exchange rate at the moment?",
    "Who is currently leading the Tour de France?",
    "Is the London Underground running normally today?",
    "What are the live results of the election?",
    "Give me the up-to-date population of Tokyo",
    "how is bitcoin trading now?",
    "Show me real-time traffic on the A1",
    "What are mortgage rates this week?",
    "Find the latest release notes for Python",
    "Check the live odds for the final",
    "Who won today's stage?",
    "what is the current inflation rate in Japan?",
]

MUST_NOT_FIRE = [
    "the current directory",  # the spec's examples
    "refactor the current parser",
    "what are you holding right now",
    "we live in the city",
    "what is on the current branch",
    "What files are in the current directory?",
    "Show me the current file",
    "What time is it right now?",
    "What is today's date?",
    "What day is it today?",
    "What is your current task?",
    "What are you doing right now?",
    "Rename the current function to parse_header",
    "Run the latest tests",
    "Update the current config to use port 8080",
    "Where do they live?",
    "I live in Noida; what is a good name for a cat?",
    "Summarise the notes file",
    "What is the capital of France?",
    "Explain how the planner ranks turns",
    "Fix the bug in the current implementation",
    "what did we decide earlier about caching?",
]


def test_the_table_has_at_least_forty_directives_half_each_way() -> None:
    """The table is at least 40 directives, at least 20 that must fire and 20 that must not."""
    assert len(MUST_FIRE) >= 20 and len(MUST_NOT_FIRE) >= 20 and len(MUST_FIRE) + len(MUST_NOT_FIRE) >= 40


@pytest.mark.parametrize("directive", MUST_FIRE)
def test_a_request_for_a_value_as_it_stands_now_fires(directive: str) -> None:
    """Temporal deixis in a request that seeks a fact about the world sets the live-data domain."""
    assert seeks_live_value(directive)


@pytest.mark.parametrize("directive", MUST_NOT_FIRE)
def test_local_time_agent_state_changes_and_the_verb_live_do_not_fire(directive: str) -> None:
    """Deixis beside something local, a time, the agent's own state, a change request, or "live" as a verb
    (and no deixis at all) leaves the directive outside the live-data domain."""
    assert not seeks_live_value(directive)


@pytest.mark.parametrize(("answer", "accepted"), [
    ("I have no live data for the copper price.", True),
    ("I don't have access to real-time prices.", True),
    ("I cannot retrieve the current value without a search tool.", True),
    ("Copper trades at 9,400 USD per tonne.", False),
    ("The current price is 9,400 USD.", False),
])
def test_an_explicit_no_live_data_answer_is_recognised(answer: str, accepted: bool) -> None:
    """An answer saying plainly it has no live data is accepted; one that states a figure is not."""
    assert accepts_no_live_data(answer) is accepted


def test_the_fail_closed_statement_names_the_last_figure_and_when() -> None:
    """The statement says no current value was retrieved and names the most recent recorded figure with
    its turn and time; with no figure it says the conversation recorded none."""
    figures = [RecordedFigure("Copper: 9100 USD/t", 1, 1_764_400_000.0),
               RecordedFigure(figure_of("", [{"label": "Temperature in Noida", "value": 28, "unit": "°C"}]), 2,
                              1_764_504_000.0)]
    text = fail_closed_statement(last_figure(figures))
    assert text.startswith("No current value was retrieved")
    assert '"Temperature in Noida: 28 °C" (turn 2, 2025-11-30 12:00 UTC)' in text
    assert "no earlier figure" in fail_closed_statement(None)


def test_a_figure_is_read_from_a_card_value_or_a_sentence_with_a_number() -> None:
    """A card's label, value and unit; else the first sentence of the answer holding a number; else none."""
    assert figure_of("It is sunny. It was 21 degrees at noon.", []) == "It was 21 degrees at noon."
    assert figure_of("No numbers here.", []) == ""
    assert figure_of("", [{"label": "Price", "value": "9,400", "unit": "USD"}]) == "Price: 9,400 USD"
