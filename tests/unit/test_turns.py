"""The TurnIndex (spec §2): turns, control messages, packets, resets, token counts, incremental upkeep."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from tests.fakes.imported import FILES, TOKENS_PER_CHAR, Imported
from tests.fakes.sessions import Chain, add_result
from vak_context.context.history.turns import TurnIndex
from vak_context.errors import InvalidInput
from vak_context.events import canonical
from vak_context.events.payloads import (
    Activity,
    AssistantStep,
    Compaction,
    Directive,
    IntentNote,
    Nudge,
    Presentation,
    PresentationSource,
    Receipt,
    ResetWithHandoff,
    TextBlock,
    Thread,
    ToolResult,
    ToolUseBlock,
    TurnCard,
    Usage,
    WorkContract,
)
from vak_context.importers import SessionOutcome, SessionWriter, read_recordings
from vak_context.sessions.generator import generate_session
from vak_context.storage.ledger import LedgerStore


def _step(*blocks: Any, stop: str | None = None) -> AssistantStep:
    return AssistantStep(blocks=tuple(blocks), model="m", provider="p", stop_reason=stop)


def test_turns_controls_packets_and_reset() -> None:
    c = Chain()
    c.add(IntentNote(text="help with travel"))  # before any directive: preamble, not a turn
    t1 = c.add(Directive(text="Find flights to Lisbon."))
    c.add(_step(ToolUseBlock(id="a", name="search", input={"q": "LIS"})))
    ev1, _ = add_result(c, "a", "3 flights")
    c.add(Nudge(tag="presentation-check", text="use a card"))
    c.add(_step(TextBlock(text="There are 3 flights.")))
    t2 = c.add(Directive(text="Book the cheapest."))
    c.add(Thread(items=("Find flights to Lisbon.",)))
    c.add(WorkContract(text="book only with consent"))
    c.add(_step(TextBlock(text="Booked.")))
    c.add(Compaction(first_turn_id=t1, last_turn_id=t2, summary="Turns 1-2: booked a flight.", model="p:m"))
    c.add(ResetWithHandoff(handoff="fresh start", last_turn_id=t2))
    t3 = c.add(Directive(text="Now hotels."))
    index = TurnIndex.build(c.entries)

    assert [t.ordinal for t in index.turns] == [1, 2, 3]
    assert [t.id for t in index.turns] == [t1, t2, t3]
    assert len(index.preamble) == 1
    assert [(k.kind, k.turn) for k in index.controls] == [
        ("intent_note", None),
        ("nudge", 1),
        ("thread", 2),
        ("work_contract", 2),
    ]
    assert index.turns[0].evidence == [ev1]
    assert (
        index.turns[0].final_answer is not None and index.turns[0].final_answer.text == "There are 3 flights."
    )
    [packet] = index.summaries
    assert (packet.first_ordinal, packet.last_ordinal, packet.behind_reset) == (1, 2, True)
    assert [t.behind_reset for t in index.turns] == [True, True, False]
    assert [t.ordinal for t in index.planned_turns()] == [3]
    assert [t.closed for t in index.turns] == [True, True, False]  # the next directive closed 1 and 2
    assert index.turn(2).id == t2 and index.by_id(t3).ordinal == 3
    assert index.turn_of(c.entries[3].id) == 1
    for bad in (0, 4, "1", True):
        with pytest.raises(InvalidInput, match="turn"):
            index.turn(bad)  # type: ignore[arg-type]


def test_presentations_and_cards_attach_to_their_turn() -> None:
    c = Chain()
    t1 = c.add(Directive(text="Copper price?"))
    c.add(_step(ToolUseBlock(id="e", name="emit_metric_card", input={"label": "Copper", "value": 9.1})))
    pid = c.add(
        Presentation(
            turn_id=t1,
            source=PresentationSource(type="tool_call", tool_use_id="e"),
            semantic_type="metric",
            payload={"label": "Copper", "value": 9.1},
            payload_digest="d",
        )
    )
    c.add(
        ToolResult(tool_use_id="e", tool_name="emit_metric_card", content='{"presentation": "x", "ok": true}')
    )
    c.add(_step(TextBlock(text="Copper is 9.1.")))
    card = c.add(TurnCard(turn_id=t1, asked="Copper price?"))
    index = TurnIndex.build(c.entries)
    turn = index.turn(1)
    assert turn.presentations == [pid] and turn.presentation_payloads[pid].semantic_type == "metric"
    assert turn.card_id == card and turn.closed
    assert not index.problems


def test_token_counts_are_exact_where_receipts_cover_the_turn() -> None:
    c = Chain()
    c.add(Directive(text="x" * 40))
    s1 = c.add(_step(ToolUseBlock(id="a", name="read", input={})))
    c.add(
        Receipt(
            provider="p",
            model="m",
            usage=Usage(input_tokens=80, cache_read_tokens=20, output_tokens=10),
            latency_ms=5,
            step_id=s1,
        )
    )
    add_result(c, "a", "y" * 400)
    s2 = c.add(_step(TextBlock(text="done")))
    c.add(
        Receipt(
            provider="p",
            model="m",
            usage=Usage(input_tokens=30, cache_read_tokens=200, output_tokens=7),
            latency_ms=5,
            step_id=s2,
        )
    )
    c.add(Directive(text="z" * 40))
    c.add(_step(TextBlock(text="ok")))  # no receipt: estimated
    index = TurnIndex.build(c.entries, tokens_per_char=0.25)
    first, second = index.turns
    # directive estimated (40 × 0.25), the rest measured: (230 + 7) − 100 tokens between the two requests
    assert (first.tokens, first.tokens_source) == (10 + 237 - 100, "receipt")
    assert (second.tokens, second.tokens_source) == (math.ceil((40 + 2) * 0.25), "estimate")
    # A prompt that shrank inside the turn (a compaction mid-turn) makes deltas meaningless: estimate.
    c2 = Chain()
    c2.add(Directive(text="q"))
    for i, prompt in enumerate((500, 90)):
        s = c2.add(_step(TextBlock(text=f"step {i}")))
        c2.add(
            Receipt(
                provider="p",
                model="m",
                usage=Usage(input_tokens=prompt, output_tokens=5),
                latency_ms=1,
                step_id=s,
            )
        )
    assert TurnIndex.build(c2.entries).turn(1).tokens_source == "estimate"


def test_add_checks_the_chain() -> None:
    c = Chain()
    c.add(Directive(text="a"))
    c.add(_step(TextBlock(text="b")))
    index = TurnIndex.build(c.entries[:1])
    with pytest.raises(InvalidInput, match="already in the index"):
        index.add(c.entries[0])
    other = Chain()
    other.add(Directive(text="elsewhere"))
    with pytest.raises(InvalidInput, match="not the next entry"):
        index.add(other.entries[0])
    index.add(c.entries[1])
    assert index == TurnIndex.build(c.entries)
    with pytest.raises(InvalidInput, match="tokens_per_char"):
        TurnIndex(0)
    with pytest.raises(InvalidInput, match="StoredEntry"):
        index.add("nope")  # type: ignore[arg-type]


def _kept_up(store: LedgerStore, session: str, write: Any, tpc: float) -> TurnIndex:
    """An index kept current entry by entry while ``write`` appends, reading each new entry back."""
    index = TurnIndex(tpc)
    seen = 0

    def catch_up() -> None:
        nonlocal seen
        for entry in store.entries(session, seen):
            index.add(entry)
        seen = store.count(session)

    write(catch_up)
    return index


def test_incremental_index_equals_a_rebuild_generated(tmp_path: Path) -> None:
    root = tmp_path / "ledger"
    with LedgerStore(root) as store:

        def write(catch_up: Any) -> None:
            def append(payload: BaseModel, blob: bytes | None) -> str:
                eid = store.append_one("gen", payload, blob=blob)
                catch_up()  # the index is used between appends, never rebuilt
                return eid

            generate_session(seed=5, turns=9, append=append)

        kept = _kept_up(store, "gen", write, 0.3)
    with LedgerStore(root, readonly=True) as fresh:
        rebuilt = TurnIndex.build(fresh.chain_to_root(fresh.head("gen") or ""), 0.3)
    assert kept == rebuilt
    assert kept.canonical_bytes() == rebuilt.canonical_bytes()
    assert json.loads(kept.canonical_bytes()) == kept.dump()
    assert canonical.is_canonical(rebuilt.canonical_bytes())
    # the generator resets after turn 1: that turn is behind the reset, the rest are planned
    assert len(rebuilt.turns) == 9 and rebuilt.resets
    assert [t.behind_reset for t in rebuilt.turns] == [True] + [False] * 8
    with LedgerStore(root, readonly=True) as fresh:
        chain = fresh.chain_to_root(fresh.head("gen") or "")
    assert TurnIndex.build(chain[:-1], 0.3) != rebuilt  # the comparison sees a one-entry difference


@pytest.mark.parametrize("key", ["subagent", "mini", "swe", "spotter"])
def test_importer_index_equals_a_rebuild(tmp_path: Path, trajectories: Path, key: str) -> None:
    """The importer keeps its TurnIndex from (id, payload) pairs as it appends; the ledger rebuild matches."""
    _, [rec], _ = read_recordings(trajectories / FILES[key])
    with LedgerStore(tmp_path / "ledger") as store:
        writer = SessionWriter(store, "s", SessionOutcome("s", rec.format), tokens_per_char=TOKENS_PER_CHAR)
        for event in rec.events:
            writer.write(event)
        writer.finish()
        rebuilt = TurnIndex.build(store.chain_to_root(store.head("s") or ""), TOKENS_PER_CHAR)
        assert rebuilt.count == store.count("s")
    assert writer.index == rebuilt
    assert rebuilt.count == len(rebuilt.preamble) + sum(len(t.entry_ids) for t in rebuilt.turns)


def test_rebuilt_indexes_of_imported_sessions_are_stable(imported: Imported) -> None:
    kinds: Counter[str] = Counter()
    for session in imported.sessions("tau")[::25] + imported.sessions("openhands"):
        chain = imported.store.chain_to_root(imported.store.head(session) or "")
        a = TurnIndex.build(chain, TOKENS_PER_CHAR)
        b = TurnIndex(TOKENS_PER_CHAR)
        for entry in chain:
            b.add((entry, imported.store.mapper.payload_of(entry)))
        assert a == b and not a.problems
        assert all(t.card_id is not None for t in a.turns)  # every imported turn was closed with a card
        kinds.update(e.kind for e in chain)
    assert kinds["activity"] and kinds["turn_card"] and kinds["directive"]
    assert Activity is not None


def test_a_withdrawn_reply_leaves_its_turn_and_its_card_but_stays_in_the_chain() -> None:
    from vak_context.context.history.render import render_turn
    from vak_context.context.history.turns import WITHDRAWN
    from vak_context.events.payloads import Answer

    c = Chain()
    t1 = c.add(Directive(text="Fix the failing test."))
    c.add(_step(ToolUseBlock(id="a", name="bash", input={"command": "pytest"})))
    add_result(c, "a", "1 failed")
    unparsed = c.add(_step(TextBlock(text="I will now fix it, THOUGHT without a call.")))
    c.add(TurnCard(turn_id=t1, asked="Fix the failing test.", answered=Answer(narration="I will now fix it.")))
    c.add(Activity(activity=WITHDRAWN, detail={"steps": [unparsed], "digests": ["d"]}))
    c.add(Directive(text="No tool calls found in the response."))
    index = TurnIndex.build(c.entries)

    first = index.turns[0]
    assert [s.id for s in first.steps] != [] and unparsed not in [s.id for s in first.steps]
    assert first.withdrawn == [unparsed] and unparsed in first.entry_ids
    assert first.final_answer is None and first.card is not None and first.card.answered.narration == ""
    shown = json.dumps([m.model_dump(mode="json") for m in render_turn(first, {})])
    assert "1 failed" in shown and "THOUGHT" not in shown
    # Kept entry by entry, the index is the one a rebuild gives.
    kept = TurnIndex()
    for entry in c.entries:
        kept.add(entry)
    assert kept == index and "withdrawn" in index.dump()["turns"][0]
