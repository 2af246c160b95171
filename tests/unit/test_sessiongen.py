"""The session generator (vak_context.sessions.generator) is a pure function of its seed: golden digests pin it."""

from __future__ import annotations

import blake3
import pytest

from vak_context.sessions.generator import generate_session

# Taken from the generator when its text became the repository's files (issue 22 item 8, snapshot refreshed to the
# namespace layout, and again when one-character runs became BM25 terms (issue 33), which reorders generated search results: directives about
# files that exist, real tool results over sessions/text-corpus/, answers quoting them). Entry ids chain
# every payload's canonical bytes to its parent, so a digest of the ids and blobs covers every byte a
# session holds. A change here means sessions written from the same seed differ from before.
GOLDEN = {
    (0, 12): (200, "290b12ae6760c4935811feb36fa38eb9"),
    (5, 9): (121, "4ce65d990538e28fa5eaf9a35ae024a8"),
    (3, 1): (16, "15bad0b1e70ef1daec44f64c0a6ef708"),
    (11, 6): (97, "9589b7880685b61558a0f9210f5be05e"),
}


@pytest.mark.parametrize(("seed", "turns"), sorted(GOLDEN))
def test_generated_session_is_byte_identical_for_its_seed(seed: int, turns: int) -> None:
    """generate_session(seed, turns) writes the same entries (ids, hence payloads, and blobs) as the
    pinned digest, in the same number, and reports every turn written."""
    session = generate_session(seed=seed, turns=turns)
    digest = blake3.blake3()
    for entry_id, (_payload, blob) in zip(session.ids, session.items, strict=True):
        digest.update(entry_id.encode() + b"\0" + (blob or b"") + b"\0")
    assert (len(session.ids), digest.hexdigest()[:32]) == GOLDEN[(seed, turns)]
    assert session.turns == turns
