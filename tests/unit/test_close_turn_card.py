"""The EvidenceActor's close_turn_card (the turn's close on Ray, one call): the card handed back as ``card``
gives it, and what the turn's driver chained since its last pass committed with the card, before it, in one
append. In-process over a LedgerStore: the actor class is the same one Ray runs."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from vak_context.actors.evidence import EvidenceActor, evidence_body, tool_result
from vak_context.errors import ChainMoved
from vak_context.events.envelope import At, Mapper, StoredEntry, chained
from vak_context.events.payloads import AssistantStep, Directive, TextBlock, ToolUseBlock, WorkContract
from vak_context.storage.ledger import LedgerStore


def _chain_answer(store: LedgerStore, text: str) -> list[StoredEntry]:
    """An answer step chained on the session's head as the driver chains it (``RayServices``), not written."""
    head = store.entries("s")[-1]
    at = At(head.id, head.seq + 1, time.time_ns() // 1000)
    return chained(at, "s", [Mapper().encode_payload(AssistantStep(blocks=(TextBlock(text=text),)))])


def test_the_card_comes_back_with_its_close_and_the_turns_entries_go_first(tmp_path: Path) -> None:
    with LedgerStore(tmp_path / "ledger") as store:
        actor = EvidenceActor(str(tmp_path / "ledger"), store)
        store.append("s", [Directive(text="what does line 2 say?")])
        assert actor.stated("s") == ()  # the actor's index has read the session so far
        written = _chain_answer(store, "Line 2 says beta.")
        card_id, card = actor.close_turn_card("s", None, "completed", written=written)
        kinds = [(e.id, e.kind) for e in store.entries("s")]
        # the chained answer is written where the driver chained it, and the card right after it
        assert kinds[-2:] == [(written[0].id, "assistant_step"), (card_id, "turn_card")]
        assert store.verify("s").ok
        assert card == actor.card("s", card_id)  # what ``card`` gives, without a second call
        # closed once: a second close hands back the same id and no card
        assert actor.close_turn_card("s") == (card_id, None)
        assert actor.close_turn("s") == card_id


def test_entries_chained_where_the_head_no_longer_is_are_refused_and_nothing_is_closed(tmp_path: Path) -> None:
    with LedgerStore(tmp_path / "ledger") as store:
        actor = EvidenceActor(str(tmp_path / "ledger"), store)
        store.append("s", [Directive(text="what does line 2 say?")])
        written = _chain_answer(store, "Line 2 says beta.")
        store.append("s", [AssistantStep(blocks=(TextBlock(text="another writer's step"),))])  # the head moved
        with pytest.raises(ChainMoved):
            actor.close_turn_card("s", None, "completed", written=written)
        assert [e.kind for e in store.entries("s")] == ["directive", "assistant_step"]
        assert written[0].id not in {e.id for e in store.entries("s")}
        card_id = actor.close_turn("s", None, "completed")  # the index reads the ledger again: no stale entries
        assert [e.id for e in store.entries("s")][-1] == card_id and store.verify("s").ok
        assert actor.card("s", card_id)["id"] == card_id


def test_a_close_whose_last_step_stored_results_reads_their_bodies_from_what_it_was_handed(tmp_path: Path) -> None:
    """The last step's results (each body and the tool result naming it, chained by the driver) are not in the
    ledger until the card's commit: the card's digests read those bodies from the entries handed over."""
    with LedgerStore(tmp_path / "ledger") as store:
        actor = EvidenceActor(str(tmp_path / "ledger"), store)
        store.append("s", [Directive(text="read notes.txt")])
        store.append("s", [AssistantStep(blocks=(ToolUseBlock(id="c1", name="read_file", input={"path": "n"}),))])
        assert actor.stated("s") == ()
        head = store.entries("s")[-1]
        meta, blob, text = evidence_body("c1", "read_file", "alpha\nbeta\n", is_error=False)
        at = At(head.id, head.seq + 1, time.time_ns() // 1000)
        [body] = chained(at, "s", [Mapper().encode_payload(meta)], [blob])
        [result] = chained(At(body.id, body.seq + 1, at.time_us), "s",
                           [Mapper().encode_payload(tool_result(meta, text, body.id))])
        card_id, card = actor.close_turn_card("s", None, "completed", written=[body, result])
        assert [e.id for e in store.entries("s")][-3:] == [body.id, result.id, card_id]
        assert card is not None and card == actor.card("s", card_id) and body.id[:12] in card["text"]


def test_the_close_hands_back_the_stated_items_in_force_and_where_its_index_ended(tmp_path: Path) -> None:
    """``close_turn_card_stated``: the close, the stated items in force as ``stated`` gives them after it (a
    work_contract the turn chained counts), and how many entries the index held: the next turn's start takes
    them while nothing from there on states one (``RayServices.stated``)."""
    with LedgerStore(tmp_path / "ledger") as store:
        actor = EvidenceActor(str(tmp_path / "ledger"), store)
        directive = store.append("s", [Directive(text="never touch main; what does line 2 say?")])[0]
        assert actor.stated("s") == ()
        head = store.entries("s")[-1]
        rule = WorkContract(text="never touch main", category="rule", turn_id=directive, via="directive")
        written = chained(At(head.id, head.seq + 1, time.time_ns() // 1000), "s", [Mapper().encode_payload(rule)])
        card_id, card, stated, seen, entry = actor.close_turn_card_stated("s", "completed", written=written)
        entries = store.entries("s")
        assert card is not None and entries[-1].id == card_id
        assert entry == entries[-1]  # chained after what the turn wrote: the driver knows the head without a read
        assert [item.text for item in stated] == ["never touch main"] and stated == actor.stated("s")
        assert seen == entries[-1].seq  # the card is the first entry the index had not folded in


def test_a_close_digests_the_bodies_its_index_read_without_reading_each_back(tmp_path: Path) -> None:
    """The turn's earlier results were committed by the turn's passes (another writer, as the AssemblerActor is
    on Ray): the close's index reads them with their blobs, and its digests take the bodies from there, not
    a ledger read apiece (on Ray a call each). The card is the one a fresh actor, reading every body, writes."""
    from vak_context.actors.ledger.client import LedgerClient

    gets: list[str] = []

    class Counting(LedgerClient):
        def get(self, entry_id: str) -> StoredEntry:
            gets.append(entry_id)
            return super().get(entry_id)

    root = tmp_path / "ledger"
    with LedgerStore(root) as store:
        actor = EvidenceActor(str(root), store)
        actor.ledger = actor._indexes.ledger = Counting(str(root), store)
        store.append("s", [Directive(text="read notes.txt")])
        assert actor.stated("s") == ()  # the index is built
        bodies = []
        for k in range(3):  # what the passes committed: steps, bodies and results, written by another writer
            store.append("s", [AssistantStep(blocks=(ToolUseBlock(id=f"c{k}", name="read_file",
                                                                  input={"path": f"n{k}"}),))])
            meta, blob, text = evidence_body(f"c{k}", "read_file", f"alpha {k}\nbeta\n" * 40, is_error=False)
            [body_id] = store.append("s", [meta], blobs=[blob])
            store.append("s", [tool_result(meta, text, body_id)])
            bodies.append(body_id)
        written = _chain_answer(store, "beta, three times.")
        card_id, card = actor.close_turn_card("s", None, "completed", written=written)
        assert gets == [] and card is not None and all(b[:12] in card["text"] for b in bodies)
        fresh = EvidenceActor(str(root), store)
        assert fresh.card("s", card_id) == card


def test_a_close_handed_the_entries_since_its_index_reads_none(tmp_path: Path) -> None:
    """``entries``: what came before the turn's last entries from where the index ended, as the driver on Ray knows
    them (``RayServices``): folded in, no read of the ledger, and the card a fresh actor (reading) writes. Handed
    with a gap, the index reads what it misses, and the card is the same."""
    from vak_context.actors.ledger.client import LedgerClient

    reads: list[int] = []

    class Counting(LedgerClient):
        def entries(self, session: str, start: int = 0, stop: int | None = None) -> list[StoredEntry]:
            reads.append(start)
            return super().entries(session, start, stop)

    for gap in (False, True):
        root = tmp_path / f"ledger-{gap}"
        with LedgerStore(root) as store:
            actor = EvidenceActor(str(root), store)
            actor.ledger = actor._indexes.ledger = Counting(str(root), store)
            store.append("s", [Directive(text="read notes.txt")])
            assert actor.stated("s") == ()  # the index is built
            seen = actor._indexes.seen("s")
            for k in range(2):  # what the passes committed
                store.append("s", [AssistantStep(blocks=(ToolUseBlock(id=f"c{k}", name="read_file",
                                                                      input={"path": f"n{k}"}),))])
                meta, blob, text = evidence_body(f"c{k}", "read_file", f"alpha {k}\nbeta\n" * 40, is_error=False)
                [body_id] = store.append("s", [meta], blobs=[blob])
                store.append("s", [tool_result(meta, text, body_id)])
            handed = store.entries("s", seen)
            written = _chain_answer(store, "beta, twice.")
            reads.clear()
            card_id, card, _, _, entry = actor.close_turn_card_stated(
                "s", "completed", written=written, entries=handed[1:] if gap else handed)
            assert (reads != []) is gap and card is not None and entry is not None and entry.id == card_id
            assert EvidenceActor(str(root), store).card("s", card_id) == card
