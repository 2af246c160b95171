"""The ledger conformance suite: one contract (``vak_context.storage.contract.Ledger``), one test class that
every way to reach a ledger runs.

``LedgerContract`` holds the tests and a ``create_ledger()`` hook (the abstract test case pattern of
eventsourcing's ``tests/persistence.py``); each subclass makes the ledger its own way: a ``LedgerStore``,
the ``InMemoryLedger``, the ``LedgerActor`` class in this process (no Ray) and a ``LedgerClient`` over a
store (tests/unit/test_ledger_contract.py), and a ``LedgerClient`` over the LedgerActor on the real local
Ray (tests/ray/test_ledger_contract_ray.py). ``DiskLedgerContract`` adds what a ledger with a folder
promises (plain Arrow readers see its sealed segments); the in-memory ledger runs ``LedgerContract``. The same calls give the same results, of the same types
(``VerifyReport``, ``LedgerStats``), and the same typed errors. This module holds no ``Test*`` class, so
it is collected only through its subclasses.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from vak_context.errors import (
    InvalidInput,
    InvalidName,
    InvalidPayload,
    UnknownEntry,
    UnknownKind,
    UnknownParent,
    UnknownSession,
)
from vak_context.events.payloads import CapacityProfileRecord, Directive, EvidenceBody, Nudge
from vak_context.storage.contract import Ledger, LedgerStats, VerifyReport


def profile_record(model: str, window: int, provider: str = "openai") -> CapacityProfileRecord:
    """A capacity_profile payload for ``provider:model`` whose declared window tells one from another."""
    return CapacityProfileRecord(provider=provider, model=model, declared_window=window,
                                 instruction_horizon={"tokens": window // 2, "confidence": 0.5, "last_confirmed": 0.0},
                                 tokens_per_char={"value": 0.3, "samples": 1}, output_reserve=window // 10)


def _is_a_ledger(ledger: Ledger) -> Ledger:
    """Type-checked: each implementation is a ``Ledger`` (mypy checks the calls below)."""
    return ledger


class LedgerContract:
    """The tests every ledger passes. Not collected itself (no ``Test`` prefix); subclasses are."""

    def create_ledger(self, root: Path) -> Ledger:
        raise NotImplementedError

    def close_ledger(self, ledger: Ledger) -> None:
        raise NotImplementedError

    @pytest.fixture()
    def ledger(self, ledger_dir: Path) -> Iterator[Ledger]:
        made = _is_a_ledger(self.create_ledger(ledger_dir))
        yield made
        self.close_ledger(made)

    def test_append_returns_durable_ids_that_read_back_as_one_chain(self, ledger: Ledger) -> None:
        """Two appends make one chain: ids in order, the head is the last, each entry's parent is the
        one before, entries() and chain_to_root() give the same entries, sessions() lists the session."""
        a, b = ledger.append("s", [Directive(text="one"), Nudge(tag="t", text="two")])
        (c,) = ledger.append("s", [Nudge(tag="t", text="three")])
        assert ledger.head("s") == c
        assert ledger.get(b).parent == a and ledger.get(c).parent == b
        assert [e.id for e in ledger.entries("s")] == [a, b, c]
        assert [e.id for e in ledger.chain_to_root(c)] == [a, b, c]
        assert [e.seq for e in ledger.entries("s", 1, 3)] == [1, 2]
        assert "s" in ledger.sessions()

    def test_blobs_and_an_explicit_parent(self, ledger: Ledger) -> None:
        """A blob is stored whole with its entry; an explicit parent starts a branch that
        chain_to_root follows, and the branch becomes the head."""
        body = b"\x00\xffraw tool output"
        (a,) = ledger.append("s", [Directive(text="root")])
        (e,) = ledger.append("s", [EvidenceBody(tool_use_id="t1", tool_name="cat", encoding="binary",
                                                chars=len(body), bytes=len(body))], blobs=[body])
        assert ledger.get(e).blob == body
        (d,) = ledger.append("s", [Nudge(tag="t", text="branch")], parent=a)
        assert [x.id for x in ledger.chain_to_root(d)] == [a, d]
        assert ledger.head("s") == d

    def test_profile_entry_is_the_newest_profile_of_its_key_in_any_session(self, ledger: Ledger) -> None:
        """profile_entry names the newest capacity_profile entry of a model key across sessions (the later
        session by name on a tie of entry time), whatever else the sessions hold; None for a key never recorded."""
        assert ledger.profile_entry("openai", "m") is None
        (first,) = ledger.append("a", [profile_record("m", 1000)])
        assert ledger.profile_entry("openai", "m") == ledger.get(first)
        ledger.append("b", [Directive(text="x"), profile_record("m", 2000), profile_record("other", 9000)])
        (last,) = ledger.append("c", [profile_record("m", 3000)])
        ledger.append("a", [Nudge(tag="t", text="after")])
        entry = ledger.profile_entry("openai", "m")
        assert entry is not None and entry == ledger.get(last) and entry.session == "c"
        assert b'"declared_window":9000' in (ledger.profile_entry("openai", "other") or ledger.get(first)).payload
        assert ledger.profile_entry("openai", "m", "q4") is None and ledger.profile_entry("anthropic", "m") is None

    def test_verify_returns_a_verify_report(self, ledger: Ledger) -> None:
        """verify() gives a VerifyReport (not a dict) that counts every session and entry."""
        ledger.append("s", [Directive(text="one"), Nudge(tag="t", text="two")])
        ledger.append("r", [Directive(text="other")])
        report = ledger.verify()
        assert isinstance(report, VerifyReport)
        assert report.ok and report.first_bad is None and (report.sessions, report.entries) == (2, 3)
        one = ledger.verify("r")
        assert isinstance(one, VerifyReport) and (one.sessions, one.entries) == (1, 1)

    def test_stats_returns_ledger_stats(self, ledger: Ledger) -> None:
        """stats() gives LedgerStats: sessions, entries by kind, heads, and bytes on disk."""
        ids = ledger.append("s", [Directive(text="one"), Nudge(tag="t", text="two"), Nudge(tag="t", text="3")])
        stats = ledger.stats()
        assert isinstance(stats, LedgerStats)
        assert (stats.sessions, stats.entries) == (1, 3)
        assert stats.by_kind == {"directive": 1, "nudge": 2} and stats.heads == {"s": ids[-1]}
        assert stats.bytes > 0 and stats.as_dict()["heads"] == {"s": ids[-1]}

    def test_documented_failures_raise_the_same_typed_errors(self, ledger: Ledger) -> None:
        """A bad session name is InvalidName, an unknown session UnknownSession, an unknown id
        UnknownEntry, the same for every implementation."""
        ledger.append("s", [Directive(text="one")])
        with pytest.raises(InvalidName):
            ledger.append("../escape", [Directive(text="x")])
        with pytest.raises(UnknownSession):
            ledger.entries("never-written")
        with pytest.raises(UnknownEntry):
            ledger.get("0" * 64)
        with pytest.raises(UnknownEntry):
            ledger.chain_to_root("f" * 64)

    def test_an_unknown_parent_is_refused_and_nothing_is_written(self, ledger: Ledger) -> None:
        """A parent that is no entry of the session (made up, or another session's) is UnknownParent, even
        for an empty append; the session's head and entries stay as they were."""
        (a,) = ledger.append("s", [Directive(text="one")])
        (other,) = ledger.append("r", [Directive(text="elsewhere")])
        for parent in ("f" * 64, other):
            with pytest.raises(UnknownParent):
                ledger.append("s", [Nudge(tag="t", text="x")], parent=parent)
        with pytest.raises(UnknownParent):
            ledger.append("s", [], parent="f" * 64)
        assert ledger.head("s") == a and [e.id for e in ledger.entries("s")] == [a]

    def test_bad_payloads_and_blobs_are_typed_errors_and_write_nothing(self, ledger: Ledger) -> None:
        """A kind nobody registered is UnknownKind, a payload that fails its schema or is no payload at all
        InvalidPayload, blobs that do not pair with the payloads InvalidInput; none of them writes."""
        (a,) = ledger.append("s", [Directive(text="one")])
        with pytest.raises(UnknownKind):
            ledger.append("s", [{"kind": "no-such-kind"}])
        with pytest.raises(InvalidPayload):
            ledger.append("s", [{"kind": "nudge", "tag": 1, "text": "x"}])
        with pytest.raises(InvalidPayload):
            ledger.append("s", [5])  # type: ignore[list-item]
        with pytest.raises(InvalidInput, match="2 blobs for 1 payloads"):
            ledger.append("s", [Nudge(tag="t", text="x")], blobs=[b"a", b"b"])
        assert ledger.head("s") == a and len(ledger.entries("s")) == 1

    def test_reads_by_range_and_an_empty_append(self, ledger: Ledger) -> None:
        """entries() takes start <= seq < stop, a stop past the end is the end, a range that runs backwards
        or starts below 0 is UnknownEntry; an append of nothing returns no id and moves nothing; sessions()
        lists every session in order."""
        ids = ledger.append("s", [Nudge(tag="t", text=str(i)) for i in range(4)])
        assert [e.id for e in ledger.entries("s", 1, 3)] == ids[1:3]
        assert [e.id for e in ledger.entries("s", 2, 99)] == ids[2:]
        assert ledger.entries("s", 4) == []
        for start, stop in ((3, 1), (-1, None), (5, None)):
            with pytest.raises(UnknownEntry):
                ledger.entries("s", start, stop)
        assert ledger.append("s", []) == [] and ledger.head("s") == ids[-1]
        ledger.append("a", [Directive(text="first by name")])
        assert ledger.sessions() == ["a", "s"]
        with pytest.raises(UnknownSession):
            ledger.head("never-written")


class DiskLedgerContract(LedgerContract):
    """The contract, and what a ledger with a folder adds: its segments are plain Arrow files."""

    def test_checkpoint_lets_plain_arrow_read_every_entry(self, ledger: Ledger, ledger_dir: Path) -> None:
        """After checkpoint(), pyarrow's dataset reader (which sees sealed segments only) reads every entry."""
        ids = ledger.append("s", [Directive(text="one"), Nudge(tag="t", text="two")])
        ledger.checkpoint()
        table = ds.dataset(ledger_dir / "sessions", format="arrow").to_table(columns=["id"])
        assert table.column("id").to_pylist() == ids
