"""A digest quotes the lines that name its turn's distinctive words (``context/evidence/shapes/focus.py``).

The case that asked for it: a 300-line export, the question naming one order id; the digest quoted lines
1-10 and the bundled model answered with line 1's carrier. Properties: the answering line is quoted with
its number; a word every line holds is no focus; without a focus the digest is what it always was; every
digest stays under ``DIGEST_CHARS`` whatever the directive; the same inputs give the same bytes.
"""

from __future__ import annotations

import json
import random

import pytest

from tests.fakes.agent_tasks import export_orders
from vak_context.context.evidence.digest import DIGEST_CHARS, digest, shaped_digest
from vak_context.context.evidence.shapes.focus import FOCUS_LINES, MAX_TERMS, focus_block, focus_terms
from vak_context.context.history.render import evidence_info, turn_focus
from vak_context.events.payloads import EvidenceBody

EXPORT = export_orders("March")
QUESTION = "In the March order export, which carrier ships order O-1234?"


def test_the_line_a_question_names_is_quoted_with_its_number() -> None:
    text = digest(EXPORT, "ev1", tool_name="export_orders", focus=QUESTION)
    assert "235: O-1234 | carrier=Kuehne |" in text
    assert 'naming "O-1234"' in text
    assert text.startswith("text: 300 lines")  # the shape's own outline is still there, first
    assert text.endswith("[evidence:ev1 — 29926 chars; call recall to expand]")
    assert len(text) <= DIGEST_CHARS


def test_without_a_focus_the_digest_is_unchanged() -> None:
    plain = digest(EXPORT, "ev1", tool_name="export_orders")
    assert "Kuehne" not in plain
    assert digest(EXPORT, "ev1", tool_name="export_orders", focus="hello there") == plain  # no term matches
    assert digest(EXPORT, "ev1", tool_name="export_orders", focus="which carrier, which status?") == plain


def test_a_word_on_every_line_is_no_focus() -> None:
    assert focus_block(EXPORT, ("carrier", "delivered"), 800) == ""
    # GLS is on a third of the lines: no focus; Kuehne on one
    block = focus_block(EXPORT, ("GLS", "Kuehne"), 800)
    assert block.splitlines() == ['the 1 line naming "Kuehne" (of 300):',
                                  "235: O-1234 | carrier=Kuehne | status=delivered | weight=35kg | "
                                  "route=warehouse-0-to-hub-4 | ref=RX00234"]


def test_terms_are_whole_words_and_numbers_case_blind() -> None:
    body = "\n".join(["O-12345 is another order", "o-1234 lower case", "XO-1234 is not it", "done"] * 3 + ["tail"] * 40)
    block = focus_block(body, ("O-1234",), 800)
    assert block.splitlines()[1:] == ["2: o-1234 lower case", "6: o-1234 lower case", "10: o-1234 lower case"]


def test_focus_terms() -> None:
    assert focus_terms(QUESTION) == ("March", "order", "export", "carrier", "ships", "O-1234")
    assert focus_terms("What is the EUR/NOK rate today?") == ("EUR/NOK", "rate")
    assert focus_terms("") == ()
    assert len(focus_terms(" ".join(f"word{i}" for i in range(500)))) == MAX_TERMS


def test_rarest_lines_first_at_most_focus_lines_in_line_order() -> None:
    lines = [f"row {i} status ok" for i in range(400)]
    for i in (7, 90, 150, 151, 152, 153, 154, 300):
        lines[i] = f"row {i} status failed alpha"
    lines[320] = "row 320 status failed alpha beta"
    block = focus_block("\n".join(lines), ("failed", "beta"), 2_000)
    numbers = [int(line.split(":", 1)[0]) for line in block.splitlines()[1:]]
    assert len(numbers) == FOCUS_LINES and numbers == sorted(numbers)
    assert 321 in numbers  # the only line naming both: the rarest term ranks it first
    assert block.splitlines()[0].startswith("6 of the 9 lines naming")


def test_a_long_line_is_quoted_around_its_match() -> None:
    body = json.dumps({"rows": [{"id": f"r{i}", "owner": "Ann" if i == 777 else "Bo"} for i in range(1_500)]})
    text = digest(body, "ev2", tool_name="rows", focus="who owns r777?")
    assert '"id": "r777", "owner": "Ann"' in text
    assert len(text) <= DIGEST_CHARS


@pytest.mark.parametrize("seed", range(40))
def test_any_body_any_directive_stays_bounded_and_stable(seed: int) -> None:
    rng = random.Random(seed)
    words = ["alpha", "O-1", "O-12", "x" * rng.randint(1, 3000), "Beta", "9", "naïve", "λ", "a.b/c", "\r", ""]
    body = "\n".join(" ".join(rng.choice(words) for _ in range(rng.randint(0, 30)))
                     for _ in range(rng.randint(1, 400)))
    directive = " ".join(rng.choice(words) for _ in range(rng.randint(0, 60)))
    first = shaped_digest(body, "e" * rng.randint(1, 64), tool_name=rng.choice(["", "bash", "read_file"]),
                          focus=directive)
    assert len(first[1]) <= DIGEST_CHARS
    again = shaped_digest(body, "e", focus=directive)
    assert again == shaped_digest(body, "e", focus=directive)
    block = focus_block(body, focus_terms(directive), 600)
    assert len(block) <= 600


def test_every_holder_digests_with_its_turns_directive() -> None:
    meta = EvidenceBody(tool_use_id="t1", tool_name="export_orders", media_type="text/plain", encoding="utf-8",
                        chars=len(EXPORT), bytes=len(EXPORT.encode()), is_error=False)
    plain = evidence_info("a" * 64, meta, EXPORT.encode(), {"month": "March"})
    focused = evidence_info("a" * 64, meta, EXPORT.encode(), {"month": "March"}, focus=QUESTION)
    assert "Kuehne" not in plain.digest and "235: O-1234 | carrier=Kuehne" in focused.digest
    assert evidence_info("a" * 64, meta, EXPORT.encode(), {"month": "March"}, focus=QUESTION) is focused
    assert turn_focus(None) == ""
