"""The in-memory ledger beside the Arrow store: the same session has the same ids, byte for byte; the same bad
input raises the same error with the same message; what only the fake has (closing drops it, verify
re-checks what it holds). The contract both run: tests/unit/test_ledger_contract.py."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from vak_context.errors import LedgerClosed, VakError
from vak_context.events.envelope import LedgerLimits, Mapper
from vak_context.events.payloads import (
    Activity,
    AssistantStep,
    Directive,
    EvidenceBody,
    Nudge,
    TextBlock,
    ToolResult,
    ToolUseBlock,
)
from vak_context.storage import InMemoryLedger, LedgerStore
from vak_context.storage.contract import Ledger

T0 = 1_800_000_000_000_000  # unix microseconds; both backends read the same clock, one tick per append
LIMITS = LedgerLimits(max_payload_bytes=4096, max_blob_bytes=64)


def _clock() -> Callable[[], int]:
    ticks = itertools.count(T0, 1_000)
    return lambda: next(ticks)


@pytest.fixture()
def pair(tmp_path: Path) -> Iterator[tuple[LedgerStore, InMemoryLedger]]:
    """An Arrow store and an in-memory ledger with the same limits and the same clock readings."""
    store = LedgerStore(tmp_path / "ledger", limits=LIMITS, clock=_clock())
    memory = InMemoryLedger(limits=LIMITS, clock=_clock())
    yield store, memory
    store.close()
    memory.close()


def _write(ledger: Ledger) -> dict[str, list[str]]:
    """One session of every sort of append: models, a dict, a pre-encoded pair, blobs (an empty one too),
    several entries in one append, a branch from an explicit parent; and a second session."""
    body = b"\x00\xff line one\nline two \xe2\x80\xa8"
    ids: dict[str, list[str]] = {"s": [], "r": []}
    ids["s"] += ledger.append("s", [Directive(text="Read the notes, please. é ✓")])
    ids["s"] += ledger.append("s", [AssistantStep(blocks=(ToolUseBlock(id="c1", name="read_file",
                                                                        input={"path": "notes.txt"}),))])
    ids["s"] += ledger.append("s", [
        EvidenceBody(tool_use_id="c1", tool_name="read_file", encoding="binary", chars=len(body), bytes=len(body)),
        EvidenceBody(tool_use_id="c2", tool_name="read_file", chars=0, bytes=0),
    ], blobs=[body, b""])
    ids["s"] += ledger.append("s", [{"kind": "tool_result", "tool_use_id": "c1", "tool_name": "read_file",
                                     "content": "line one", "evidence_id": ids["s"][2]}])
    ids["s"] += ledger.append("s", [Mapper().encode_payload(Nudge(tag="t", text="pre-encoded"))])  # type: ignore[list-item]
    ids["s"] += ledger.append("s", [AssistantStep(blocks=(TextBlock(text="It says line one."),))],
                              parent=ids["s"][1])
    ids["s"] += ledger.append("s", [Activity(activity="x", detail={"n": 1, "nested": {"a": [1, 2.5, None]}})])
    ids["r"] += ledger.append("r", [Directive(text="another session"),
                                    ToolResult(tool_use_id="u", tool_name="n", content="c")])
    return ids


def test_a_session_written_to_both_backends_has_the_same_ids_byte_for_byte(
        pair: tuple[LedgerStore, InMemoryLedger]) -> None:
    """Same payloads, same clock: every entry is equal field for field (id, parent, seq, time, kind, version,
    payload bytes, blob bytes), and so are heads, chains, sessions, stats (but for the bytes on disk) and the
    verify reports."""
    store, memory = pair
    written = _write(store), _write(memory)
    assert written[0] == written[1]
    for session in ("s", "r"):
        assert store.entries(session) == memory.entries(session)
        assert [e.id.encode() for e in store.entries(session)] == [e.id.encode() for e in memory.entries(session)]
        assert store.head(session) == memory.head(session)
        head = store.head(session)
        assert head is not None and store.chain_to_root(head) == memory.chain_to_root(head)
    assert store.sessions() == memory.sessions() == ["r", "s"]
    assert [store.get(i) for i in written[0]["s"]] == [memory.get(i) for i in written[1]["s"]]
    assert store.payload(written[0]["s"][3]) == memory.payload(written[1]["s"][3])
    assert list(store.iter_metadata("s")) == list(memory.iter_metadata("s"))
    on_disk, held = store.stats(), memory.stats()
    assert dataclasses.replace(on_disk, bytes=0) == dataclasses.replace(held, bytes=0) and held.bytes > 0
    assert store.verify().as_dict() == memory.verify().as_dict()
    store.close()  # and after a reopen, the store still reads what the fake holds
    with LedgerStore(store.root, readonly=True) as reopened:
        assert reopened.entries("s") == memory.entries("s")


_HEAD_OF_S: dict[str, str] = {}  # filled by the first case, for the cases that name an entry


def _bad_inputs() -> list[tuple[str, Callable[[Any], Any]]]:
    return [
        ("blobs that do not pair", lambda ledger: ledger.append("s", [Nudge(tag="t", text="x")], blobs=[])),
        ("a session name that climbs", lambda ledger: ledger.append("../escape", [Directive(text="x")])),
        ("an empty session name", lambda ledger: ledger.append("", [Directive(text="x")])),
        ("a session name with a newline", lambda ledger: ledger.head("s\n")),
        ("an unknown kind", lambda ledger: ledger.append("new", [{"kind": "no-such-kind"}])),
        ("a field of the wrong type", lambda ledger: ledger.append("s", [{"kind": "nudge", "tag": 1, "text": "x"}])),
        ("no payload at all", lambda ledger: ledger.append("s", [5])),
        ("a pair that is not (kind, bytes)", lambda ledger: ledger.append("s", [("nudge", "x")])),
        ("a payload over the limit", lambda ledger: ledger.append("s", [Nudge(tag="t", text="x" * 5000)])),
        ("a blob over the limit", lambda ledger: ledger.append(
            "s", [EvidenceBody(tool_use_id="u", tool_name="n", chars=65, bytes=65)], blobs=[b"y" * 65])),
        ("a parent no session has", lambda ledger: ledger.append("s", [Nudge(tag="t", text="x")], parent="f" * 64)),
        ("a parent of another session", lambda ledger: ledger.append(
            "other", [Nudge(tag="t", text="x")], parent=_HEAD_OF_S["s"])),
        ("an empty append under a parent no session has", lambda ledger: ledger.append("s", [], parent="e" * 64)),
        ("the head of a session never written", lambda ledger: ledger.head("never")),
        ("the entries of a session never written", lambda ledger: ledger.entries("never")),
        ("a range that runs backwards", lambda ledger: ledger.entries("s", 1, 0)),
        ("a range below zero", lambda ledger: ledger.entries("s", -1)),
        ("a range that is not numbers", lambda ledger: ledger.entries("s", "a")),
        ("an unknown id", lambda ledger: ledger.get("0" * 64)),
        ("an id that is not a string", lambda ledger: ledger.get(5)),
        ("the chain of an unknown id", lambda ledger: ledger.chain_to_root("f" * 64)),
        ("verify of a session never written", lambda ledger: ledger.verify("never")),
        ("verify of a bad session name", lambda ledger: ledger.verify("../x")),
    ]


def _outcome(call: Callable[[Any], Any], ledger: Ledger) -> tuple[str, str]:
    try:
        call(ledger)
    except VakError as exc:
        return type(exc).__name__, str(exc)
    return "no error", ""


@pytest.mark.parametrize(("case", "call"), _bad_inputs(), ids=[c for c, _ in _bad_inputs()])
def test_the_same_bad_input_raises_the_same_typed_error_with_the_same_words(
        pair: tuple[LedgerStore, InMemoryLedger], case: str, call: Callable[[Any], Any]) -> None:
    """Each bad call raises the same VakError subclass with the same message on both, and leaves both with the
    same sessions and heads (a failed append to a new session leaves that session, empty, on both)."""
    store, memory = pair
    for ledger in pair:
        _HEAD_OF_S["s"] = ledger.append("s", [Directive(text="one"), Nudge(tag="t", text="two")])[-1]
    assert store.head("s") == memory.head("s")
    on_store, on_memory = _outcome(call, store), _outcome(call, memory)
    assert on_store[0] != "no error", case
    assert on_store == on_memory
    assert store.sessions() == memory.sessions()
    assert store.stats().heads == memory.stats().heads


def test_after_close_every_call_is_ledger_closed(pair: tuple[LedgerStore, InMemoryLedger]) -> None:
    """Both refuse appends and session reads once closed, with LedgerClosed; closing again is harmless.
    The fake also forgets what it held: it has no folder to reopen."""
    for ledger in pair:
        ledger.append("s", [Directive(text="one")])
        ledger.close()
        ledger.close()
        with pytest.raises(LedgerClosed):
            ledger.append("s", [Nudge(tag="t", text="x")])
        with pytest.raises(LedgerClosed):
            ledger.head("s")
        with pytest.raises(LedgerClosed):
            ledger.entries("s")
    memory = pair[1]
    for call in (memory.sessions, memory.stats, memory.verify, memory.checkpoint):
        with pytest.raises(LedgerClosed):
            call()


def test_verify_names_the_first_entry_that_no_longer_hashes_to_its_id() -> None:
    """What verify checks on the store's segments it checks on the fake's entries: an altered payload is
    named by session, seq and id, with the store's reason; the report counts the good entries before it."""
    ledger = InMemoryLedger(clock=_clock())
    ids = ledger.append("s", [Directive(text="one"), Nudge(tag="t", text="two")])
    ids += ledger.append("s", [Nudge(tag="t", text="three")])
    assert ledger.verify().ok
    held = ledger._sessions["s"].entries  # the fake's own storage: where a bug in it would show
    held[1] = dataclasses.replace(held[1], payload=held[1].payload.replace(b"two", b"TWO"))
    report = ledger.verify()
    assert not report.ok and report.first_bad is not None and report.entries == 1
    bad = report.first_bad
    assert (bad.session, bad.seq, bad.id, bad.batch, bad.row) == ("s", 1, ids[1], 0, 1)
    assert bad.reason == "content does not hash to the entry's id (tampered)"
    held[1] = dataclasses.replace(held[1], payload=b'{"kind":"nudge", "tag":"t","text":"two"}')
    assert ledger.verify("s").first_bad.reason.startswith("payload bytes are not canonical JSON")  # type: ignore[union-attr]


def test_reading_code_sees_the_same_turns_from_both(tmp_path: Path) -> None:
    """Code that reads through the contract (here: a turn index over the chain) sees the same turns from both."""
    from vak_context.context.history.turns import TurnIndex

    built = []
    for ledger in (LedgerStore(tmp_path / "l", clock=_clock()), InMemoryLedger(clock=_clock())):
        with ledger:
            _write(ledger)
            head = ledger.head("s")
            assert head is not None
            index = TurnIndex.build(ledger.chain_to_root(head), mapper=ledger.mapper)
            built.append([(t.directive.text, len(t.steps)) for t in index.turns])
    assert built[0] == built[1] and built[0][0][0].startswith("Read the notes")
