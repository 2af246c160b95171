"""The directive-echo rule of :mod:`vak_context.context.rules.drift`, pure: a reply that only repeats the request
(Qwen2.5-Coder-1.5B, live, copied the directive a nudge quoted as its answer) is redone once, then closed; the
nudges themselves never quote the directive."""

from __future__ import annotations

import pytest

from vak_context.context.rules import drift

ASK = "List the files in the workspace."
LISTING = "./ (2 entries)\nbig.log\t2 bytes\nnotes.txt\t6 bytes"


@pytest.mark.parametrize("reply", [
    "List the files in the workspace.",
    "List the files in the workspace",
    "  list the FILES   in the\nworkspace!  ",
    '"List the files in the workspace."',
    "'List the files in the workspace'?",
    "\u201cList the files in the workspace.\u201d",
    "`List the files in the workspace.`",
    "answer: List the files in the workspace.",
    "Answer: 'List the files in the workspace.'",
    "otherwise answer: 'List the files in the workspace.'",
    "You asked: List the files in the workspace.",
    "List the files in the workspace. List the files in the workspace.",
])
def test_a_reply_that_only_repeats_the_directive_is_an_echo(reply: str) -> None:
    """Exact copies, copies differing in case, whitespace, quotes or edge punctuation, and the copy inside a
    short wrapper of label words (the old nudge's ``otherwise answer: '…'`` included) are echoes."""
    assert drift.echoes_directive(reply, ASK)


@pytest.mark.parametrize("reply", [
    "List the files in the workspace: big.log and notes.txt.",
    "You asked me to list the files in the workspace. There are two: big.log (2 bytes) and notes.txt (6 bytes).",
    "I will list the files in the workspace now.",
    "The workspace holds big.log and notes.txt.",
    "List the files",
    "",
])
def test_an_answer_with_content_beside_the_directive_is_not_an_echo(reply: str) -> None:
    """The directive plus real content, a reply that mentions part of it, or another answer is the answer."""
    assert not drift.echoes_directive(reply, ASK)


@pytest.mark.parametrize(("directive", "reply"), [
    ("", ""), ("", "anything"), ("   ", "   "), ('""', '""'), ("?!", "?!"), ("Hello", "Hello!"), ("'thanks'", "Thanks."),
])
def test_an_empty_or_one_word_directive_is_never_echoed(directive: str, reply: str) -> None:
    """No directive (empty, blank, only quotes or punctuation) has an echo; nor has a one-word one, where the
    same word back is a greeting or an acknowledgement."""
    assert not drift.echoes_directive(reply, directive)


def test_an_echo_is_redone_once_without_quoting_the_directive_then_closed_degraded() -> None:
    """The first echo gets a ``directive-echo`` redo saying the reply repeats the request, asking for the answer
    or a tool call, with no copy of the directive to take; the second closes "degraded" with a statement that
    says so and quotes what the turn's calls found."""
    state = drift.start(ASK)
    state, verdict = drift.after_reply(state, ASK, [])
    assert (verdict.action, verdict.tag, verdict.text) == ("redo", "directive-echo", drift.DIRECTIVE_ECHO_NUDGE)
    assert "repeats the user's request" in verdict.text and "call a tool" in verdict.text
    assert "list the files" not in verdict.text.lower()
    state = drift.note_calls(state, [("list_dir", {"path": "."}, "c1", LISTING)])
    state = drift.note_results(state, [(True, False, LISTING)])
    state, verdict = drift.after_reply(drift.stepped(state), f'Answer: "{ASK}"', [])
    assert (verdict.action, verdict.tag, verdict.outcome) == ("close", "directive-echo", "degraded")
    assert verdict.text.startswith("The model repeated the user's request instead of answering it twice")
    assert "> notes.txt\t6 bytes" in verdict.text
    _, verdict = drift.after_reply(drift.after_reply(drift.start(ASK), ASK, [])[0], ASK.upper(), [])
    assert verdict.action == "close" and verdict.text.endswith("the turn ends without an answer.")


def test_a_real_answer_after_an_echo_is_the_answer() -> None:
    state, verdict = drift.after_reply(drift.start(ASK), ASK, [])
    assert verdict.action == "redo"
    _, verdict = drift.after_reply(state, "big.log and notes.txt.", [])
    assert (verdict.action, verdict.text) == ("answer", "big.log and notes.txt.")


def test_no_nudge_quotes_the_directive_and_a_copied_echo_nudge_is_a_rule_echo() -> None:
    """The empty-step, rule-echo, steering-drift and freshness nudges point at "the user's request above" and
    carry no copy of it; a reply that starts with the directive-echo nudge is the rule-echo rule's."""
    live = "What is the current price of gold in London?"
    empty = drift.after_reply(drift.start(live), "", [])[1]
    copied = drift.after_reply(drift.start(live), "[empty-step] your reply had neither text", [])[1]
    prior = [drift.PriorTurn("Summarise the notes", "The notes list alpha.")]
    drifted = drift.after_reply(drift.start("Rename beta to delta"), "The notes list alpha.", prior)[1]
    fresh = drift.after_reply(drift.start(live), "Gold is at 2,000 dollars.", [])[1]
    assert [v.tag for v in (empty, copied, drifted, fresh)] == ["empty-step", "rule-echo", "steering-drift",
                                                                 "freshness-check"]
    assert all("gold" not in v.text.lower() for v in (empty, copied, fresh))
    assert "Rename" not in drifted.text
    assert all("request above" in v.text for v in (empty, copied, drifted, fresh))
    assert drift.after_reply(drift.start(ASK), drift.DIRECTIVE_ECHO_NUDGE, [])[1].tag == "rule-echo"
