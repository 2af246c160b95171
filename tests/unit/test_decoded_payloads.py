"""One decode of an entry's payload per process, whoever reads it (issue 35: a resumed session's chain was
decoded by the planner's view and again by the evidence TurnIndex): ``Mapper.payload_of`` shares the models
it decoded lately (``DecodedPayloads``), only for the same kind, version and payload bytes, within bounds."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tests.fakes.sessions import ledger_session
from vak_context.context.history.turns import TurnIndex
from vak_context.context.planner.view import SessionView
from vak_context.events.envelope import DECODED, DecodedPayloads, Mapper
from vak_context.events.payloads import Directive


def test_a_second_fold_of_a_chain_takes_the_payloads_the_first_decoded(tmp_path: Path) -> None:
    store, _ = ledger_session(tmp_path / "ledger", 3)
    try:
        head = store.head("s")
        assert head is not None
        chain = store.chain_to_root(head)
        DECODED.clear()
        before = DECODED.hits
        view = SessionView.build(chain)
        index = TurnIndex.build(chain, mapper=Mapper())
        assert DECODED.hits - before == len(chain)  # the TurnIndex decoded none of them again
        assert [t.id for t in index.turns] == [t.id for t in view.index.turns]
        for entry in chain:  # the same model the first reader got, equal to a fresh decode
            shared = Mapper().payload_of(entry)
            assert shared is view.mapper.payload_of(entry)
            assert shared == Mapper()._decode(entry)
    finally:
        store.close()


def test_an_entry_with_the_same_id_and_other_bytes_is_decoded_for_itself(tmp_path: Path) -> None:
    store, _ = ledger_session(tmp_path / "ledger", 1)
    try:
        entry = next(e for e in store.entries("s") if e.kind == "directive")
        first = Mapper().payload_of(entry)
        _, data = Mapper().encode_payload(Directive(text="something else entirely"))
        forged = dataclasses.replace(entry, payload=data)  # the id no longer hashes its bytes
        other = Mapper().payload_of(forged)
        assert isinstance(other, Directive) and other.text == "something else entirely"
        assert Mapper().payload_of(entry) == first  # and the entry itself still gets its own payload
    finally:
        store.close()


def test_the_memo_keeps_at_most_its_entries_and_bytes_and_skips_large_payloads(tmp_path: Path) -> None:
    store, _ = ledger_session(tmp_path / "ledger", 3)
    try:
        entries = store.entries("s")
        memo = DecodedPayloads(entries=4, payload_bytes=1 << 20, largest=1 << 16)
        for entry in entries:
            memo.put(entry, object())
        assert len(memo._kept) == 4 and [e.id for e in entries[-4:]] == list(memo._kept)
        assert memo.get(entries[0]) is None and memo.get(entries[-1]) is not None
        small = DecodedPayloads(entries=100, payload_bytes=len(entries[-1].payload), largest=1 << 16)
        small.put(entries[-2], object())
        small.put(entries[-1], object())
        assert list(small._kept) == [entries[-1].id]  # the oldest went to keep within the bytes
        tiny = DecodedPayloads(entries=100, payload_bytes=1 << 20, largest=1)
        tiny.put(entries[-1], object())
        assert tiny.get(entries[-1]) is None
    finally:
        store.close()
