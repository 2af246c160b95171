"""The extraction at turn close reads each of our own phrasings (``bench/stated_phrasings.py``, written
apart from the peer kit's labelled canaries) as one item of its category, and leaves the sentences that state
nothing binding alone (issue 34 item 5); the kit's canaries are each read as one item of their type."""

from __future__ import annotations

import pytest

from bench.stated_phrasings import BEYOND, INVENTED, PHRASINGS, kit_rows, model_pass, read_as


@pytest.mark.parametrize(("category", "text"), [(c, t) for c, texts in PHRASINGS.items() for t in texts])
def test_each_of_our_phrasings_is_read_as_its_category(category: str | None, text: str) -> None:
    assert read_as(text) == category


def test_every_category_has_phrasings_of_our_own() -> None:
    assert {c for c in PHRASINGS if c is not None} == {"rule", "constraint", "goal", "fact", "preference"}
    assert all(len(texts) >= 8 for texts in PHRASINGS.values())


def test_each_of_the_kits_canaries_is_read_as_its_type() -> None:
    rows = kit_rows(seeds=(1, 2))
    assert [(expected, text) for expected, text in rows if read_as(text) != expected] == []


@pytest.mark.parametrize(("category", "said", "paraphrase"), [(c, s, p) for c, rows in BEYOND.items() for s, p in rows])
def test_the_model_pass_keeps_the_users_words_the_patterns_miss(category: str, said: str, paraphrase: str) -> None:
    """A statement the patterns do not read, in a scripted answer beside its paraphrase and an item never
    said: only the user's words are kept, as the answer classified them (docs/STATE.md "The model pass")."""
    assert read_as(said) is None
    items, rejected = model_pass(category, said, paraphrase)
    assert items == [(category, said)] and rejected == {"not in the directive": 2}
    assert INVENTED not in said
