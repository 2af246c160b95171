"""Continue or fork: the one rule that reads a client's history against what a session holds (pure).

The client's history is read against the session's, message by message (their digests,
``serve/protocol.py``): the longest run of the client's messages that the session holds, in the session's
order, is what the client kept; what follows is new. Then:

* a history that is the session's with some messages removed **continues**: the client's own messages
  (trimmed, dropped) and model replies, anywhere before the last message it kept; after that last message,
  only model replies it never answered (no message of the client's follows them in the session: a reply
  it could not parse, or one it rewrote in its own words, as smolagents re-serialises every reply it
  got). What it left out is *withdrawn* (the ledger appends which; nothing is rewritten);
* a history that changes the content of a message the session holds **forks**: a message of the
  client's own, or a model reply the client answered, that the client left out after the last message it
  kept, with something new sent in its place.

A history that is the session's with nothing removed and nothing new is a resend, which the server answers
from the ledger before it asks this rule (``serve/app.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

MODEL = "assistant"  # the role of a model reply; every other role is the client's own


@dataclass(frozen=True)
class Decision:
    """``continue``: the client kept ``kept`` messages (its first ``kept``), the session's messages at
    ``withdrawn`` (positions in what it holds) are withdrawn, and the client's messages from ``kept`` on are
    new. ``fork``: the new session starts from the first ``common`` messages the two share."""

    kind: Literal["continue", "fork"]
    kept: int
    withdrawn: tuple[int, ...] = ()
    common: int = 0


def decide(held: Sequence[tuple[str, str]], client: Sequence[str]) -> Decision:
    """The rule above: ``held`` is what the session holds, ``(role, digest)`` in order; ``client`` the digests
    of the client's history."""
    where: dict[str, list[int]] = {}
    for position, (_, digest) in enumerate(held):
        where.setdefault(digest, []).append(position)
    matched: list[int] = []
    for digest in client:
        after = matched[-1] if matched else -1
        # The earliest held position after the last match: what the client kept, in the session's order.
        position = next((p for p in where.get(digest, ()) if p > after), None)
        if position is None:
            break
        matched.append(position)
    kept = len(matched)
    last = matched[-1] if matched else -1
    taken = set(matched)
    removed = tuple(p for p in range(len(held)) if p not in taken)
    # A message of the client's own after the last one kept (every reply before it is then one the client
    # answered): the client changed it, if it sent something new in its place.
    changed = any(held[p][0] != MODEL for p in removed if p > last)
    if changed and kept < len(client):
        common = next((i for i, p in enumerate(matched) if p != i), kept)
        return Decision("fork", kept, common=common)
    return Decision("continue", kept, removed)
