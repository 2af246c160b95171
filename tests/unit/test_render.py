"""Full-record rendering (spec §10): thinking dropped, digests for evidence, acks for cards, API-valid pairs."""

from __future__ import annotations

import dataclasses
import json
import re

from tests.fakes.imported import TOKENS_PER_CHAR, Imported
from tests.fakes.sessions import Chain
from vak_context.context.history.cards import card_ack, payload_digest
from vak_context.context.history.render import (
    NO_RESULT,
    SHORT_ID,
    VERBATIM_CHARS,
    api_problems,
    closed_record,
    evidence_info,
    record_text,
    render_turn,
)
from vak_context.context.history.turns import TurnIndex
from vak_context.context.request.messages import Message
from vak_context.engine.session_summary import evidence_infos
from vak_context.events.blocks import TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock
from vak_context.events.payloads import (
    AssistantStep,
    Directive,
    EvidenceBody,
    Presentation,
    PresentationSource,
    ToolResult,
)

TAG = re.compile(r"\[evidence:([0-9a-f]{12}) — (\d+) chars; call recall to expand\]$")


def test_every_imported_turn_renders_api_valid(imported: Imported) -> None:
    turns = calls = thinking_steps = 0
    for key in imported.reports:
        sessions = imported.sessions(key)
        for session in sessions if key != "tau" else sessions[::4]:
            index = TurnIndex.build(
                imported.store.chain_to_root(imported.store.head(session) or ""), TOKENS_PER_CHAR
            )
            for turn in index.turns:
                infos = evidence_infos(imported.store, turn)
                messages = render_turn(turn, infos)
                assert api_problems(messages) == [], (session, turn.ordinal)
                assert messages[0].role == "user" and messages[0].text == turn.directive.text
                parts = [p for m in messages for p in m.content]
                assert not any(isinstance(p, ThinkingBlock) for p in parts)  # thinking is dropped
                uses = [p for p in parts if isinstance(p, ToolUseBlock)]
                results = {p.tool_use_id: p for p in parts if isinstance(p, ToolResultBlock)}
                assert [u.id for u in uses] == [ex.tool_use_id for ex in turn.exchanges]
                for ex in turn.exchanges:
                    shown = results[ex.tool_use_id].content
                    if ex.result is None:
                        assert shown == NO_RESULT and results[ex.tool_use_id].is_error
                    elif len(ex.result.content) <= VERBATIM_CHARS:  # as short as a digest: as it was sent
                        assert shown == ex.result.content
                    else:  # every longer evidence result is its digest, ending with the tag that names it
                        m = TAG.search(shown)
                        assert m is not None and m.group(1) == (ex.evidence_id or "")[:SHORT_ID]
                        assert int(m.group(2)) == index.evidence[ex.evidence_id or ""].chars
                thinking_steps += sum(
                    1 for s in turn.steps if any(isinstance(b, ThinkingBlock) for b in s.payload.blocks)
                )
                turns += 1
                calls += len(uses)
    tau_turns = imported.reports["tau"].totals()["turns"]
    assert (
        turns
        == 2
        + 2
        + 3
        + 1
        + 1
        + sum(  # spotter, subagent, openhands, mini, swe, every 4th tau session
            s.turns for s in imported.reports["tau"].sessions[::4]
        )
        and tau_turns == 1490
    )
    assert calls > 500 and thinking_steps > 10  # the Claude Code sessions think before they act


def _turn_with_cards() -> tuple[TurnIndex, str, str]:
    c = Chain()
    t1 = c.add(Directive(text="Copper?"))
    c.add(
        AssistantStep(
            blocks=(
                ThinkingBlock(thinking="plan: search, then card"),
                ToolUseBlock(id="s", name="web_search", input={"query": "copper"}),
            )
        )
    )
    body = "Error: rate limited"
    ev = c.add(
        EvidenceBody(
            tool_use_id="s", tool_name="web_search", chars=len(body), bytes=len(body), is_error=True
        ),
        body.encode(),
    )
    c.add(ToolResult(tool_use_id="s", tool_name="web_search", content=body, is_error=True, evidence_id=ev))
    payload = {"label": "Copper", "value": 9100}
    c.add(
        AssistantStep(
            blocks=(
                TextBlock(text="Here is the card."),
                ToolUseBlock(id="e", name="emit_metric_card", input=payload),
            )
        )
    )
    pid = c.add(
        Presentation(
            turn_id=t1,
            source=PresentationSource(type="tool_call", tool_use_id="e"),
            semantic_type="metric",
            payload=payload,
            payload_digest=payload_digest(payload),
        )
    )
    c.add(ToolResult(tool_use_id="e", tool_name="emit_metric_card", content="whatever the runtime said"))
    fence = "```vak\n" + json.dumps({"card": "metric", "payload": payload}) + "\n```\n"
    other = "```vak\n" + json.dumps({"card": "metric", "payload": {"label": "Tin", "value": 1}}) + "\n```\n"
    c.add(
        AssistantStep(
            blocks=(
                ThinkingBlock(thinking="done"),
                TextBlock(text=f"Copper is 9,100.\n{fence}{other}Sources above."),
            )
        )
    )
    c.add(AssistantStep(blocks=(ThinkingBlock(thinking="only thinking"),)))
    return TurnIndex.build(c.entries), ev, pid


def test_record_drops_thinking_digests_evidence_acks_cards_and_drops_duplicate_fences() -> None:
    index, ev, pid = _turn_with_cards()
    turn = index.turn(1)
    meta = EvidenceBody(tool_use_id="s", tool_name="web_search", chars=19, bytes=19, is_error=True)
    messages = render_turn(turn, {ev: evidence_info(ev, meta, b"Error: rate limited", {"query": "copper"})})
    assert api_problems(messages) == []
    assert [m.role for m in messages] == ["user", "assistant", "user", "assistant", "user", "assistant"]
    assert not any(isinstance(p, ThinkingBlock) for m in messages for p in m.content)
    search_result = messages[2].content[0]
    assert isinstance(search_result, ToolResultBlock) and search_result.is_error
    assert search_result.content == "Error: rate limited"  # shorter than any digest: shown as it was sent
    card_result = messages[4].content[0]
    assert isinstance(card_result, ToolResultBlock) and card_result.content == card_ack(pid)
    final = messages[5].text
    assert "Copper is 9,100." in final and "Sources above." in final
    assert '"Copper"' not in final  # the fence repeating the emitted card is dropped
    assert '"Tin"' in final  # a fence for a card nobody presented is the model's prose: kept
    text = record_text(messages)
    assert "tool_use emit_metric_card" in text and card_ack(pid) in text


def test_a_closed_record_is_rendered_once_and_again_when_what_it_is_made_of_changes() -> None:
    index, ev, _ = _turn_with_cards()
    turn = index.turn(1)
    meta = EvidenceBody(tool_use_id="s", tool_name="web_search", chars=19, bytes=19, is_error=True)
    infos = {ev: evidence_info(ev, meta, b"Error: rate limited", {"query": "copper"})}
    first = closed_record(turn, infos)
    assert list(first) == render_turn(turn, infos)
    assert closed_record(turn, dict(infos)) is first  # the same turn, the same parts: the record kept
    # a new digest for its evidence (another info object) renders it again
    again = closed_record(turn, {ev: dataclasses.replace(infos[ev])})
    assert again is not first and list(again) == list(first)
    # a step withdrawn from the turn (``history.withdrawn``) renders it again, without that step
    withdrawn = turn.steps.pop(0)
    try:
        changed = closed_record(turn, infos)
        assert list(changed) == render_turn(turn, infos) and list(changed) != list(first)
    finally:
        turn.steps.insert(0, withdrawn)
    assert list(closed_record(turn, infos)) == list(first)


def test_api_problems_finds_broken_records() -> None:
    call = Message(
        role="assistant",
        content=(ToolUseBlock(id="a", name="t", input={}), ToolUseBlock(id="b", name="t", input={})),
    )
    ok = [
        Message.user("hi"),
        call,
        Message(
            role="user",
            content=(
                ToolResultBlock(tool_use_id="a", content="1"),
                ToolResultBlock(tool_use_id="b", content="2"),
            ),
        ),
    ]
    assert api_problems(ok) == []
    swapped = [
        *ok[:2],
        Message(
            role="user",
            content=(
                ToolResultBlock(tool_use_id="b", content="2"),
                ToolResultBlock(tool_use_id="a", content="1"),
            ),
        ),
    ]
    assert api_problems(swapped)
    missing = [*ok[:2], Message(role="user", content=(ToolResultBlock(tool_use_id="a", content="1"),))]
    assert api_problems(missing)
    assert api_problems([Message.user("a"), Message.user("b")])
    twice = [
        *ok,
        Message(role="assistant", content=(ToolUseBlock(id="a", name="t", input={}),)),
        Message(role="user", content=(ToolResultBlock(tool_use_id="a", content="3"),)),
    ]
    assert any("more than once" in p for p in api_problems(twice))
    assert api_problems([Message.assistant("first")])
    assert api_problems([Message.user("x"), Message(role="assistant", content=(TextBlock(text="  "),))])
    stray = [
        Message.user("x"),
        Message.assistant("y"),
        Message(role="user", content=(ToolResultBlock(tool_use_id="z", content="?"),)),
    ]
    assert api_problems(stray)
