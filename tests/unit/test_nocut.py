"""The no-cut invariant (spec §3, principle 2), as a property over generated and recorded sessions.

Every tool result in the ledger appears verbatim, or as a window whose omission line and clipped-line
notes name the exact recall call for what each leaves out, or (once its turn is closed) as a digest
carrying its evidence id, or named in a compaction packet. It is never absent and never cut, and
recall returns the original byte for byte: answering every recall call a window shows, through the
EvidenceActor, and putting the answers in place of the markers gives back the whole body. The
checker itself is tests/fakes/nocut.py (the history-shape test on real sessions uses it too).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
from hypothesis import HealthCheck, example, given, settings

from tests.fakes.imported import Imported
from tests.fakes.nocut import OMISSION, check_no_cut, check_window
from vak_context.actors.evidence import EvidenceActor
from vak_context.context.evidence.digest import WINDOW_CHARS
from vak_context.events.payloads import (
    AssistantStep,
    Compaction,
    CoveredEvidence,
    Directive,
    TextBlock,
    ToolResult,
    ToolUseBlock,
)
from vak_context.sessions.generator import generate_session
from vak_context.storage.ledger import LedgerStore

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
        m = OMISSION.search(stored["content"])
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
            check_window(r, store.get(r.evidence_id).blob.decode(), None, "demo")  # type: ignore[union-attr]


def test_a_whole_body_recalled_by_id_keeps_its_own_id(tmp_path: Path) -> None:
    """A recall of a whole stored body is answered under that body's id, never stored again: its digest
    or window names the id the model already recalled (a fresh id each time made a model that recalls
    the ids it sees recall the same text again and again). A range is new text: it gets its own id."""
    body = "".join(f"line {i}: " + "x" * 60 + "\n" for i in range(600))  # over the window
    with LedgerStore(tmp_path / "ledger") as store:
        actor = EvidenceActor(str(tmp_path / "ledger"), store)
        store.append("s", [Directive(text="read it"),
                           AssistantStep(blocks=(ToolUseBlock(id="r", name="read_file", input={}),))])
        stored = actor.store_result("s", "r", "read_file", body)
        store.append("s", [AssistantStep(blocks=(ToolUseBlock(id="c", name="recall", input={}),))])
        again = actor.recall("s", {"id": stored["evidence_id"][:12]}, "c")
        assert again["evidence_id"] == stored["evidence_id"] and again["windowed"]
        assert f"evidence:{stored['evidence_id'][:12]}" in again["content"] or stored["evidence_id"] in again["content"]
        head = store.head("s")
        assert head is not None
        assert [e.kind for e in store.chain_to_root(head)].count("evidence_body") == 1  # no second copy
        result = actor.index("s").turns[-1].steps[-1].exchanges[0].result
        assert result is not None and result.evidence_id == stored["evidence_id"]
        store.append("s", [AssistantStep(blocks=(ToolUseBlock(id="d", name="recall", input={}),))])
        ranged = actor.recall("s", {"id": stored["evidence_id"], "range": [1, 2]}, "d")
        assert ranged["evidence_id"] != stored["evidence_id"] and ranged["content"].startswith("line 0:")


def test_a_step_packet_line_says_a_call_was_not_run(tmp_path: Path) -> None:
    """An error result's first line is on its step-packet line at both levels: a call the engine did not
    run must not read as one that ran (the model then never makes it again), and an ordinary result
    carries no error note."""
    from vak_context.context.history.packets import render_step_packet, step_items

    with LedgerStore(tmp_path / "ledger") as store:
        actor = EvidenceActor(str(tmp_path / "ledger"), store)
        store.append("s", [Directive(text="remove them"), AssistantStep(blocks=(
            ToolUseBlock(id="a", name="rm", input={"file_name": "x"}),
            ToolUseBlock(id="b", name="rm", input={"file_name": "y"})))])
        actor.store_result("s", "a", "rm", "{'result': 'x removed'}")
        actor.store_result("s", "b", "rm", "rm: not run: at most 8 calls run in one step; make the calls "
                                          "you still need in the next step", is_error=True)
        index = actor.index("s")
        turn = index.turns[-1]
        items = step_items(index, turn)[0]
        for level in ("list", "ids"):
            text = render_step_packet(turn.ordinal, 1, 1, level=level, items=items)
            ran, refused = [line for line in text.splitlines() if line.startswith("- step 1 rm")]
            assert "error" not in ran and "(error: rm: not run: at most" in refused
