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
from the ledger before it asks this rule (``serve/app.py``), unless the reply held for it is empty (no text,
no call: a reply no client can use, so it asks again). A history that is the session's with only the last
reply removed and nothing new is the client asking again for that reply (pydantic-ai after an empty reply,
a request on other tools): it continues, the reply and the messages of its request withdrawn and those
messages sent again as new (``Held.reask``), so the model is asked again, in the same session.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from vak_context.errors import InvalidInput

MODEL = "assistant"  # the role of a model reply; every other role is the client's own
IDEMPOTENCY_HEADER = "Idempotency-Key"  # read case-insensitively, as every header
RETRY_HEADER = "x-stainless-retry-count"  # the official openai and anthropic clients: 0, then 1, 2, ... on retries


@dataclass(frozen=True)
class Decision:
    """``continue``: the client kept ``kept`` messages (its first ``kept``), the session's messages at
    ``withdrawn`` (positions in what it holds) are withdrawn, and the client's messages from ``kept`` on are
    new. ``fork``: the new session starts from the first ``common`` messages the two share (the client's
    first ``common`` messages are the session's first ``common``; given for either kind)."""

    kind: Literal["continue", "fork"]
    kept: int
    withdrawn: tuple[int, ...] = ()
    common: int = 0


def decide(held: Sequence[tuple[str, str]], client: Sequence[str]) -> Decision:
    """The rule above: ``held`` is what the session holds, ``(role, digest)`` in order; ``client`` the digests
    of the client's history."""
    if list(client[:len(held)]) == [d for _, d in held]:
        # Every message held, in order, then what is new (the common case): what the rule below gives then.
        return Decision("continue", len(held), (), len(held))
    where: dict[str, list[int]] = {}
    for position, (_, digest) in enumerate(held):
        where.setdefault(digest, []).append(position)
    matched: list[int] = []
    for digest in client:
        after = matched[-1] if matched else -1
        # The earliest held position after the last match: what the client kept, in the session's order.
        found = next((p for p in where.get(digest, ()) if p > after), None)
        if found is None:
            break
        matched.append(found)
    kept = len(matched)
    last = matched[-1] if matched else -1
    taken = set(matched)
    removed = tuple(p for p in range(len(held)) if p not in taken)
    # A message of the client's own after the last one kept (every reply before it is then one the client
    # answered): the client changed it, if it sent something new in its place.
    changed = any(held[p][0] != MODEL for p in removed if p > last)
    common = next((i for i, p in enumerate(matched) if p != i), kept)
    if changed and kept < len(client):
        return Decision("fork", kept, common=common)
    return Decision("continue", kept, removed, common)


def fingerprint(parts: Sequence[str]) -> str:
    """One request (its system prompt, tool names and history's digests), as a resend of it is recognised."""
    return hashlib.sha256(json.dumps(list(parts)).encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Marker:
    """One answered request (a ``serve.history`` activity): the session held ``upto`` client items after it
    (the reply is the last); ``closed``: no turn was left open (a fork may start there). ``history``: the
    request's fingerprint; ``reply``: the reply as it went out (replayed to a resend); ``key``: the client's
    ``Idempotency-Key``; ``steps``: the assistant steps the reply came from; ``withdrawn``: the client
    withdrew the reply since."""

    upto: int
    entry: str
    closed: bool
    history: str = ""
    reply: Mapping[str, Any] | None = None
    key: str | None = None
    steps: tuple[str, ...] = ()
    withdrawn: bool = False


@dataclass(frozen=True)
class Asked:
    """A request the session began to answer (a ``serve.asked`` activity) and has not noted yet: where it
    began (``entry``), its fingerprint, the digests and roles of the client's items new to the session, and
    the client's ``Idempotency-Key``. A server killed after the request's answer was in the ledger and before
    its note leaves one; the client's resend of the request is answered from what follows it."""

    entry: str
    history: str
    digests: tuple[str, ...]
    roles: tuple[str, ...]
    key: str | None = None


@dataclass
class Held:
    """What one ledger session holds of a client's history (digests and roles, in order), where each
    request ended, and the request begun after the last one noted (``asked``), if any."""

    digests: list[str] = field(default_factory=list)
    roles: list[str] = field(default_factory=list)
    markers: list[Marker] = field(default_factory=list)
    asked: Asked | None = None

    def items(self) -> list[tuple[str, str]]:
        return list(zip(self.roles, self.digests, strict=True))

    def noted(self, digests: Sequence[str], roles: Sequence[str], marker: Marker) -> None:
        self.digests += digests
        self.roles += roles
        self.markers.append(marker)
        self.asked = None

    def withdraw(self, positions: Sequence[int]) -> None:
        """Take the items at ``positions`` out; an exchange whose reply went with them is withdrawn."""
        gone = set(positions)
        markers = []
        for m in self.markers:
            before = sum(1 for p in gone if p < m.upto)
            markers.append(replace(m, upto=m.upto - before, withdrawn=m.withdrawn or (m.upto - 1) in gone))
        self.markers = markers
        self.digests = [d for p, d in enumerate(self.digests) if p not in gone]
        self.roles = [r for p, r in enumerate(self.roles) if p not in gone]

    def steps_at(self, positions: Sequence[int]) -> list[str]:
        """The assistant steps of the replies at ``positions`` (a client's own item has none)."""
        return [s for m in self.markers if not m.withdrawn and (m.upto - 1) in set(positions) for s in m.steps]

    def replay(self, history: str, key: str | None, *, any_exchange: bool) -> Marker | None:
        """The exchange a resend repeats: the one holding the client's ``key`` (which must be of the same
        history), else the last one when its request had this ``history`` (``any_exchange``: any one that
        had; a client's retry may come after later requests). Withdrawn replies are never replayed, nor,
        without a key, an empty one (no text, no call): the client asks again because it could not use it."""
        # Newest first, walked only as far as the answer needs (most requests: to the last exchange).
        live = (m for m in reversed(self.markers) if not m.withdrawn and m.reply is not None)
        if key is not None:
            same = next((m for m in live if m.key == key), None)
            if same is not None and same.history != history:
                raise InvalidInput(f"{IDEMPOTENCY_HEADER}: {key!r} was sent before with another history; send a "
                                   "new key for a new request, the same key only to resend the same one")
            return same
        usable = (m for m in live if m.reply and (m.reply.get("text") or m.reply.get("calls")))
        if any_exchange:
            return next((m for m in usable if m.history == history), None)
        last = next(usable, None)
        return last if last is not None and last.history == history else None

    def reask(self, decision: Decision) -> Decision | None:
        """A history that continues the session with nothing new, having left out only the last reply (every
        message of the request it answered kept): the client asks again for that reply. The decision that
        withdraws the reply and that request's messages and takes those messages as new (so they are asked
        again, and noted again in order); None for any other history (a rewind: it forks)."""
        last = self.markers[-1] if self.markers else None
        if decision.kind != "continue" or last is None or last.withdrawn or (last.upto - 1) not in decision.withdrawn:
            return None
        start = self.markers[-2].upto if len(self.markers) > 1 else 0
        if start >= last.upto - 1 or any(start <= p < last.upto - 1 for p in decision.withdrawn):
            return None
        kept = start - sum(1 for p in decision.withdrawn if p < start)
        if decision.kept != kept + last.upto - 1 - start:  # the client's history ends with that request's
            return None
        return replace(decision, kept=kept, withdrawn=tuple(sorted({*decision.withdrawn, *range(start, last.upto - 1)})))
