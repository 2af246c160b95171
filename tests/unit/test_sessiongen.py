"""The session generator (vak_context.sessions.generator) is a pure function of its seed: golden digests pin it."""

from __future__ import annotations

import blake3
import pytest

from vak_context.sessions.generator import generate_session

# Taken from the generator before generate_session was split into named steps (issue 13). Entry ids
# chain every payload's canonical bytes to its parent, so a digest of the ids and blobs covers every
# byte a session holds. A change here means sessions written from the same seed differ from before.
GOLDEN = {
    (0, 12): (180, "2cf37275e4711ccd7eb2ba8a77f9a9ed"),
    (5, 9): (153, "823b437e96e253128e74e14bca308a97"),
    (3, 1): (16, "85d8e552b9ca9b4af110393f9f168907"),
    (11, 6): (89, "b244ad7456441c62b5f69930578c3942"),
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
