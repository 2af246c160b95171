"""TurnCard (spec §10): deterministic fields, the narration and asked rules, and the model-visible card."""

from __future__ import annotations

import math

from tests.fakes.imported import TOKENS_PER_CHAR, Imported
from tests.fakes.sessions import Chain
from vak_context.context.history.render import SHORT_ID
from vak_context.context.history.turncard import (
    args_digest,
    asked_of,
    build_card,
    card_evidence_ids,
    derive_outcome,
    index_text,
    leading_sentence,
    narration_of,
    render_card,
)
from vak_context.context.history.turns import TurnIndex
from vak_context.engine.session_summary import evidence_infos
from vak_context.events import canonical
from vak_context.events.payloads import (
    AssistantStep,
    Directive,
    EvidenceBody,
    Nudge,
    Presentation,
    PresentationSource,
    TextBlock,
    ToolResult,
    ToolUseBlock,
)

SIXTY = " ".join(f"w{i}" for i in range(60))


def test_narration_is_verbatim_up_to_sixty_words() -> None:
    assert narration_of(SIXTY + ".") == SIXTY + "."
    long = "The copper price rose 4% this quarter. " + SIXTY
    assert narration_of(long) == "The copper price rose 4% this quarter."
    # The boundary is . ! or ?, and a blank line; never an abbreviation or a decimal point.
    assert leading_sentence("Use e.g. the cache. Then more.") == "Use e.g. the cache."
    assert leading_sentence("Pi is 3.14 roughly! Yes.") == "Pi is 3.14 roughly!"
    assert leading_sentence('He said "stop." Then left.') == 'He said "stop."'
    assert leading_sentence("## Results\n\nAll green.") == "## Results"
    assert leading_sentence("no boundary at all") == "no boundary at all"
    many = "Why did it fail? " + SIXTY
    assert narration_of(many) == "Why did it fail?"


def test_asked_is_verbatim_when_short_else_first_sentence_and_gist() -> None:
    assert asked_of("What is the copper price?", 0.25) == "What is the copper price?"
    directive = (
        "Compare Rust and Go for building a message queue. Consider throughput, latency, memory safety, "
        "the ecosystem of Kafka clients, the ecosystem of NATS clients, and operational tooling. Rust throughput "
        "matters most; Go latency second. Include benchmarks where they exist and cite sources for throughput."
    )
    asked = asked_of(directive, 0.25)
    assert asked.startswith("Compare Rust and Go for building a message queue. [+")
    assert "key terms: throughput" in asked  # the most frequent content word of the rest leads the gist
    assert asked_of(directive, 0.25) == asked
    assert asked_of(directive, 0.01) == directive  # a model with few tokens per char: it fits


def test_args_digest_is_deterministic_and_names_long_values_by_size() -> None:
    assert args_digest({"q": "copper", "n": 3}) == 'n=3, q="copper"'
    assert args_digest({"n": 3, "q": "copper"}) == args_digest({"q": "copper", "n": 3})
    long = args_digest({"content": "line one of a file\n" + "x" * 5000})
    assert long.startswith('content=<5019 chars: "line one of a file"…>')
    assert args_digest({"items": list(range(500))}) == "items=<list of 500>"


def _card_turn() -> tuple[TurnIndex, str]:
    c = Chain()
    t1 = c.add(Directive(text="Copper price now?"))
    c.add(AssistantStep(blocks=(ToolUseBlock(id="s", name="web_search", input={"query": "copper price"}),)))
    body = '{"results": [{"title": "Copper hits $9,100", "url": "https://ex.org/cu"}]}'
    ev = c.add(
        EvidenceBody(tool_use_id="s", tool_name="web_search", chars=len(body), bytes=len(body)), body.encode()
    )
    c.add(ToolResult(tool_use_id="s", tool_name="web_search", content=body, evidence_id=ev))
    c.add(
        AssistantStep(
            blocks=(
                ToolUseBlock(
                    id="e", name="emit_metric_card", input={"label": "Copper", "value": 9100, "unit": "USD/t"}
                ),
            )
        )
    )
    pid = c.add(
        Presentation(
            turn_id=t1,
            source=PresentationSource(type="tool_call", tool_use_id="e"),
            semantic_type="metric",
            payload={"label": "Copper", "unit": "USD/t", "value": 9100},
            payload_digest="d" * 64,
            derived_from=(ev,),
            title="Copper",
            identity_digest="label: Copper\nunit: USD/t\nvalue: 9100",
        )
    )
    c.add(
        ToolResult(
            tool_use_id="e", tool_name="emit_metric_card", content=f'{{"presentation": "{pid}", "ok": true}}'
        )
    )
    c.add(AssistantStep(blocks=(TextBlock(text="Copper trades at $9,100 a tonne."),)))
    return TurnIndex.build(c.entries), ev


def test_card_fields_and_rendering() -> None:
    from vak_context.context.history.render import evidence_info

    index, ev = _card_turn()
    turn = index.turn(1)
    meta = EvidenceBody(tool_use_id="s", tool_name="web_search", chars=10, bytes=10)
    body = b'{"results": [{"title": "Copper hits $9,100", "url": "https://ex.org/cu"}]}'
    infos = {ev: evidence_info(ev, meta, body, {"query": "copper price"})}
    card = build_card(index, turn, infos)
    assert [t.tool for t in card.did] == ["web_search"]  # the emit_*_card call is an answer, not a trace line
    assert card.did[0].evidence_id == ev and card.did[0].shape == infos[ev].shape
    assert [p.title for p in card.answered.presentations] == ["Copper"]
    assert card.answered.presentations[0].derived_from == (ev,)
    assert card.answered.narration == "Copper trades at $9,100 a tonne."
    assert card.outcome == "completed"
    text = render_card(card, 1)
    assert f"[evidence:{ev[:SHORT_ID]}]" in text and 'recall({"turn": 1})' in text
    assert f"[presentation:{card.answered.presentations[0].id[:SHORT_ID]}]" in text
    assert card.tokens_card == math.ceil(len(text) * index.tokens_per_char)
    assert card.tokens_full > card.tokens_card
    # Deterministic: the same inputs give the same bytes.
    again = build_card(index, turn, infos)
    assert canonical.encode(again.model_dump(mode="json")) == canonical.encode(card.model_dump(mode="json"))
    words = index_text(
        card, {p.id: {"label": "Copper", "unit": "USD/t", "value": 9100} for p in card.answered.presentations}
    )
    for term in ("Copper price now?", "USD/t", "9100", "web_search", "copper price", "a tonne"):
        assert term in words


def test_outcomes() -> None:
    c = Chain()
    c.add(Directive(text="a"))
    c.add(AssistantStep(blocks=(ToolUseBlock(id="x", name="run", input={}),)))
    c.add(ToolResult(tool_use_id="x", tool_name="run", content="ok"))
    c.add(Directive(text="b"))  # no step at all
    c.add(Directive(text="c"))
    c.add(AssistantStep(blocks=(TextBlock(text="working"),)))
    c.add(Nudge(tag="interrupt", text="[Request interrupted by user]"))
    c.add(Directive(text="d"))
    c.add(AssistantStep(blocks=(TextBlock(text="Done."), ToolUseBlock(id="f", name="finish", input={}))))
    index = TurnIndex.build(c.entries)
    assert [derive_outcome(index, t) for t in index.turns] == [
        "degraded",
        "cancelled",
        "cancelled",
        "completed",
    ]


def test_cards_of_imported_sessions_rebuild_identically(imported: Imported) -> None:
    """A card written at import is rebuilt byte for byte from the ledger: closing a turn reads only entries."""
    checked = 0
    for key in ("subagent", "swe", "mini", "openhands"):
        for session in imported.sessions(key):
            index = TurnIndex.build(
                imported.store.chain_to_root(imported.store.head(session) or ""), TOKENS_PER_CHAR
            )
            for turn in index.turns:
                assert turn.card is not None
                rebuilt = build_card(index, turn, evidence_infos(imported.store, turn))
                assert rebuilt == turn.card
                text = render_card(rebuilt, turn.ordinal)
                named = card_evidence_ids(text)
                for ev in turn.evidence:
                    assert ev[:SHORT_ID] in named  # every evidence id is on the card
                checked += 1
    assert checked == 7  # 2 + 1 + 1 + 3 turns
