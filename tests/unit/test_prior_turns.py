"""``drift.PriorTurns``: the earlier turns with their narrations indexed, so the drift check after each reply
looks up the turns that said the same words instead of scanning every turn (issue 37); the same answer as the
scan whatever is appended, replaced or cut."""

from __future__ import annotations

import random

from vak_context.agent.turnrules import TurnRules
from vak_context.context.rules import drift
from vak_context.context.rules.drift import PriorTurn, PriorTurns


def scan(turns: list[PriorTurn], narration: str) -> list[PriorTurn]:
    return [p for p in turns if p.narration == narration]


def test_lookups_equal_the_scan_as_the_list_grows_and_changes() -> None:
    rng = random.Random(7)
    turns = PriorTurns()
    for step in range(400):
        op = rng.random()
        if op < 0.7:
            turns.append(PriorTurn(f"asked {step}", rng.choice(["", "Done.", "The note says x.", f"unique {step}"])))
        elif op < 0.8 and turns:
            turns[rng.randrange(len(turns))] = PriorTurn("replaced", rng.choice(["Done.", "other"]))
        elif op < 0.9 and turns:
            del turns[rng.randrange(len(turns)):]
        for narration in ("", "Done.", "The note says x.", "other", f"unique {step - 1}"):
            assert turns.narrated(narration) == scan(list(turns), narration), (step, narration)


def test_after_reply_reads_the_same_verdicts_from_a_plain_list_and_the_index() -> None:
    earlier = [PriorTurn(f"weather in city {i}", "The forecast for the city is sunny and warm all week long.")
               for i in range(30)] + [PriorTurn("stock price of ACME", "ACME trades at 12 dollars today.")]
    state = drift.start("population of Paris")
    reply = "The forecast for the city is sunny and warm all week long."
    assert drift.after_reply(state, reply, earlier) == drift.after_reply(state, reply, PriorTurns(earlier))
    assert drift.after_reply(state, reply, PriorTurns(earlier))[1].action == "redo"


def test_the_rules_keep_their_history_indexed_whatever_they_are_given() -> None:
    rules = TurnRules(services=None, history=[PriorTurn("a", "x")])  # type: ignore[arg-type]
    assert isinstance(rules.history, PriorTurns) and rules.history.narrated("x") == [PriorTurn("a", "x")]
    rules.history = [PriorTurn("b", "y")]
    assert isinstance(rules.history, PriorTurns) and rules.history.narrated("y") == [PriorTurn("b", "y")]
    rules.finish("c", "", 0.0)
    assert rules.history.narrated("") == [PriorTurn("c", "", None)]
