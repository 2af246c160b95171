"""The continue-or-fork rule of ``vak serve`` (serve/continuity.py), as a pure function: a history that is
the session's with messages removed continues (what was removed is withdrawn), a history that changes the
content of a message the session holds forks; the agents' own cases (mini-swe-agent drops a reply it could
not parse, a reply rewritten in the client's own words, a trimmed history, an edited message)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vak_context.errors import InvalidInput
from vak_context.serve.continuity import Decision, Held, Marker, decide

ROLES = st.sampled_from(["user", "assistant", "tool"])


@st.composite
def histories(draw: st.DrawFn) -> list[tuple[str, str]]:
    """What a session holds: distinct digests (the property is about positions, not repeated texts)."""
    roles = draw(st.lists(ROLES, min_size=1, max_size=12))
    return [(role, f"h{i}") for i, role in enumerate(roles)]


def fresh(n: int) -> list[str]:
    return [f"new{i}" for i in range(n)]


def continues(decision: Decision, kept: int, withdrawn: tuple[int, ...] = ()) -> bool:
    return (decision.kind, decision.kept, decision.withdrawn) == ("continue", kept, withdrawn)


@given(histories(), st.data())
def test_removals_alone_continue_and_withdraw_what_was_removed(held: list[tuple[str, str]], data: st.DataObject) -> None:
    keep = [data.draw(st.booleans()) for _ in held]  # one draw per item, not a list of a size drawn before
    client = [d for (_, d), k in zip(held, keep, strict=True) if k]
    decision = decide(held, client)
    assert continues(decision, len(client), tuple(p for p, k in enumerate(keep) if not k))


@given(histories(), st.data(), st.integers(min_value=1, max_value=3))
def test_removals_then_something_new_continue_unless_a_message_of_the_clients_own_went_at_the_end(
        held: list[tuple[str, str]], data: st.DataObject, new: int) -> None:
    keep = [data.draw(st.booleans()) for _ in held]  # one draw per item, not a list of a size drawn before
    client = [d for (_, d), k in zip(held, keep, strict=True) if k]
    last = max((p for p, k in enumerate(keep) if k), default=-1)
    decision = decide(held, [*client, *fresh(new)])
    own_left_at_the_end = any(role != "assistant" for role, _ in held[last + 1:])
    if own_left_at_the_end:
        assert decision.kind == "fork"
    else:
        assert continues(decision, len(client), tuple(p for p, k in enumerate(keep) if not k))


@given(histories(), st.data())
def test_changing_a_message_the_session_holds_forks_at_it(held: list[tuple[str, str]], data: st.DataObject) -> None:
    at = data.draw(st.integers(min_value=0, max_value=len(held) - 1))
    client = [d for _, d in held]
    client[at] = "changed"
    more = data.draw(st.integers(min_value=0, max_value=2))
    decision = decide(held, [*client, *fresh(more)])
    if all(role == "assistant" for role, _ in held[at:]):
        # A model reply no message of the client's follows: the client never answered it, so it may drop it
        # or put its own words in its place (withdrawn; what it sent is new).
        assert continues(decision, at, tuple(range(at, len(held))))
    else:
        assert decision == Decision("fork", at, common=at)


def test_mini_swe_agent_drops_a_reply_it_could_not_parse_and_asks_again() -> None:
    held = [("user", "task"), ("assistant", "call-1"), ("tool", "result-1"), ("assistant", "unparsed")]
    decision = decide(held, ["task", "call-1", "result-1", "no tool calls found"])
    assert continues(decision, 3, (3,))


def test_a_reply_rewritten_in_the_clients_own_words_is_withdrawn() -> None:
    # A reply with calls that comes back as text the server cannot read as those calls (smolagents' form for
    # several calls in one step: serve/textform.py), its result as a user message.
    held = [("user", "task"), ("assistant", "call-1")]
    assert continues(decide(held, ["task", "calling tools as text", "observation"]), 1, (1,))
    held = [("user", "task"), ("assistant", "calling tools as text"), ("user", "observation"), ("assistant", "call-2")]
    client = ["task", "calling tools as text", "observation", "call-2 as text", "observation and a new task"]
    assert continues(decide(held, client), 3, (3,))


def test_a_trimmed_history_continues() -> None:
    held = [("user", "u1"), ("assistant", "a1"), ("user", "u2"), ("assistant", "a2")]
    assert continues(decide(held, ["u2", "a2", "u3"]), 2, (0, 1))


def test_an_edited_message_forks_after_what_the_two_share() -> None:
    held = [("user", "u1"), ("assistant", "a1"), ("user", "u2"), ("assistant", "a2")]
    assert decide(held, ["u1", "a1", "u2 edited"]) == Decision("fork", 2, common=2)
    # A reply the client answered, changed: the same.
    assert decide(held, ["u1", "a1 edited", "u2", "a2", "u3"]) == Decision("fork", 1, common=1)


def test_a_plain_extension_withdraws_nothing() -> None:
    held = [("user", "u1"), ("assistant", "a1")]
    assert continues(decide(held, ["u1", "a1", "u2"]), 2)
    assert continues(decide([], ["u1"]), 0)


def test_what_a_session_holds_after_a_withdrawal_and_which_exchange_a_resend_repeats() -> None:
    held = Held()
    reply = {"text": "", "calls": [["c1", "search", {}]], "usage": [1, 1, 0]}
    held.noted(["u1", "c1"], ["user", "assistant"], Marker(2, "e1", False, "h1", reply, "k1", ("s1",)))
    held.noted(["r1", "a1"], ["tool", "assistant"], Marker(4, "e2", True, "h2", {"text": "a1"}, None, ("s2",)))
    assert held.replay("h2", None, any_exchange=False) is held.markers[1]
    assert held.replay("h1", None, any_exchange=False) is None  # only the last, unless the client says it retries
    assert held.replay("h1", None, any_exchange=True) is held.markers[0]
    assert held.replay("h1", "k1", any_exchange=False) is held.markers[0]
    with pytest.raises(InvalidInput, match="Idempotency-Key"):
        held.replay("h9", "k1", any_exchange=False)
    assert held.steps_at([3]) == ["s2"] and held.steps_at([2]) == []  # a client's own item has no steps
    held.withdraw([3])
    assert held.digests == ["u1", "c1", "r1"] and [m.upto for m in held.markers] == [2, 3]
    assert held.markers[1].withdrawn and held.replay("h2", None, any_exchange=False) is None
    held.withdraw([0])  # a trim: the later exchange's count moves with it
    assert held.items() == [("assistant", "c1"), ("tool", "r1")] and [m.upto for m in held.markers] == [1, 2]


def _asked_twice() -> Held:
    """Two requests answered: a question and a call; the call's result and the reply to it."""
    held = Held()
    calls = {"text": "", "calls": [["c1", "search", {}]], "usage": [1, 1, 0]}
    held.noted(["u1", "c1"], ["user", "assistant"], Marker(2, "e1", False, "h1", calls, None, ("s1",)))
    held.noted(["r1", "a1"], ["tool", "assistant"], Marker(4, "e2", True, "h2", {"text": "", "calls": []}, None, ("s2",)))
    return held


def test_an_empty_reply_is_never_replayed_without_a_key() -> None:
    held = _asked_twice()
    assert held.replay("h2", None, any_exchange=False) is None  # the client could not use it: it asks again
    assert held.replay("h2", None, any_exchange=True) is None
    assert held.replay("h1", None, any_exchange=True) is held.markers[0]


def test_the_last_reply_left_out_with_nothing_new_is_asked_again() -> None:
    held = _asked_twice()
    decision = decide(held.items(), ["u1", "c1", "r1"])
    assert continues(decision, 3, (3,))
    # The reply and its request's messages withdrawn; those messages sent again as new.
    assert held.reask(decision) == Decision("continue", 2, (2, 3), decision.common)
    # Trimmed before: the positions still name what the session holds, the kept count what the client sent.
    trimmed = decide(held.items(), ["u1", "r1"])
    assert held.reask(trimmed) == Decision("continue", 1, (1, 2, 3), trimmed.common)


def test_any_other_history_with_nothing_new_is_no_reask() -> None:
    held = _asked_twice()
    assert held.reask(decide(held.items(), ["u1", "c1"])) is None  # the result left out too: a rewind
    assert held.reask(decide(held.items(), ["u1"])) is None
    assert held.reask(decide(held.items(), ["u1", "c1", "r1", "a1"])) is None  # nothing left out: a resend
    held.withdraw([3])
    assert held.reask(decide(held.items(), ["u1", "c1", "r1"])) is None  # withdrawn before: nothing to ask for
