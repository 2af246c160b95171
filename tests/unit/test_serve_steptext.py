"""What of a streamed step's text ``vak serve`` shows while it arrives (serve/streaming.StepText): text as
it comes, a trailing word held until the next delta, nothing more once the step shows a call (a tool-call
delta, a fence, a ``<tool_call>`` tag, a JSON object, a tool name before one), the rest once the step
ended as the answer, and never the upstream key."""

from __future__ import annotations

from vak_context.providers.redaction import Redactor
from vak_context.serve.streaming import PARAGRAPH, StepText

KEY = "sk-upstream-0123456789abcdef"


def _feed(step: StepText, *deltas: str, calling: bool = False) -> str:
    return "".join(step.add(d, calling) for d in deltas)


def test_text_goes_out_as_it_arrives_a_bare_last_word_waits() -> None:
    step = StepText(Redactor(None))
    assert step.add("Hello, ", False) == "Hello, "
    assert step.add("the notes", False) == "the "  # "notes" may yet be a tool's name before an inline call
    assert step.add(" list alpha.", False) == "notes list "  # so may "alpha." (names hold dots)
    assert step.answer("Hello, the notes list alpha.") == "alpha."


def test_a_tool_call_delta_holds_the_rest_of_the_step() -> None:
    step = StepText(Redactor(None))
    assert _feed(step, "Let me look. ") == "Let me "
    assert step.add("More words ", True) == "" and step.add("here. ", False) == ""


def test_inline_calls_are_never_shown() -> None:
    fence = '```json\n{"name": "recall", "arguments": {"id": "ab12"}}\n```'
    for text in (fence, "Checking.\n" + fence, '<tool_call>{"name": "recall"}</tool_call>',
                 'recall {"id": "ab12"}', 'recall({"id": "ab12"})', '[{"name": "recall", "arguments": {}}]',
                 '{"name": "recall", "arguments": {"id": "ab12"}}'):
        step = StepText(Redactor(None))
        shown = "".join(step.add(text[i:i + 3], False) for i in range(0, len(text), 3))
        assert "recall" not in shown and "{" not in shown and "`" not in shown, (text, shown)


def test_a_tag_the_bundled_model_wraps_its_call_in_is_never_shown() -> None:
    """Qwen writes ``<tools>\\n{...}\\n</tools>``: the tag is part of the call, whole in one delta or split."""
    text = 'Checking.\n<tools>\n{"name": "recall", "arguments": {"id": "ab12"}}\n</tools>'
    for size in (1, 3, 9, len(text)):
        step = StepText(Redactor(None))
        shown = "".join(step.add(text[i:i + size], False) for i in range(0, len(text), size))
        assert "Checking.\n".startswith(shown) and "<" not in shown, (size, shown)
    step = StepText(Redactor(None))
    assert _feed(step, "Use <b> bold ", "text.") == "Use <b> bold "  # a tag before prose goes out


def test_held_text_goes_out_when_the_step_answers() -> None:
    step = StepText(Redactor(None))
    shown = _feed(step, "The config is ", '{"a": 1}', " as written.")
    assert shown == "The config "  # "is" might have been a tool's name before its arguments
    assert shown + step.answer('The config is {"a": 1} as written.') == 'The config is {"a": 1} as written.'


def test_an_answer_a_rule_wrote_follows_what_was_shown_and_a_later_step_leads_with_a_break() -> None:
    step = StepText(Redactor(None))
    shown = _feed(step, "Well, I think ")
    assert step.answer("The turn ends without an answer.") == PARAGRAPH + "The turn ends without an answer."
    later = StepText(Redactor(None), PARAGRAPH)
    assert later.add("Done, ", False) == PARAGRAPH + "Done, " and shown == "Well, I "


def test_the_upstream_key_is_never_shown_even_split_over_deltas() -> None:
    step = StepText(Redactor(KEY))
    text = f"Hello, the key is {KEY} and more. "
    shown = "".join(step.add(text[i:i + 4], False) for i in range(0, len(text), 4))
    shown += step.answer("Hello, the key is [redacted] and more.")
    assert KEY not in shown and KEY[3:12] not in shown and "[redacted]" in shown


def test_a_model_that_calls_natively_shows_its_text_whole_as_it_arrives() -> None:
    """``text_calls=False``: no opener holds the text (a fence, an object, a named call are the answer's
    words); only a tool-call delta holds the rest of the step, and the key is still scrubbed."""
    text = 'Call lookup({"key": "k1"}) or write:\n```json\n{"name": "lookup", "arguments": {}}\n```\ndone'
    step = StepText(Redactor(None), text_calls=False)
    shown = "".join(step.add(text[i:i + 3], False) for i in range(0, len(text), 3))
    assert shown == text and step.answer(text) == ""
    calling = StepText(Redactor(None), text_calls=False)
    assert calling.add("Let me look. ", False) == "Let me look. " and calling.add("more", True) == ""
    keyed = StepText(Redactor(KEY), text_calls=False)
    assert KEY not in _feed(keyed, f"the key {KEY} ", "ends here. ")
