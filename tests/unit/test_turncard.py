"""TurnCard (spec §10): deterministic fields, the narration and asked rules, and the model-visible card."""

from __future__ import annotations

import math

from tests.fakes.imported import TOKENS_PER_CHAR, Imported
from tests.fakes.sessions import Chain
from vak_context.context.history.render import SHORT_ID
from vak_context.context.history.turncard import (
    CARD_CHARS,
    args_digest,
    asked_of,
    bounded_args,
    build_card,
    card_evidence_ids,
    derive_outcome,
    index_text,
    leading_sentence,
    narration_of,
    render_card,
)
from vak_context.context.history.turns import TurnIndex
from vak_context.context.planner.sizes import card_text, measure_turn
from vak_context.engine.session_summary import evidence_infos
from vak_context.events import canonical
from vak_context.events.payloads import (
    Answer,
    AssistantStep,
    Directive,
    EvidenceBody,
    Nudge,
    Presentation,
    PresentationSource,
    TextBlock,
    ToolResult,
    ToolUseBlock,
    TraceLine,
    TurnCard,
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


def _trace(tool: str, digest: str, ev: str | None, shape: str = "json") -> TraceLine:
    return TraceLine(tool=tool, args_digest=digest, evidence_id=ev, shape=shape)


def test_a_tool_heavy_card_is_one_line_a_tool_with_bounded_arguments_and_every_id() -> None:
    """Issue 26: repeated calls of one tool are one line (count, arguments bounded, all ids in one tag);
    a card over CARD_CHARS shows its arguments at the tightest level, identity arguments whole."""
    ids = [f"{i:x}" * 64 for i in range(1, 10)]
    did = (
        *(_trace("get_reservation_details", f'reservation_id="R{i}"', ids[i]) for i in range(5)),
        _trace("search_direct_flight", 'date="2024-05-25", destination="EWR", origin="MSP"', ids[5]),
        _trace("search_direct_flight", 'date="2024-05-27", destination="MSP", origin="EWR"', ids[6], "error"),
        _trace("think", 'thought="' + "a long chain of thought " * 20 + '"', ids[7], "text"),
        _trace("update_reservation_flights", 'cabin="business", flights=[{"date":"2024-05-10","flight_number":'
               '"HAT271"},{"date":"2024-05-11","flight_number":"HAT197"}], reservation_id="WUNA5K"', ids[8]),
        _trace("get_user", 'user_id="u1"', None, "none"),
    )
    card = TurnCard(turn_id="e" * 64, asked="Cancel my long flights.", did=did,
                    answered=Answer(narration="Done.\n\n1. **R2** cancelled"))
    text = render_card(card, 3)
    lines = text.splitlines()
    assert len(text) > CARD_CHARS  # nine calls: no level fits, so the last one is shown
    assert lines[0] == 'Turn 3 (completed; recall({"turn": 3})). Asked: Cancel my long flights.'
    assert lines[1] == ('- get_reservation_details ×5(reservation_id="R0"|"R1"|"R2"|"R3"|"R4") → json '
                        f"[evidence:{' '.join(i[:SHORT_ID] for i in ids[:5])}]")
    assert lines[2].startswith("- search_direct_flight ×2(date=") and "→ json, error" in lines[2]
    assert lines[3].startswith('- think(thought="a long') and lines[3].count("…") == 1
    assert '(reservation_id="WUNA5K"…)' in lines[4]  # the identity argument is kept whole when the digest is cut
    assert lines[5] == "- get_user(user_id=\"u1\") → none"
    assert lines[6] == "Answered: Done. 1. R2 cancelled"  # whitespace folded, bold marks dropped
    assert card_evidence_ids(text) == [i[:SHORT_ID] for i in ids]
    assert all(len(line) < 300 for line in lines)
    one_line_a_call = sum(len(f"- {t.tool}({t.args_digest}) → {t.shape} [evidence:{'x' * SHORT_ID}]") for t in did)
    assert len(text) < one_line_a_call / 2


def test_a_long_card_bounds_its_narration_and_asked_with_an_ellipsis_and_keeps_every_id() -> None:
    """A card within CARD_CHARS is shown whole; a longer one (a quoting answer, a long question) at the
    first bounded level that fits: the narration and asked cut at a word, ``… [+N more words]`` saying
    what follows; the stored card keeps both whole, and every id is still on the card."""
    short = TurnCard(turn_id="a" * 64, asked="What is copper at?",
                     did=(_trace("web_search", 'q="copper"', "b" * 64, "search"),),
                     answered=Answer(narration="Copper is at $9,100."))
    assert render_card(short, 2).endswith("Answered: Copper is at $9,100.") and len(render_card(short, 2)) <= CARD_CHARS
    quote = " ".join(f"word{i}" for i in range(55))  # under 60 words: the narration rule keeps it whole
    asked = "Which files does the planner read, and what does each of them hold? " + " ".join(["Quote them."] * 12)
    ids = [f"{i:x}" * 64 for i in range(1, 4)]
    card = TurnCard(turn_id="a" * 64, asked=asked, did=tuple(
        _trace(tool, f'path="docs/{tool}.md"', eid, "read") for tool, eid in zip(("a", "b", "c"), ids, strict=True)),
        answered=Answer(narration=f"Quoting the results: {quote}."))
    text = render_card(card, 4)
    assert len(text) <= CARD_CHARS
    answered = text.splitlines()[-1]
    assert answered.startswith("Answered: Quoting the results: word0") and answered.endswith(" more words]")
    assert " … [+" in text.splitlines()[0]  # the asked text, bounded too
    assert card.answered.narration.endswith("word54.") and card.asked == asked  # stored whole
    assert card_evidence_ids(text) == [i[:SHORT_ID] for i in ids]
    assert all(f'path="docs/{tool}.md"' in text for tool in "abc")  # identity arguments whole


def test_bounded_args_keeps_identity_arguments_first_and_reads_json_digests() -> None:
    assert bounded_args('q="copper"') == 'q="copper"'
    cut = bounded_args('body="' + "x" * 100 + '", path="src/app.py"', limit=40)
    assert cut == 'path="src/app.py"…'
    assert bounded_args('{"path":"docs/PLANNER.md"}') == 'path="docs/PLANNER.md"'
    assert bounded_args("x" * 100, limit=20) == "x" * 19 + "…"


def test_an_old_turn_card_record_decodes_and_renders_by_the_same_rules() -> None:
    """The stored TurnCard is unchanged: a record written before issue 26 decodes and renders the new way."""
    stored = {"kind": "turn_card", "turn_id": "a" * 64, "asked": "What is copper at?",
              "did": [{"tool": "web_search", "args_digest": 'q="copper"', "evidence_id": "b" * 64, "shape": "search"}],
              "answered": {"presentations": [{"id": "c" * 64, "semantic_type": "metric", "title": "Copper",
                                              "digest": "label: Copper\nunit: USD/t\nvalue: 9100",
                                              "derived_from": ["b" * 64]}],
                           "narration": "Copper is at $9,100. " + SIXTY},
              "outcome": "completed", "reading": {"act": "lookup"}, "tokens_full": 900, "tokens_card": 120}
    card = TurnCard.model_validate(stored)
    text = render_card(card, 2)
    assert f'- card metric "Copper" [presentation:{"c" * SHORT_ID}]: unit: USD/t; value: 9100' in text  # label = title
    assert text.endswith("Answered: Copper is at $9,100.")  # over 60 words: the leading sentence
    assert card_evidence_ids(text) == ["b" * SHORT_ID]


def test_a_card_never_costs_more_than_its_record() -> None:
    """A short exchange's card (head, recall pointer) is longer than its record: the record is its size."""
    c = Chain()
    c.add(Directive(text="hi"))
    c.add(AssistantStep(blocks=(TextBlock(text="Hello!"),)))
    c.add(Directive(text="and now?"))
    index = TurnIndex.build(c.entries)
    turn = index.turn(1)
    assert len(card_text(index, turn, {})) > measure_turn(index, turn, {}).full_chars
    size = measure_turn(index, turn, {})
    assert size.card_chars == size.full_chars


def test_a_failed_turns_reason_reaches_the_public_card() -> None:
    """The reason a turn closed failed (its turn.failed / turn.request_too_large / turn.over_window activity)
    is the public Card's ``reason``; a turn that did not fail, or whose other activities name no failure,
    has none."""
    from vak_context.engine.results import card_of
    from vak_context.events.payloads import Activity

    c = Chain()
    failures = [
        Activity(activity="turn.failed", detail={"error": "ProviderRequestError", "why": "HTTP 400: bad body"}),
        Activity(activity="turn.request_too_large", detail={"why": "needs 9000 tokens, 4000 available"}),
        Activity(activity="turn.over_window", detail={"why": "over the model's window twice"}),
        Activity(activity="cache.break", detail={"why": "the prefix changed"}),
    ]
    for i, activity in enumerate(failures):
        turn_id = c.add(Directive(text=f"question {i}"))
        c.add(activity)
        c.add(TurnCard(turn_id=turn_id, asked=f"question {i}", outcome="completed" if i == 3 else "failed"))
    index = TurnIndex.build(c.entries)
    assert [card_of(t).reason for t in index.turns] == [
        "ProviderRequestError: HTTP 400: bad body", "needs 9000 tokens, 4000 available",
        "over the model's window twice", ""]


def test_a_token_argument_is_an_identity_argument_kept_whole_when_the_digest_is_cut() -> None:
    """Issue 36 (BFCL long_context 170, 174 at T = 4,096): the access token the user gave once, that every later
    booking call reuses, was cut from the card (``book_flight(card_id="card_7243"…)``) while the user's words that
    stated it were past the card's asked text; like a key, a token is an identity argument, shown whole first."""
    digest = args_digest({"access_token": "abc123xyz", "card_id": "card_7243", "travel_class": "business",
                          "travel_date": "2026-10-10", "travel_from": "SFO", "travel_to": "CIA"})
    assert bounded_args(digest, limit=28) == 'access_token="abc123xyz"…'
    assert bounded_args('access_token="access_token_abc123", booking_id="3426812"', limit=20) == (
        'access_token="access_token_abc123"…')  # an identity argument within CALL_ARGS_CHARS is never cut
    assert bounded_args(digest, limit=60) == 'access_token="abc123xyz", card_id="card_7243"…'
