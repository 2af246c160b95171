"""The no-cut invariant (spec §3, principle 2), as a property over generated and recorded sessions.

Every tool result in the ledger appears verbatim, or as a window whose omission line and clipped-line
notes name the exact recall call for what each leaves out, or (once its turn is closed) as a digest
carrying its evidence id, or named in a compaction packet. It is never absent and never cut, and
recall returns the original byte for byte: answering every recall call a window shows, through the
EvidenceActor, and putting the answers in place of the markers gives back the whole body.
"""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
from hypothesis import HealthCheck, example, given, settings

from tests.fakes.imported import Imported
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
from vak_context.events.payloads import (
    AssistantStep,
    Compaction,
    CoveredEvidence,
    Directive,
    EvidenceBody,
    TextBlock,
    ToolResult,
    ToolUseBlock,
)
from vak_context.sessions.generator import generate_session
from vak_context.storage.ledger import LedgerStore

_OMISSION = re.compile(r'recall\(\{"id": "([0-9a-f]{64})", "range": \[(\d+), (\d+)\]\}\)')
# what a window puts in place of what it leaves out: an omission line (replaced whole, newline
# included) or a clipped line's note (replaced; the line's own terminator stays)
_MARKER = re.compile(
    r"\[… lines? \d+(?:-\d+)? omitted \(\d+ chars\); recall\((?P<omitted>\{[^\n]*?\})\) returns them …\]\n"
    r"| … \[line \d+ continues for \d+ more chars; recall\((?P<continued>\{[^\n]*?\})\) returns them\]"
)

# ------------------------------------------------------------------ generated sessions

_line = st.text(
    st.characters(codec="utf-8", exclude_characters="\r\n", exclude_categories=["Cs"]), max_size=60
)


@st.composite
def bodies(draw: st.DrawFn) -> str | bytes:
    kind = draw(
        st.sampled_from(["lines", "long", "long-lines", "mixed-widths", "json", "error", "empty", "bytes"])
    )
    if kind == "lines":
        end = draw(st.sampled_from(["\n", "\r\n"]))
        text = end.join(draw(st.lists(_line, max_size=25)))
        return text + (end if draw(st.booleans()) else "")
    if kind == "long":  # often over the 30,000-character window
        return (draw(_line) + "\n") * draw(st.integers(400, 2500)) + draw(_line)
    if kind == "long-lines":  # lines at the 2,000-character edge, in a body that may or may not fit
        width = draw(st.sampled_from([1999, 2000, 2001, 2002, 5000]))
        return "\n".join("a" * width for _ in range(draw(st.integers(1, 20))))
    if kind == "mixed-widths":  # issue 9 item 1: some lines far over 2,000 chars, in a body over the window
        widths = draw(
            st.lists(st.sampled_from([0, 40, 600, 2001, 3272, 9000, 31_000]), min_size=1, max_size=45)
        )
        end = draw(st.sampled_from(["\n", "\r\n"]))
        return end.join(f"{i}:".ljust(w, "m") for i, w in enumerate(widths)) + draw(
            st.sampled_from(["", end])
        )
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


def _check_window(result: ToolResult, text: str, actor: EvidenceActor | None, session: str) -> None:
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
            _check_window(ex.result, text, actor, session)
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
            "issue 9: a 39k result whose long lines are clipped with nothing else omitted",
            [
                [
                    (
                        "read_file",
                        "".join(
                            f"{i:04d}".ljust(5272 if i in (6, 18, 34) else 625, "r") + "\n"
                            for i in range(1, 41)
                        ),
                        False,
                    )
                ]
            ],
            False,
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


def test_the_generated_demo_session_carries_windows_not_blind_cuts(tmp_path: Path) -> None:
    """The session `vak run` writes (vak_context.sessions.generator) carries each long result as a real window: its
    markers, answered, give back the body (it once carried the first 12,000 chars and no recall)."""
    with LedgerStore(tmp_path / "ledger") as store:
        generate_session(seed=3, turns=12, append=lambda p, b: store.append_one("demo", p, blob=b))
        results = [
            p
            for e in store.chain_to_root(store.head("demo") or "")
            if isinstance(p := store.payload(e.id), ToolResult)
        ]
        windowed = [r for r in results if r.windowed]
        assert windowed  # 900-line command outputs are over the window
        for r in windowed:
            assert r.evidence_id is not None
            _check_window(r, store.get(r.evidence_id).blob.decode(), None, "demo")  # type: ignore[union-attr]
