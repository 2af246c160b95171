"""The no-cut invariant (spec §3, principle 2), as a property over generated and recorded sessions.

Every tool result in the ledger appears verbatim, or as a window whose omission line names the exact
recall call for what it leaves out, or (once its turn is closed) as a digest carrying its evidence id,
or named in a compaction packet. It is never absent and never cut, and recall returns the original
byte for byte.
"""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
from hypothesis import HealthCheck, example, given, settings

from actors.evidence import EvidenceActor
from context.evidence import WINDOW_CHARS, body_text, evidence_tag, line_offsets
from context.messages import ToolResultPart
from context.render import SHORT_ID, render_turn
from context.turncard import render_card
from context.turns import TurnIndex
from events.payloads import (
    AssistantStep,
    Compaction,
    CoveredEvidence,
    Directive,
    EvidenceBody,
    TextBlock,
    ToolResult,
    ToolUseBlock,
)
from farm.report import evidence_infos
from storage.ledger import LedgerStore
from tests.fixtures_import import Imported

_OMISSION = re.compile(r'recall\(\{"id": "([0-9a-f]{64})", "range": \[(\d+), (\d+)\]\}\)')

# ------------------------------------------------------------------ generated sessions

_line = st.text(
    st.characters(codec="utf-8", exclude_characters="\r\n", exclude_categories=["Cs"]), max_size=60
)


@st.composite
def bodies(draw: st.DrawFn) -> str | bytes:
    kind = draw(st.sampled_from(["lines", "long", "long-lines", "json", "error", "empty", "bytes"]))
    if kind == "lines":
        end = draw(st.sampled_from(["\n", "\r\n"]))
        text = end.join(draw(st.lists(_line, max_size=25)))
        return text + (end if draw(st.booleans()) else "")
    if kind == "long":  # often over the 30,000-character window
        return (draw(_line) + "\n") * draw(st.integers(400, 2500)) + draw(_line)
    if kind == "long-lines":  # lines at the 2,000-character edge, in a body that may or may not fit
        width = draw(st.sampled_from([1999, 2000, 2001, 2002, 5000]))
        return "\n".join("a" * width for _ in range(draw(st.integers(1, 20))))
    if kind == "json":
        leaves = st.none() | st.booleans() | st.integers() | _line
        value = draw(
            st.recursive(
                leaves,
                lambda c: st.lists(c, max_size=4) | st.dictionaries(_line, c, max_size=4),
                max_leaves=30,
            )
        )
        return json.dumps(value, ensure_ascii=False)
    if kind == "error":
        return "Error: " + draw(_line)
    if kind == "empty":
        return ""
    raw = draw(st.binary(min_size=1, max_size=300))
    return raw + b"\xff\xfe"  # never valid UTF-8


_calls = st.lists(
    st.tuples(st.sampled_from(["bash", "read_file", "web_search", "get_user"]), bodies(), st.booleans()),
    max_size=3,
)
_turns = st.lists(
    st.tuples(_line, st.lists(_calls, min_size=1, max_size=3), st.booleans()), min_size=1, max_size=4
)


def _write_session(actor: EvidenceActor, turns: list[Any]) -> dict[str, bytes]:
    """Write the generated turns through the EvidenceActor; returns evidence id -> the original bytes."""
    originals: dict[str, bytes] = {}
    append = actor.ledger.append
    for t, (directive, steps, emit) in enumerate(turns):
        append("s", [Directive(text=f"Turn {t}: {directive}")])
        for k, calls in enumerate(steps):
            blocks = tuple(
                ToolUseBlock(id=f"t{t}s{k}c{j}", name=name, input={"arg": j})
                for j, (name, _, _) in enumerate(calls)
            )
            append("s", [AssistantStep(blocks=blocks or (TextBlock(text="thinking aloud"),))])
            for j, (name, body, is_error) in enumerate(calls):
                stored = actor.store_result("s", f"t{t}s{k}c{j}", name, body, is_error=is_error)
                originals[stored["evidence_id"]] = body.encode() if isinstance(body, str) else body
        if emit:
            step = append(
                "s",
                [
                    AssistantStep(
                        blocks=(
                            ToolUseBlock(
                                id=f"card{t}",
                                name="emit_metric_card",
                                input={"label": f"turn {t}", "value": t},
                            ),
                        )
                    )
                ],
            )[0]
            actor.present("s", step)
        append("s", [AssistantStep(blocks=(TextBlock(text=f"Answer {t}."),))])
        actor.close_turn("s")
    index = actor.index("s")
    if len(index.turns) >= 2:  # a packet over the first turns, naming their evidence
        covered = index.turns[: len(index.turns) // 2 + 1]
        append(
            "s",
            [
                Compaction(
                    first_turn_id=covered[0].id,
                    last_turn_id=covered[-1].id,
                    summary="earlier turns",
                    covered_evidence=tuple(
                        CoveredEvidence(id=e, description="a result") for t in covered for e in t.evidence
                    ),
                    model="p:m",
                )
            ],
        )
    return originals


def _check_window(result: ToolResult, text: str) -> None:
    """A current-turn view: the body verbatim, or a window naming the exact recall call for the rest."""
    if not result.windowed:
        assert result.content == text
        return
    assert len(text) > WINDOW_CHARS and len(result.content) <= WINDOW_CHARS
    if "continues for" in result.content:  # long lines are shown by their start and their length
        return
    m = _OMISSION.search(result.content)
    assert m is not None and m.group(1) == result.evidence_id
    first, last = int(m.group(2)), int(m.group(3))
    start, end = line_offsets(text, first, last)
    line_start = result.content.rfind("\n", 0, m.start()) + 1
    line_end = result.content.index("\n", m.end()) + 1
    head, tail = result.content[:line_start], result.content[line_end:]
    assert head + text[start:end] + tail == text  # head + omitted lines + tail is the whole body


def check_no_cut(
    store: LedgerStore, actor: EvidenceActor | None, session: str, originals: dict[str, bytes] | None = None
) -> int:
    """Check every tool result of ``session``; returns how many were checked."""
    head = store.head(session)
    index = TurnIndex.build(store.chain_to_root(head or ""), 0.25)
    chain = [e.id for e in store.chain_to_root(head or "")]
    for summary in index.summaries:  # a packet names every result of its turns that it summarised
        named = {c.id for c in _covered(store, summary.id)}
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
            if isinstance(p, ToolResultPart)
        }
        card = render_card(turn.card, turn.ordinal) if turn.card is not None else ""
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
            _check_window(ex.result, text)
            # closed turn: a digest ending with the tag that names this evidence
            tag = evidence_tag(eid[:SHORT_ID], len(text))
            assert record[ex.tool_use_id].endswith(tag), record[ex.tool_use_id][-200:]
            if infos[eid].shape == "error" and all(len(line) <= 2000 for line in text.splitlines()):
                assert text.strip() in record[ex.tool_use_id]  # errors are shown verbatim
            if turn.card is not None:
                assert f"[evidence:{eid[:SHORT_ID]}]" in card
            if actor is not None:
                recalled = actor.recall(session, {"id": eid})
                assert not recalled["is_error"] and recalled["content"] == text
                if meta.encoding == "utf-8":
                    assert recalled["content"].encode() == blob
            checked += 1
    return checked


def _covered(store: LedgerStore, packet_id: str) -> tuple[CoveredEvidence, ...]:
    packet = store.payload(packet_id)
    assert isinstance(packet, Compaction)
    return packet.covered_evidence


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(_turns)
@example(
    [
        (
            "a long read, a CRLF file and bytes",
            [
                [("read_file", "row\n" * 9000 + "last", False), ("read_file", "a\r\nb\r\nno newline", False)],
                [("bash", b"\x00\xffbinary", True), ("get_user", "", False)],
            ],
            True,
        ),
        (
            "an error and long lines",
            [
                [
                    ("web_search", "Error: quota exceeded", True),
                    ("read_file", "\n".join(["x" * 2001] * 20), False),
                ],
            ],
            False,
        ),
    ]
)
def test_no_cut_over_generated_sessions(turns: list[Any]) -> None:
    with tempfile.TemporaryDirectory(prefix="nocut") as tmp:
        root = Path(tmp) / "ledger"
        store = LedgerStore(root)
        try:
            actor = EvidenceActor(str(root), store)
            originals = _write_session(actor, turns)
            assert check_no_cut(store, actor, "s", originals) == len(originals)
        finally:
            store.close()


def test_no_cut_over_imported_sessions(imported: Imported) -> None:
    actor = EvidenceActor(str(imported.root), imported.store)
    checked = 0
    for key in imported.reports:
        sessions = imported.sessions(key)
        for session in sessions if key != "tau" else sessions[::10]:
            checked += check_no_cut(imported.store, actor, session)
    assert checked >= 197 + 16 + 103 + 49 + 12  # every result of the non-tau sessions, plus the tau sample


def test_a_64_mib_result_is_kept_whole(tmp_path: Path) -> None:
    line = "0123456789abcdef" * 4 + "\n"  # 65 chars
    body = line * ((64 * 1024 * 1024) // len(line)) + "end without newline"
    with LedgerStore(tmp_path / "ledger") as store:
        actor = EvidenceActor(str(tmp_path / "ledger"), store)
        store.append(
            "s",
            [
                Directive(text="read the huge file"),
                AssistantStep(blocks=(ToolUseBlock(id="h", name="read_file", input={}),)),
            ],
        )
        stored = actor.store_result("s", "h", "read_file", body)
        assert stored["windowed"] and len(stored["content"]) <= WINDOW_CHARS
        total = body.count("\n") + 1
        m = _OMISSION.search(stored["content"])
        assert m is not None and m.group(1) == stored["evidence_id"] and int(m.group(3)) < total
        assert store.get(stored["evidence_id"]).blob == body.encode()
        last = actor.recall("s", {"id": stored["evidence_id"], "range": [total, total]})
        assert last == {"content": "end without newline", "is_error": False}
        assert check_no_cut(store, None, "s") == 1
