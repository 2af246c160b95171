"""``DigestMemo``: the digests of a history resent with each request are looked up from the key's last
request, and are always what ``Item.digest`` gives (a changed text, role, call id or call is hashed anew);
it holds the most recent keys only."""

from __future__ import annotations

from vak_context.serve.protocol import ClientCall, DigestMemo, Item

HISTORY = [Item("user", "find the invoices"), Item("assistant", "", (ClientCall("c1", "search", {"q": "x"}),)),
           Item("tool", '{"hits": 3}', call_id="c1"), Item("assistant", "Three invoices.")]


def test_the_digests_are_item_digests_request_after_request() -> None:
    memo = DigestMemo()
    assert memo.digests("k", HISTORY) == [i.digest() for i in HISTORY]
    changed = [*HISTORY[:2], Item("tool", '{"hits": 4}', call_id="c1"), HISTORY[3], Item("user", "and the paid ones?")]
    assert memo.digests("k", changed) == [i.digest() for i in changed]
    renamed = [HISTORY[0], Item("assistant", "", (ClientCall("c1", "lookup", {"q": "x"}),)), *HISTORY[2:]]
    assert memo.digests("k", renamed) == [i.digest() for i in renamed]
    as_user = [Item("user", "Three invoices.")]  # the same text in another role: another digest
    assert memo.digests("k", as_user) == [as_user[0].digest()] != [HISTORY[3].digest()]


def test_it_keeps_the_most_recent_keys() -> None:
    memo = DigestMemo(keys=2)
    for key in ("a", "b", "c"):
        memo.digests(key, HISTORY)
    assert list(memo._memo) == ["b", "c"]
    memo.digests("b", HISTORY[:1])  # used again: the most recent, holding only its last request's items
    assert list(memo._memo) == ["c", "b"] and len(memo._memo["b"]) == 1
    memo.forget("c")
    assert list(memo._memo) == ["b"]
