"""The repeated-call rule of :mod:`vak_context.context.rules.drift`, pure: what counts as the same call, what forgets, what closes."""

from __future__ import annotations

from vak_context.context.rules import drift

LISTING = "./ (2 entries)\nbig.log\t2 bytes\nnotes.txt\t6 bytes"


def test_a_repeated_read_only_call_is_answered_with_an_error_then_the_second_repeat_closes_quoting_it() -> None:
    """A read-only call with the same name and arguments (key order aside) as one that ran is not run: its
    error names the tool (not the earlier call's id, which a small model then tries to recall); a different call
    in the same step runs; the second repeating step closes "degraded" with the earlier result quoted line by
    line."""
    state = drift.note_calls(drift.start("List the files"), [("list_dir", {"path": "."}, "c1", LISTING)])
    state, errors, verdict = drift.gate_repeats(state, [(0, "list_dir", {"path": "."}), (1, "read_file", {"path": "a"})])
    assert set(errors) == {0} and "called list_dir" in errors[0] and "above, unchanged" in errors[0]
    assert "c1" not in errors[0]
    assert verdict.action == "continue"
    state = drift.note_calls(state, [("read_file", {"path": "a"}, "c3", "alpha")])
    state, errors, verdict = drift.gate_repeats(state, [(0, "read_file", {"path": "a"}), (1, "list_dir", {"path": "."})])
    assert set(errors) == {0, 1} and "called read_file" in errors[0]
    assert (verdict.action, verdict.tag, verdict.outcome) == ("close", "repeated-call", "degraded")
    assert "> notes.txt\t6 bytes" in verdict.text and "> alpha" in verdict.text and "(c1)" in verdict.text


def test_other_arguments_a_side_effect_or_a_call_with_one_in_its_step_are_not_repeats() -> None:
    """Other arguments are another call; a tool outside the read-only set is never held back; a step that
    makes a world-changing call is not checked, and after it ran every earlier result is forgotten."""
    state = drift.note_calls(drift.start("x"), [("list_dir", {"path": "."}, "c1", LISTING)])
    assert drift.gate_repeats(state, [(0, "list_dir", {"path": "src"})])[1] == {}
    state = drift.note_calls(state, [("write_file", {"path": "n"}, "c2", "ok")])
    assert state.ran == ()
    mixed = drift.note_calls(drift.start("x"), [("list_dir", {"path": "."}, "c1", LISTING)])
    same_step = drift.gate_repeats(mixed, [(0, "write_file", {"path": "n"}), (1, "list_dir", {"path": "."})])
    assert same_step[1] == {} and same_step[0].repeat_strikes == 0
    assert drift.gate_repeats(state, [(0, "list_dir", {"path": "."})])[1] == {}
    assert drift.call_key("grep", {"a": 1, "b": 2}) == drift.call_key("grep", {"b": 2, "a": 1})


def test_the_close_quotes_what_the_turn_found_not_the_errors_it_looped_on() -> None:
    """When the turn has successful results (``note_results``' evidence) and the model loops on calls that
    failed (recall of an id that is not one), the close quotes the successful result, not the errors."""
    state = drift.note_calls(drift.start("List the files"), [("list_dir", {"path": "."}, "c1", LISTING)])
    state = drift.note_results(state, [(True, False, LISTING)])
    bad = "no evidence 'c1' in this session."
    state = drift.note_calls(state, [("recall", {"id": "c1"}, "c2", bad)])
    state = drift.note_results(state, [(True, True, bad)])
    state, _, verdict = drift.gate_repeats(state, [(0, "recall", {"id": "c1"})])
    assert verdict.action == "continue"
    state, _, verdict = drift.gate_repeats(state, [(0, "recall", {"id": "c1"})])
    assert verdict.action == "close" and "> notes.txt\t6 bytes" in verdict.text and bad not in verdict.text


def test_a_reply_that_copies_a_rule_note_is_redone_once_then_closed() -> None:
    """A reply starting with one of the rules' own notes (``[repeated-call] …``, as Qwen answered a new turn in
    the live demo) is not an answer: the first gets a ``rule-echo`` redo pointing at the request (not quoting it,
    which a small model copies as its answer), the second closes the turn "degraded"; an answer that merely mentions a bracketed word is still the answer."""
    state = drift.start("Read README.md and say what this project is.")
    note = "[repeated-call] not run again: you already called list_dir with these arguments in this turn"
    state, verdict = drift.after_reply(state, note, [])
    assert (verdict.action, verdict.tag) == ("redo", "rule-echo") and "README.md" not in verdict.text
    assert "the user's request above" in verdict.text
    state, verdict = drift.after_reply(state, "  " + note, [])
    assert (verdict.action, verdict.tag, verdict.outcome) == ("close", "rule-echo", "degraded")
    _, verdict = drift.after_reply(drift.start("What is it?"), "It is a context engine; see [docs] for more.", [])
    assert (verdict.action, verdict.text) == ("answer", "It is a context engine; see [docs] for more.")


def test_a_second_empty_reply_closes_quoting_what_the_turn_found_or_saying_there_is_no_answer() -> None:
    """The empty-step close is never an empty answer: with successful observations this turn it quotes them
    (as the repeated-call close does); with none it says the turn has no answer. The first empty reply is a redo."""
    state = drift.note_calls(drift.start("List the files"), [("list_dir", {"path": "."}, "c1", LISTING)])
    state = drift.note_results(state, [(True, False, LISTING)])
    state, verdict = drift.after_reply(state, "", [])
    assert verdict.action == "redo"
    _, verdict = drift.after_reply(state, "  ", [])
    assert (verdict.action, verdict.tag, verdict.outcome) == ("close", "empty-step", "degraded")
    assert verdict.text.startswith("The model replied with neither text nor a tool call twice")
    assert 'What list_dir({"path": "."}) returned (c1):' in verdict.text and "> notes.txt\t6 bytes" in verdict.text
    bare, _ = drift.after_reply(drift.start("What is it?"), "", [])
    _, verdict = drift.after_reply(bare, "", [])
    assert verdict.action == "close" and verdict.text.endswith("the turn ends without an answer.")


def test_the_redo_rule_turns_the_second_strike_into_one_answer_step_and_the_third_closes() -> None:
    """``redo=True``: the second repeating step gets a ``redo`` verdict with the answer-now nudge (once a turn:
    ``answer_asked``), its repeats still answered with their errors; the third closes as the second would."""
    state = drift.note_calls(drift.start("List the files"), [("list_dir", {"path": "."}, "c1", LISTING)])
    state, _, verdict = drift.gate_repeats(state, [(0, "list_dir", {"path": "."})], redo=True)
    assert verdict.action == "continue" and not state.answer_asked
    state, errors, verdict = drift.gate_repeats(state, [(0, "list_dir", {"path": "."})], redo=True)
    assert (verdict.action, verdict.tag, verdict.text) == ("redo", "repeated-call", drift.ANSWER_NOW)
    assert set(errors) == {0} and state.answer_asked
    state, _, verdict = drift.gate_repeats(state, [(0, "list_dir", {"path": "."})], redo=True)
    assert (verdict.action, verdict.outcome) == ("close", "degraded") and "> notes.txt\t6 bytes" in verdict.text
    assert drift.start("again").answer_asked is False
