"""The no-cut checker (spec §3, principle 2), shared by the no-cut property (tests/unit/test_nocut.py)
and the history-shape test on real sessions (tests/unit/test_history_shape.py).

``check_no_cut`` checks every tool result of a session in the ledger: it appears verbatim, or as a
window whose omission line and clipped-line notes name the exact recall call for what each leaves
out, or (once its turn is closed) as a digest carrying its evidence id, named on the turn's card, or
named in a compaction packet; and recall returns the original byte for byte.
"""

from __future__ import annotations

import json
import re
from typing import Any

from vak_context.actors.evidence import EvidenceActor
from vak_context.context.evidence.digest import (
    DIGEST_CHARS,
    LINE_CHARS,
    WINDOW_CHARS,
    body_text,
    evidence_tag,
)
from vak_context.context.history.render import SHORT_ID, VERBATIM_CHARS, render_turn
from vak_context.context.history.turncard import card_evidence_ids, render_card
from vak_context.context.history.turns import TurnIndex
from vak_context.engine.session_summary import evidence_infos
from vak_context.events.blocks import ToolResultBlock
from vak_context.events.payloads import Compaction, CoveredEvidence, EvidenceBody, ToolResult
from vak_context.storage.ledger import LedgerStore

OMISSION = re.compile(r'recall\(\{"id": "([0-9a-f]{64})", "range": \[(\d+), (\d+)\]\}\)')
# what a window puts in place of what it leaves out: an omission line (replaced whole, newline
# included) or a clipped line's note (replaced; the line's own terminator stays)
_MARKER = re.compile(
    r"\[… lines? \d+(?:-\d+)? omitted \(\d+ chars\); recall\((?P<omitted>\{[^\n]*?\})\) returns them …\]\n"
    r"| … \[line \d+ continues for \d+ more chars; recall\((?P<continued>\{[^\n]*?\})\) returns them\]"
)


def check_window(result: ToolResult, text: str, actor: EvidenceActor | None, session: str) -> None:
    """A current-turn view: the body verbatim, or a window in which every omission line and every
    clipped line's note names a recall call; answering each call (through the actor when there is
    one, else from the stored text) and putting the answer in its place gives back the whole body."""
    if not result.windowed:
        assert result.content == text
        return
    assert len(text) > WINDOW_CHARS and len(result.content) <= WINDOW_CHARS
    pieces, pos, calls = [], 0, 0
    for m in _MARKER.finditer(result.content):
        args = json.loads(m.group("omitted") or m.group("continued"))
        if text.count(m.group(0)) and args["id"] != result.evidence_id:
            continue  # the body's own text quoting the format (docs/EVIDENCE.md does): kept, not a marker
        assert args["id"] == result.evidence_id, args  # the id is shown, in full
        if actor is not None:
            answer = actor.recall(session, args)
            assert not answer["is_error"], answer
            recalled = answer["content"]
        else:
            recalled = _answer(text, args)
        pieces += [result.content[pos : m.start()], recalled]
        pos, calls = m.end(), calls + 1
    pieces.append(result.content[pos:])
    rebuilt = "".join(pieces)
    assert calls >= 1  # a window always leaves something out, so it always names a recall
    # a clipped last line without a newline is shown with one
    assert rebuilt == text or (rebuilt == text + "\n" and _clipped_last_line(text))


def _answer(text: str, args: dict[str, Any]) -> str:
    """What the recall tool returns for ``args`` on ``text``, for checks without an actor."""
    from vak_context.context.evidence.digest import RecallRequest, parse_recall_args, select

    request = parse_recall_args(args)
    assert isinstance(request, RecallRequest)
    recalled = select(text, request.id or "", request.range, request.chars)
    assert isinstance(recalled, str), recalled
    return recalled


def _clipped_last_line(text: str) -> bool:
    last = text.rsplit("\n", 1)[-1]
    return bool(last) and len(last.removesuffix("\r")) > LINE_CHARS


def check_no_cut(
    store: LedgerStore, actor: EvidenceActor | None, session: str, originals: dict[str, bytes] | None = None
) -> int:
    """Check every tool result of ``session``; returns how many were checked."""
    head = store.head(session)
    index = TurnIndex.build(store.chain_to_root(head or ""), 0.25)
    chain = [e.id for e in store.chain_to_root(head or "")]
    for summary in index.summaries:  # a packet names every result of its turns that it summarised
        listed = _covered(store, summary.id)  # null: named by its range, the index's derived ids
        named = set(summary.covered_evidence) if listed is None else {c.id for c in listed}
        before = set(chain[: chain.index(summary.id)])
        covered = index.turns[(summary.first_ordinal or 1) - 1 : summary.last_ordinal or 0]
        assert {e for t in covered for e in t.evidence if e in before} == named
    checked = 0
    for turn in index.turns:
        infos = evidence_infos(store, turn)
        record = {
            p.tool_use_id: p.content
            for m in render_turn(turn, infos)
            for p in m.content
            if isinstance(p, ToolResultBlock)
        }
        card = card_evidence_ids(render_card(turn.card, turn.ordinal)) if turn.card is not None else []
        for ex in turn.exchanges:
            if ex.result is None or ex.result.evidence_id is None:
                continue
            eid = ex.result.evidence_id
            entry = store.get(eid)
            meta = store.mapper.payload_of(entry)
            assert isinstance(meta, EvidenceBody)
            blob = entry.blob or b""
            if originals is not None:
                assert blob == originals[eid]  # the whole result, byte for byte
            text = body_text(blob, meta.encoding)
            assert meta.chars == (len(text) if meta.encoding == "utf-8" else len(blob))
            check_window(ex.result, text, actor, session)
            # closed turn: as sent when no longer than a digest may be, else a digest ending with the tag
            # that names this evidence
            tag = evidence_tag(eid[:SHORT_ID], len(text))
            if len(ex.result.content) <= VERBATIM_CHARS:
                assert record[ex.tool_use_id] == ex.result.content
            else:
                assert record[ex.tool_use_id].endswith(tag), record[ex.tool_use_id][-200:]
            assert len(record[ex.tool_use_id]) <= DIGEST_CHARS  # a digest is bounded, whatever the body
            if infos[eid].shape == "error" and len(text) + len(tag) < DIGEST_CHARS:
                assert text.strip() in record[ex.tool_use_id]  # errors that fit are shown verbatim
            if turn.card is not None:
                assert eid[:SHORT_ID] in card  # named in one of the card's [evidence:…] tags
            if actor is not None:
                recalled = actor.recall(session, {"id": eid})
                assert not recalled["is_error"] and recalled["content"] == text
                if meta.encoding == "utf-8":
                    assert recalled["content"].encode() == blob
            checked += 1
    return checked


def _covered(store: LedgerStore, packet_id: str) -> tuple[CoveredEvidence, ...] | None:
    packet = store.payload(packet_id)
    assert isinstance(packet, Compaction)
    return packet.covered_evidence
