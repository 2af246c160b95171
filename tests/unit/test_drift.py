"""The pure turn rules of vak_context.context.rules.drift: state in, state and verdict out."""

from __future__ import annotations

from vak_context.context.rules import drift
from vak_context.context.rules.drift import PriorTurn


def test_topic_mismatch_is_silent_until_a_retrieval_succeeded() -> None:
    """A card sharing no word with anything is not gated while nothing was retrieved this turn; once an
    observation returned text, the same card is intercepted with [topic-mismatch]."""
    state = drift.start("Show the build status as a metric card")
    payload = {"label": "Noida Weather", "value": 28}
    _, errors, verdict = drift.gate_cards(state, [(0, payload)], [])
    assert errors == {} and verdict.action == "continue"
    read = drift.note_results(state, [(True, False, "build 412 passed on main")])
    _, errors, _ = drift.gate_cards(read, [(0, payload)], [])
    assert errors[0].startswith("[topic-mismatch]")


def test_a_failed_or_non_observing_call_is_not_an_observation() -> None:
    """Only a successful call of a tool that declares it observes counts: an error, or a tool that does
    not observe, leaves the turn unobserved."""
    state = drift.start("What is the current price of copper?")
    assert not drift.note_results(state, [(True, True, "timeout"), (False, False, "ok")]).observed
    assert drift.note_results(state, [(True, False, "9,400 USD")]).observed


def test_a_mixed_batch_breaks_the_run_of_repeat_batches() -> None:
    """Repeat batches count only when consecutive and card-only: a batch with a new card or another call
    resets the count."""
    state = drift.start("Show our team size")
    state, _ = drift.after_cards(state, ["p1"], only_cards=True)
    state, _ = drift.after_cards(state, ["p1"], only_cards=True)
    assert state.repeat_batches == 1
    state, _ = drift.after_cards(state, ["p1"], only_cards=False)
    assert state.repeat_batches == 0
    state, _ = drift.after_cards(state, ["p1", "p2"], only_cards=True)
    assert state.repeat_batches == 0


def test_a_change_of_subject_pauses_the_previous_subjects_directives() -> None:
    """Directives of the previous subject (back to the last one sharing a word with the new directive)
    are paused; a follow-up sharing a word pauses nothing."""
    prior = [PriorTurn("Summarise the release notes"), PriorTurn("Which bugs did the parser fix?"),
             PriorTurn("List the parser changes")]
    assert drift.paused_directives("What is the capital of France?", prior) == (
        "Summarise the release notes", "Which bugs did the parser fix?", "List the parser changes")
    assert drift.paused_directives("And the parser's open bugs?", prior) == ()
    assert drift.paused_directives("Anything else?", []) == ()
    # Carrying on changes no subject, though it shares no word with what it carries on.
    for carry_on in ("Continue with the plan.", "OK, go ahead.", "Please proceed", "keep going"):
        assert drift.paused_directives(carry_on, prior) == ()
    assert drift.paused_directives("Continue reading the ledger's crash report instead?", prior) != ()


def test_a_verbatim_repeat_is_drift_only_for_a_turn_on_another_subject() -> None:
    """The same words as an earlier answer are drift when that turn asked about something else, and the
    answer when the question is asked again (the two directives share a content word)."""
    prior = [PriorTurn("Read notes.md and tell me what the project is called.", "The project is called Vak.")]
    state = drift.start("What is the project called again?")
    _, verdict = drift.after_reply(state, "The project is called Vak.", prior)
    assert verdict.action == "answer"
    state = drift.start("Rename beta to delta in the plan")
    _, verdict = drift.after_reply(state, "The project is called Vak.", prior)
    assert verdict.action == "redo" and verdict.tag == "steering-drift"
