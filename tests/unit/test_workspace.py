"""The workspace tools: reads stay inside the named folder, symlinks included; failures are typed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vak_context.agent.workspace import GREP_FILE_LIMIT, MAX_PATTERN_CHARS, TOOLS, Workspace
from vak_context.errors import ToolFailure
from vak_context.events.payloads import Directive


@pytest.fixture()
def tree(tmp_path: Path) -> tuple[Workspace, Path]:
    """A workspace with files, a subfolder, and links that point inside and outside it."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("TOP-SECRET\n")
    root = tmp_path / "ws"
    (root / "pkg").mkdir(parents=True)
    (root / "README.md").write_text("# demo\nhello world\n")
    (root / "pkg" / "mod.py").write_text("def f():\n    return 'hello'\n")
    (root / "blob.bin").write_bytes(b"\x00\x01\x02" * 10)
    (root / "bad.txt").write_bytes(b"ok \xff\xfe line\n")
    os.symlink(outside / "secret.txt", root / "leak.txt")
    os.symlink(outside, root / "leakdir")
    os.symlink(root / "README.md", root / "alias.md")
    return Workspace(root), outside


def test_reads_lines_numbered_and_lists_sorted(tree: tuple[Workspace, Path]) -> None:
    """read_file numbers lines from 1; list_dir lists every entry sorted, folders with '/'."""
    ws, _ = tree
    assert ws.call("read_file", {"path": "README.md"}) == "1\t# demo\n2\thello world\n"
    listing = ws.call("list_dir", {}).splitlines()
    assert listing[0] == "./ (7 entries)"
    names = [line.split("\t")[0].split(" ->")[0] for line in listing[1:]]
    assert names == sorted(names)
    assert "pkg/" in names


def test_symlink_inside_is_read_and_outside_is_refused(tree: tuple[Workspace, Path]) -> None:
    """A link to a file in the workspace reads; links to a file or folder outside are refused."""
    ws, outside = tree
    assert "hello world" in ws.call("read_file", {"path": "alias.md"})
    for path in ("leak.txt", "leakdir/secret.txt", "../outside/secret.txt", str(outside / "secret.txt"),
                 "pkg/../../outside/secret.txt"):
        with pytest.raises(ToolFailure, match="outside the workspace"):
            ws.call("read_file", {"path": path})
    with pytest.raises(ToolFailure, match="outside the workspace"):
        ws.call("list_dir", {"path": "leakdir"})


def test_grep_finds_matches_but_never_follows_links_out(tree: tuple[Workspace, Path]) -> None:
    """grep reports path:line:text for every match and never reads through an outside link."""
    ws, _ = tree
    out = ws.call("grep", {"pattern": "hello"})
    assert out.splitlines() == ["README.md:2:hello world", "alias.md:2:hello world", "pkg/mod.py:2:    return 'hello'"]
    assert "TOP-SECRET" not in ws.call("grep", {"pattern": "SECRET"})
    assert ws.call("grep", {"pattern": "def", "glob": "*.py"}) == "pkg/mod.py:1:def f():\n"


def test_bad_calls_raise_typed_failures(tree: tuple[Workspace, Path]) -> None:
    """Missing files, folders read as files, bad regexes and bad arguments are ToolFailure with a reason."""
    ws, _ = tree
    cases = [
        ("read_file", {"path": "nope.txt"}, "does not exist"),
        ("read_file", {"path": "pkg"}, "not a regular file"),
        ("read_file", {}, "non-empty string"),
        ("read_file", {"path": 7}, "non-empty string"),
        ("read_file", {"path": "a\x00b"}, "NUL"),
        ("list_dir", {"path": "README.md"}, "is a file"),
        ("grep", {"pattern": "("}, "not a valid regular expression"),
        ("grep", {"pattern": "x" * (MAX_PATTERN_CHARS + 1)}, "keep it under"),
        ("grep", {"pattern": "x", "glob": 3}, "'glob' must be a string"),
        ("nuke", {}, "no workspace tool"),
    ]
    for name, args, reason in cases:
        with pytest.raises(ToolFailure, match=reason):
            ws.call(name, args)


def test_binary_and_invalid_utf8(tree: tuple[Workspace, Path]) -> None:
    """A binary file is described, not dumped; invalid UTF-8 decodes with replacement characters."""
    ws, _ = tree
    assert ws.call("read_file", {"path": "blob.bin"}) == "blob.bin: binary file, 30 bytes (not shown as text)"
    assert ws.call("read_file", {"path": "bad.txt"}) == "1\tok \ufffd\ufffd line\n"


def test_grep_names_the_files_it_skipped(tmp_path: Path) -> None:
    """A file over the grep limit is named as skipped, never silently left out."""
    (tmp_path / "big.log").write_bytes(b"a" * (GREP_FILE_LIMIT + 1))
    out = Workspace(tmp_path).call("grep", {"pattern": "zzz"})
    assert "skipped 1 files" in out and "big.log" in out


def test_every_tool_declares_that_it_observes() -> None:
    """The freshness check relies on the declaration: every workspace tool reads the world as it is now."""
    assert {t.spec.name for t in TOOLS} == {"read_file", "list_dir", "grep"}
    assert all(t.observes for t in TOOLS)


def test_a_missing_root_is_a_clear_error(tmp_path: Path) -> None:
    """A workspace folder that does not exist fails at construction, saying what to pass."""
    with pytest.raises(ToolFailure, match="--workspace"):
        Workspace(tmp_path / "missing")


_SEGMENTS = st.sampled_from(["..", ".", "pkg", "leakdir", "leak.txt", "alias.md", "README.md", "x", "", "/"])


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(_SEGMENTS, min_size=1, max_size=6), absolute=st.booleans())
def test_no_path_reads_outside(tmp_path_factory: pytest.TempPathFactory, parts: list[str], absolute: bool) -> None:
    """Property: whatever path is composed, a read either fails typed or returns workspace content only."""
    base = tmp_path_factory.getbasetemp() / "prop"
    if not base.exists():
        (base / "ws" / "pkg").mkdir(parents=True)
        (base / "outside").mkdir()
        (base / "outside" / "secret.txt").write_text("TOP-SECRET\n")
        (base / "ws" / "README.md").write_text("inside\n")
        os.symlink(base / "outside" / "secret.txt", base / "ws" / "leak.txt")
        os.symlink(base / "outside", base / "ws" / "leakdir")
    ws = Workspace(base / "ws")
    path = "/".join(parts)
    if absolute:
        path = str(base / "ws") + "/" + path
    for tool in ("read_file", "list_dir", "grep"):
        args = {"path": path} if tool != "grep" else {"path": path or ".", "pattern": "SECRET"}
        try:
            out = ws.call(tool, args)
        except ToolFailure:
            continue
        assert "TOP-SECRET" not in out
        assert "secret.txt" not in out


def test_a_pattern_that_backtracks_is_stopped_with_a_typed_failure(tmp_path: Path) -> None:
    """``(a+)+$`` against a line of 40 ``a``s and a ``b`` backtracks for hours in Python's re: the search runs
    in a child process that is killed at the timeout, and the call fails saying what to change; the next
    search on the same workspace runs normally."""
    (tmp_path / "trap.txt").write_text("a" * 40 + "b\nfine line\n")
    ws = Workspace(tmp_path, grep_timeout_s=1.0)
    with pytest.raises(ToolFailure, match=r"did not finish in 1 s.*simpler pattern"):
        ws.call("grep", {"pattern": "(a+)+$"})
    assert ws.call("grep", {"pattern": "fine"}) == "trap.txt:2:fine line\n"


def test_grep_output_over_its_limit_stops_and_says_so(tmp_path: Path) -> None:
    """Matches past the output limit are not collected: the result says where it stopped and what to narrow;
    every line it holds is a real match, in order."""
    (tmp_path / "many.txt").write_text("".join(f"row {i}\n" for i in range(1000)))
    out = Workspace(tmp_path, grep_output_limit=200).call("grep", {"pattern": "row"})
    lines = out.splitlines()
    assert lines[-1].startswith("[stopped after ") and "narrow the pattern" in lines[-1]
    kept = lines[:-1]
    assert kept == [f"many.txt:{i + 1}:row {i}" for i in range(len(kept))] and 0 < len(kept) < 1000
    assert sum(len(k) + 1 for k in kept) <= 200


def test_read_file_refuses_a_file_over_its_limit(tmp_path: Path) -> None:
    """A file over READ_FILE_LIMIT (a sparse one here: no disk used) is refused before it is read, naming its
    size and pointing to grep."""
    from vak_context.agent.workspace import READ_FILE_LIMIT

    with open(tmp_path / "huge.txt", "wb") as f:
        f.truncate(READ_FILE_LIMIT + 1)
    with pytest.raises(ToolFailure, match=rf"{READ_FILE_LIMIT + 1:,} bytes, over the .* use grep"):
        Workspace(tmp_path).call("read_file", {"path": "huge.txt"})


def test_a_file_name_that_is_not_utf8_is_listed_and_grepped_as_valid_text(tmp_path: Path) -> None:
    """A name with a byte that is not UTF-8 (the OS hands it over as a lone surrogate) comes back with U+FFFD in
    its place from list_dir and grep, so the result can be sent and stored; nothing else in it changes."""
    with open(os.path.join(os.fsencode(tmp_path), b"bad\xffname.txt"), "wb") as f:
        f.write(b"caf\xc3\xa9 \xfe hello\n")
    ws = Workspace(tmp_path)
    for out in (ws.call("list_dir", {}), ws.call("grep", {"pattern": "hello"})):
        out.encode("utf-8")  # raises on a lone surrogate
        assert "bad\ufffdname.txt" in out
    assert ws.call("grep", {"pattern": "hello"}) == "bad\ufffdname.txt:1:caf\u00e9 \ufffd hello\n"


async def test_a_result_with_a_lone_surrogate_is_a_typed_error_and_writes_nothing(tmp_path: Path) -> None:
    """A tool result that cannot be UTF-8 (a str holding a lone surrogate, from an executor that did not clean
    an OS name) is refused by the evidence store with InvalidUtf8 naming the call, before anything is
    appended."""
    from vak_context.actors.local_services import InProcessServices
    from vak_context.errors import InvalidUtf8
    from vak_context.storage.ledger import LedgerStore

    with LedgerStore(tmp_path / "ledger") as store:
        services = InProcessServices(store, "s1")
        await services.append([Directive(text="list it")])
        before = len(store.entries("s1"))
        with pytest.raises(InvalidUtf8, match=r"the result of list_dir \(call_1\)"):
            await services.store_result("call_1", "list_dir", "bad\udcffname.txt", False)
        assert len(store.entries("s1")) == before


def test_a_fifo_is_refused_at_once_not_waited_on(tmp_path: Path) -> None:
    """A named pipe in the workspace (opening it for reading would wait for a writer forever) is refused as
    not a regular file; grep passes over it; list_dir lists it."""
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "a.txt").write_text("needle\n")
    ws = Workspace(tmp_path)
    with pytest.raises(ToolFailure, match="not a regular file"):
        ws.call("read_file", {"path": "pipe"})
    assert ws.call("grep", {"pattern": "needle"}) == "a.txt:1:needle\n"
    assert "pipe" in ws.call("list_dir", {})
