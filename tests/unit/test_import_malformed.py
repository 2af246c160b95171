"""Malformed recordings: every bad record is refused with its line, and a refused import writes nothing.

One small valid recording per format the importer reads; each test breaks it in one place. The
ledger folder is compared file by file (path and bytes) before and after a refused import.
"""

from __future__ import annotations

import contextlib
import copy
import io
import itertools
import math
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fakes.recordings import CHAT, SAMPLES, Path_, Sample, get, put, render, write
from vak_context.cli.main import main
from vak_context.errors import InvalidInput, InvalidRecording, LedgerError, UnknownRecordingFormat
from vak_context.importers import import_path, plan_import
from vak_context.storage.ledger import LedgerStore

IDS = [s.name for s in SAMPLES]

def line_of(sample: Sample, doc: Any, path: Path_) -> int:
    """The line the importer should name: a JSONL record's line, or where the value sits in the JSON text."""
    if sample.jsonl:
        return int(path[0]) + 1
    marked = put(doc, path, "__MARK__")
    text = render(sample, marked)
    return text[: text.index('"__MARK__"')].count("\n") + 1


def snapshot(root: Path) -> dict[str, bytes] | None:
    """Every file and folder under ``root`` with its bytes; None when ``root`` does not exist."""
    if not root.exists():
        return None
    return {
        str(p.relative_to(root)) + ("/" if p.is_dir() else ""): p.read_bytes() if p.is_file() else b""
        for p in sorted(root.rglob("*"))
    }


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(list(argv))
        except SystemExit as exc:  # an argparse usage error
            rc = int(exc.code or 0)
    return rc, out.getvalue(), err.getvalue()


def assert_refused_cleanly(tmp: Path, src: Path, line: int | None) -> str:
    """`vak import` of ``src`` into a ledger that does not exist yet: exit 1, one line naming the
    file and ``line`` on stderr, and no ledger folder."""
    ledger = tmp / "fresh-ledger"
    assert not ledger.exists()
    rc, out, err = run_cli("import", str(src), "--ledger", str(ledger), "--quiet")
    assert rc == 1 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err, err
    where = f"{src}:{line}: " if line is not None else f"{src}: "
    assert err.startswith(f"vak: {where}"), err
    assert not ledger.exists(), "a refused import left a ledger skeleton"
    return err


# ------------------------------------------------------------------ the inputs that crashed


@pytest.mark.parametrize("sample", SAMPLES, ids=IDS)
def test_valid_samples_import(tmp_path: Path, sample: Sample) -> None:
    """Each sample is a valid recording of its format, with one tool call answered."""
    src = write(tmp_path, sample, sample.doc)
    with LedgerStore(tmp_path / "ledger") as store:
        report = import_path(store, src)
    assert report.format == sample.fmt
    totals = report.totals()
    assert totals["tool_calls"] >= 1 and totals["tool_results"] >= 1 and totals["turns"] >= 1


def test_claude_record_without_uuid_is_refused_with_its_line(tmp_path: Path) -> None:
    """A Claude Code message record with no uuid (a KeyError before) is refused naming line 2."""
    sample = SAMPLES[2]
    doc = copy.deepcopy(sample.doc)
    del doc[1]["uuid"]
    src = write(tmp_path, sample, doc)
    err = assert_refused_cleanly(tmp_path, src, 2)
    assert "no uuid" in err


@pytest.mark.parametrize(
    ("sample", "path"),
    [
        (SAMPLES[0], (2,)),
        (SAMPLES[1], (2,)),
        (SAMPLES[2], (1, "message")),
        (SAMPLES[3], (0, "history", 2)),
        (SAMPLES[4], ("messages", 2)),
        (SAMPLES[5], ("history", 2)),
        (SAMPLES[6], (0, "traj", 2)),
    ],
    ids=IDS,
)
def test_message_that_is_a_string_is_refused_with_its_line(
    tmp_path: Path, sample: Sample, path: Path_
) -> None:
    """A message (an event, a record's message) that is a string, not an object, is refused with its line."""
    doc = put(sample.doc, path, "just a string")
    src = write(tmp_path, sample, doc)
    assert_refused_cleanly(tmp_path, src, line_of(sample, doc, path))


@pytest.mark.parametrize("sample", SAMPLES, ids=IDS)
def test_lone_surrogate_in_a_tool_result_writes_nothing(tmp_path: Path, sample: Sample) -> None:
    """A lone surrogate in a tool result (a UnicodeEncodeError halfway through the writes before) is
    refused with its line, leaves an existing ledger byte for byte as it was, and the fixed file
    then imports under the same name."""
    bad = put(sample.doc, sample.result, "before \ud800 after")
    src = write(tmp_path, sample, bad)
    err = assert_refused_cleanly(tmp_path, src, line_of(sample, bad, sample.result))
    assert "lone surrogate" in err
    ledger = tmp_path / "ledger"
    with LedgerStore(ledger) as store:
        import_path(store, write(tmp_path / "other", SAMPLES[0], CHAT), session="earlier")
    before = snapshot(ledger)
    with LedgerStore(ledger) as store, pytest.raises(InvalidRecording) as refused:
        import_path(store, src, session="fixed")
    assert refused.value.line == line_of(sample, bad, sample.result)
    assert snapshot(ledger) == before
    src = write(tmp_path, sample, sample.doc)
    with LedgerStore(ledger) as store:
        report = import_path(store, src, session="fixed")
        assert all(store.head(s.session) is not None for s in report.sessions)


@pytest.mark.parametrize("value", ["__raw__:NaN", "__raw__:Infinity", "__raw__:-Infinity", "__raw__:1e400"])
@pytest.mark.parametrize("sample", [s for s in SAMPLES if s.tool_input is not None], ids=lambda s: s.name)
def test_nan_in_a_tool_input_is_refused(tmp_path: Path, sample: Sample, value: str) -> None:
    """NaN, the infinities and a number too large for a float in a tool call's input are refused
    with their line (NaN was stored as null before), never stored."""
    assert sample.tool_input is not None
    path = sample.tool_input
    if isinstance(get(sample.doc, path), str):  # OpenAI arguments: an object in place of the JSON string
        doc = put(sample.doc, path, {"city": value})
        line = line_of(sample, put(sample.doc, path, {"city": "__MARK__"}), (*path, "city"))
    else:
        doc = put(sample.doc, path, value)
        line = line_of(sample, doc, path)
    src = write(tmp_path, sample, doc)
    err = assert_refused_cleanly(tmp_path, src, line)
    assert "store" in err


@pytest.mark.parametrize(
    "sample", [s for s in SAMPLES if s.fmt in ("openai-chat", "tau-bench")], ids=lambda s: s.name
)
def test_nan_inside_arguments_recorded_as_a_json_string_is_refused(tmp_path: Path, sample: Sample) -> None:
    """OpenAI-style arguments are a JSON string; a NaN or a lone surrogate inside it is refused too."""
    assert sample.tool_input is not None
    for inner in ('{"city": NaN}', '{"city": "\\ud800"}'):
        doc = put(sample.doc, sample.tool_input, inner)
        src = write(tmp_path, sample, doc)
        # The arguments belong to the assistant message: the line is the message's.
        assert_refused_cleanly(tmp_path, src, line_of(sample, doc, sample.tool_input[:-4]))


@pytest.mark.parametrize("value", ["1e308", "inf", "nan", "0", "-1", "5", "1e-9", "many"])
def test_tokens_per_char_outside_its_range_is_a_usage_error(tmp_path: Path, value: str) -> None:
    """--tokens-per-char must be a finite number from 0.01 to 4 (1e308 overflowed halfway through
    the writes before): a one-line usage error, exit 2, nothing written; the API refuses it too."""
    src = write(tmp_path, SAMPLES[0], CHAT)
    ledger = tmp_path / "ledger"
    rc, out, message = run_cli("import", str(src), "--ledger", str(ledger), "--tokens-per-char", value)
    assert rc == 2 and out == ""
    assert message.count("\n") == 1 and "--tokens-per-char" in message and "0.01 to 4" in message
    assert not ledger.exists()
    with pytest.raises(InvalidInput, match=r"from 0\.01 to 4"):
        plan_import(src, tokens_per_char=float(value) if value != "many" else math.nan)


def test_vak_import_into_an_existing_session_changes_nothing(tmp_path: Path) -> None:
    """A second `vak import` of the same file is refused in one line, and the ledger folder, card
    index included, is byte for byte as the first import left it."""
    src = write(tmp_path, SAMPLES[0], CHAT)
    ledger = tmp_path / "ledger"
    assert run_cli("import", str(src), "--ledger", str(ledger), "--quiet")[0] == 0
    before = snapshot(ledger)
    rc, out, err = run_cli("import", str(src), "--ledger", str(ledger), "--quiet")
    assert rc == 1 and out == "" and err.count("\n") == 1 and "already exists" in err
    assert snapshot(ledger) == before


class _DiskFullAfter(LedgerStore):
    """A real store whose appends fail with ENOSPC once ``budget`` appends have gone through."""

    def __init__(self, root: Path, budget: int) -> None:
        super().__init__(root)
        self.budget = budget

    def append(self, session: str, payloads: Any, **kw: Any) -> list[str]:
        self.budget -= 1
        if self.budget < 0:
            raise OSError(28, "No space left on device")
        return super().append(session, payloads, **kw)


def test_a_write_that_fails_after_the_dry_run_names_the_session(tmp_path: Path) -> None:
    """A failure of the disk itself, after the dry run passed, is a one-line LedgerError naming the
    session being written and the ones completed before it, not a library error."""
    sample = SAMPLES[6]
    src = write(tmp_path, sample, [*sample.doc, {**copy.deepcopy(sample.doc[0]), "task_id": 2}])
    with _DiskFullAfter(tmp_path / "ledger", budget=8) as store, pytest.raises(LedgerError) as err:
        import_path(store, src)
    message = str(err.value)
    assert "writing session 'tau-task2-trial0' failed (" in message and "No space left" in message
    assert "after 1 complete session(s) ('tau-task1-trial0' first)" in message and "\n" not in message


@pytest.mark.parametrize("depth", [900, 5000])
def test_deeply_nested_values_are_refused_with_their_line(tmp_path: Path, depth: int) -> None:
    """Arrays nested 900 deep in a tool input (deeper than canonical JSON encodes) or 5,000 deep
    (deeper than the JSON parser reads) are refused with the record's line, not a RecursionError."""
    sample = SAMPLES[2]
    doc = put(
        sample.doc, (1, "message", "content", 0, "input", "deep"), "__raw__:" + "[" * depth + "]" * depth
    )
    assert_refused_cleanly(tmp_path, write(tmp_path, sample, doc), 2)
    whole = tmp_path / "deep.json"
    whole.write_text('{"messages": ' + "[" * depth + "]" * depth + "}")
    # 900 deep parses (its first message is an array); 5,000 deep does not parse, and is named by where
    # it gets too deep. Both are on line 1.
    assert_refused_cleanly(tmp_path, whole, 1)


def test_sessions_with_one_name_in_one_file_get_unique_names(tmp_path: Path) -> None:
    """Two tau-bench items with the same task and trial no longer collide halfway through an import."""
    sample = SAMPLES[6]
    src = write(tmp_path, sample, [*sample.doc, copy.deepcopy(sample.doc[0])])
    with LedgerStore(tmp_path / "ledger") as store:
        report = import_path(store, src)
    assert [s.session for s in report.sessions] == ["tau-task1-trial0", "tau-task1-trial0-2"]


# ------------------------------------------------------------------ the property


def _nodes(doc: Any, prefix: Path_ = ()) -> list[Path_]:
    """Every value's path in ``doc`` (not the root)."""
    out: list[Path_] = []
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else []
    for key, value in items:
        out.append((*prefix, key))
        out.extend(_nodes(value, (*prefix, key)))
    return out


DEEP = "__raw__:" + "[" * 5000 + "]" * 5000  # deeper than the JSON parser reads
POISON = [
    "__raw__:NaN",
    "__raw__:Infinity",
    "__raw__:1e400",
    "__raw__:" + "9" * 5000,
    "x \ud800 y",
    "\udfff",
    DEEP,
]
RETYPE = ["text", 7, -3, 2.5, 1e308, 10**40, True, None, [], {}, [1, "a"], {"k": "v"}]


@st.composite
def mutations(draw: st.DrawFn) -> tuple[Sample, Any, str]:
    """A sample with one change: a key or element dropped, a value of another type, or a value
    the ledger cannot hold (NaN, an infinity, a number past float range or 4,300 digits, a lone surrogate)."""
    sample = draw(st.sampled_from(SAMPLES))
    doc = copy.deepcopy(sample.doc)
    path = draw(st.sampled_from(_nodes(doc)))
    parent = get(doc, path[:-1])
    how = draw(st.sampled_from(["drop", "retype", "poison"]))
    if how == "drop":
        del parent[path[-1]]
    elif how == "retype":
        parent[path[-1]] = copy.deepcopy(draw(st.sampled_from(RETYPE)))
    else:
        poison = draw(st.sampled_from(POISON))
        old = parent[path[-1]]
        parent[path[-1]] = (
            old[:3] + poison + old[3:] if isinstance(old, str) and "__raw__" not in poison else poison
        )
    return sample, doc, how


_counter = itertools.count()


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=mutations())
def test_any_single_mutation_imports_cleanly_or_is_refused_with_a_line(
    tmp_path: Path, case: tuple[Sample, Any, str]
) -> None:
    """Drop a key, change a type, or inject NaN / infinities / huge numbers / lone surrogates anywhere
    in a valid recording of any format: the import either succeeds, or raises InvalidRecording with a
    line number (UnknownRecordingFormat, naming the file, when the change hides the format) and both
    an existing ledger and a ledger folder that did not exist are exactly as before. A value the
    ledger cannot hold is never imported."""
    sample, doc, how = case
    work = tmp_path / f"case-{next(_counter)}"
    work.mkdir()
    src = write(work, sample, doc)
    poisoned = any(
        isinstance(v, str) and (v.startswith("__raw__") or re.search("[\ud800-\udfff]", v))
        for v in _leaves(doc)
    )
    ledger = tmp_path / "shared-ledger"
    before = snapshot(ledger)
    session = f"s{next(_counter)}"
    try:
        with LedgerStore(ledger) as store:
            import_path(store, src, session=session)
    except UnknownRecordingFormat:
        assert not poisoned
        line: int | None = None
        failed = True
    except InvalidRecording as exc:
        assert exc.line is not None and exc.line >= 1, str(exc)
        assert "\n" not in str(exc)
        line, failed = exc.line, True
    else:
        failed = False
        assert not poisoned, f"{how}: a value the ledger cannot hold was imported"
    if failed:
        if before is not None:
            assert snapshot(ledger) == before
        assert_refused_cleanly(work, src, line)


def _leaves(doc: Any) -> list[Any]:
    if isinstance(doc, dict):
        return [x for v in doc.values() for x in _leaves(v)] + list(doc)
    if isinstance(doc, list):
        return [x for v in doc for x in _leaves(v)]
    return [doc]


def test_mutation_strategy_reaches_every_format_and_kind() -> None:
    """The property test's cases cover every sample and every kind of change (so it can fail)."""
    seen: set[tuple[str, str]] = set()

    @settings(max_examples=400, deadline=None, database=None)
    @given(case=mutations())
    def collect(case: tuple[Sample, Any, str]) -> None:
        seen.add((case[0].name, case[2]))

    collect()
    assert seen == {(s.name, how) for s in SAMPLES for how in ("drop", "retype", "poison")}
