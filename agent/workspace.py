"""The workspace tools a live turn can call: ``read_file``, ``list_dir`` and ``grep``, over one folder.

The user names the folder; every path a model passes is resolved inside it, symlinks included, and
anything that lands outside is refused with a :class:`~vak_context.errors.ToolFailure` the turn loop returns
to the model as an error result (never an exception out of the loop). The tools are read-only.

A result is plain text: the evidence layer (``context/evidence/digest.py``) windows or digests it and keeps
the whole body recallable, so nothing here cuts what it read. Three bounds say so when they apply, as
error results the model repairs from: ``read_file`` refuses a file over ``READ_FILE_LIMIT`` (64 MiB; grep
finds its lines), ``grep`` stops collecting past ``GREP_OUTPUT_LIMIT`` (8 MiB of matches; the result
says where), and its search runs in a child process killed after ``GREP_TIMEOUT_S`` (a model-written
pattern can backtrack for hours, and Python's re has no time limit: ``vak_context.agent.grep_search``). Each tool declares
``observes=True`` because it reads the world as it is now (the freshness check counts on that
declaration, never on a tool's name).
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vak_context.agent.grep_search import BINARY_SNIFF, GREP_FILE_LIMIT, GREP_OUTPUT_LIMIT
from vak_context.context.request.messages import ToolSpec
from vak_context.errors import ToolFailure

# A pattern longer than this is refused: a model-written regex is not trusted input (and the search runs
# in a child process killed after GREP_TIMEOUT_S, since Python's re has no time limit: vak_context.agent.grep_search).
MAX_PATTERN_CHARS = 512
GREP_TIMEOUT_S = 30.0
# read_file refuses a file larger than this: the whole body is stored as evidence and must stay well under
# the ledger's blob limit; grep finds the lines of a larger file.
READ_FILE_LIMIT = 64 * 1024 * 1024
_PACKAGE_ROOT = Path(__file__).resolve().parent.parent  # where ``python -m vak_context.agent.grep_search`` imports from

__all__ = ["BINARY_SNIFF", "GREP_FILE_LIMIT", "GREP_OUTPUT_LIMIT", "GREP_TIMEOUT_S", "MAX_PATTERN_CHARS",
           "READ_FILE_LIMIT", "TOOLS", "Workspace", "WorkspaceTool"]


@dataclass(frozen=True)
class WorkspaceTool:
    """A tool's declaration: its schema, and whether it observes the world as it is now."""

    spec: ToolSpec
    observes: bool


def _schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


_PATH = {"type": "string", "description": "a path relative to the workspace root"}

TOOLS: tuple[WorkspaceTool, ...] = (
    WorkspaceTool(ToolSpec(
        name="read_file",
        description="Read a text file in the workspace. Returns its lines, numbered from 1.",
        input_schema=_schema({"path": _PATH}, ["path"]),
    ), observes=True),
    WorkspaceTool(ToolSpec(
        name="list_dir",
        description="List a folder in the workspace: one entry a line, folders ending in '/', with sizes.",
        input_schema=_schema({"path": {**_PATH, "default": "."}}, []),
    ), observes=True),
    WorkspaceTool(ToolSpec(
        name="grep",
        description="Search the workspace's text files for a regular expression. Returns path:line:text.",
        input_schema=_schema({
            "pattern": {"type": "string", "description": "a Python regular expression"},
            "path": {**_PATH, "default": "."},
            "glob": {"type": "string", "description": "only files whose name matches, e.g. '*.py'"},
        }, ["pattern"]),
    ), observes=True),
)


def _displayable(text: str) -> str:
    """``text`` as valid UTF-8: a file name that is not UTF-8 comes back from the OS with its bad bytes as
    lone surrogates, which no JSON request and no ledger entry can carry; each bad byte becomes U+FFFD."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return text


class Workspace:
    """One folder the tools may read. Paths resolve inside it or the call fails."""

    def __init__(self, root: str | os.PathLike[str], *, grep_timeout_s: float = GREP_TIMEOUT_S,
                 grep_output_limit: int = GREP_OUTPUT_LIMIT) -> None:
        try:
            resolved = Path(root).resolve(strict=True)
        except (OSError, RuntimeError) as exc:
            raise ToolFailure("workspace", f"the workspace folder {str(root)!r} cannot be opened ({exc}); "
                              "pass an existing folder with --workspace") from exc
        if not resolved.is_dir():
            raise ToolFailure("workspace", f"the workspace {str(root)!r} is not a folder; pass a folder")
        self.root = resolved
        self.grep_timeout_s, self.grep_output_limit = grep_timeout_s, grep_output_limit
        self._calls: dict[str, Callable[[Mapping[str, Any]], str]] = {
            "read_file": self._read_file, "list_dir": self._list_dir, "grep": self._grep,
        }

    @property
    def tools(self) -> tuple[WorkspaceTool, ...]:
        return TOOLS

    def call(self, name: str, arguments: Mapping[str, Any]) -> str:
        """Run one tool call; a call that cannot run raises :class:`ToolFailure` with the reason."""
        fn = self._calls.get(name)
        if fn is None:
            raise ToolFailure(name, f"no workspace tool named {name!r}; the tools are {', '.join(self._calls)}")
        if not isinstance(arguments, Mapping):
            raise ToolFailure(name, "the arguments must be a JSON object")
        return _displayable(fn(arguments))

    # ------------------------------------------------------------ paths

    def resolve(self, tool: str, path: object) -> Path:
        """The real path ``path`` names inside the root; anything outside (via '..', an absolute path
        or a symlink) is refused."""
        if not isinstance(path, str) or not path:
            raise ToolFailure(tool, "'path' must be a non-empty string relative to the workspace root")
        if "\x00" in path:
            raise ToolFailure(tool, "'path' contains a NUL character")
        candidate = Path(path)
        if not candidate.is_absolute():
            candidate = self.root / candidate
        try:
            real = candidate.resolve(strict=False)
        except (OSError, RuntimeError) as exc:  # a symlink loop, a name too long
            raise ToolFailure(tool, f"cannot resolve {path!r}: {exc}") from exc
        if real != self.root and self.root not in real.parents:
            raise ToolFailure(tool, f"{path!r} is outside the workspace; use a path under the workspace root")
        return real

    def _relative(self, path: Path) -> str:
        rel = path.relative_to(self.root).as_posix()
        return rel or "."

    # ------------------------------------------------------------ tools

    def _read_file(self, args: Mapping[str, Any]) -> str:
        real = self.resolve("read_file", args.get("path"))
        data = self._read_bytes("read_file", real)
        if b"\x00" in data[:BINARY_SNIFF]:
            return f"{self._relative(real)}: binary file, {len(data):,} bytes (not shown as text)"
        text = data.decode("utf-8", errors="replace")
        lines = text.splitlines()
        width = len(str(len(lines))) if lines else 1
        return "".join(f"{i:>{width}}\t{line}\n" for i, line in enumerate(lines, 1))

    def _read_bytes(self, tool: str, real: Path) -> bytes:
        try:
            # O_NOFOLLOW: the path was resolved already, so a link swapped in since is refused. O_NONBLOCK:
            # opening a FIFO would otherwise wait for a writer forever (it is then refused as not a file).
            fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError as exc:
            raise ToolFailure(tool, f"{self._relative(real)!r} does not exist; list_dir shows what does") from exc
        except OSError as exc:
            raise ToolFailure(tool, f"cannot open {self._relative(real)!r}: {exc.strerror}") from exc
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise ToolFailure(tool, f"{self._relative(real)!r} is not a regular file; use list_dir for folders")
            if info.st_size > READ_FILE_LIMIT:
                raise ToolFailure(tool, f"{self._relative(real)!r} is {info.st_size:,} bytes, over the "
                                  f"{READ_FILE_LIMIT:,}-byte read limit; use grep to find the lines you need")
            chunks = []
            while chunk := os.read(fd, 1 << 20):
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)

    def _list_dir(self, args: Mapping[str, Any]) -> str:
        real = self.resolve("list_dir", args.get("path", "."))
        try:
            entries = sorted(os.scandir(real), key=lambda e: e.name)
        except FileNotFoundError as exc:
            raise ToolFailure("list_dir", f"{self._relative(real)!r} does not exist") from exc
        except NotADirectoryError as exc:
            raise ToolFailure("list_dir", f"{self._relative(real)!r} is a file; use read_file") from exc
        except OSError as exc:
            raise ToolFailure("list_dir", f"cannot list {self._relative(real)!r}: {exc.strerror}") from exc
        lines = [f"{self._relative(real)}/ ({len(entries)} entries)"]
        for entry in entries:
            lines.append(self._describe(entry))
        return "\n".join(lines) + "\n"

    def _grep(self, args: Mapping[str, Any]) -> str:
        pattern = args.get("pattern")
        if not isinstance(pattern, str) or not pattern:
            raise ToolFailure("grep", "'pattern' must be a non-empty regular expression")
        if len(pattern) > MAX_PATTERN_CHARS:
            raise ToolFailure("grep", f"'pattern' is {len(pattern)} chars; keep it under {MAX_PATTERN_CHARS}")
        try:
            re.compile(pattern)  # a bad pattern is said here, in this process
        except re.error as exc:
            raise ToolFailure("grep", f"'pattern' is not a valid regular expression: {exc}") from exc
        name_glob = args.get("glob")
        if name_glob is not None and not isinstance(name_glob, str):
            raise ToolFailure("grep", "'glob' must be a string such as '*.py'")
        start = self.resolve("grep", args.get("path", "."))
        if not start.exists():
            raise ToolFailure("grep", f"{self._relative(start)!r} does not exist")
        found = self._search(start, pattern, name_glob)
        hits, skipped = found["hits"], found["skipped"]
        out = "\n".join(hits) + ("\n" if hits else "")
        if not hits:
            out = f"no matches for {pattern!r} under {self._relative(start)}\n"
        if found["truncated"]:
            out += (f"[stopped after {len(hits):,} matching lines ({self.grep_output_limit:,} bytes): narrow the "
                    "pattern, the path or the glob]\n")
        if skipped:
            out += f"[skipped {len(skipped)} files over {GREP_FILE_LIMIT:,} bytes: {', '.join(skipped)}; " \
                   "read_file reads them]\n"
        return out

    def _search(self, start: Path, pattern: str, name_glob: str | None) -> dict[str, Any]:
        """The search in a child process, killed after ``grep_timeout_s`` (vak_context.agent.grep_search says why)."""
        request = json.dumps({"root": str(self.root), "start": str(start), "pattern": pattern, "glob": name_glob,
                              "limit": self.grep_output_limit})
        try:
            done = subprocess.run([sys.executable, "-m", "vak_context.agent.grep_search"], input=request.encode(),
                                  capture_output=True, timeout=self.grep_timeout_s, cwd=_PACKAGE_ROOT, check=False)
        except subprocess.TimeoutExpired as exc:
            raise ToolFailure("grep", f"the search did not finish in {self.grep_timeout_s:g} s and was stopped "
                              "(a pattern that backtracks, such as nested repeats, or a very large tree); use a "
                              "simpler pattern, a narrower path or a glob") from exc
        if done.returncode != 0:
            why = done.stderr.decode("utf-8", errors="replace").strip().splitlines()[-1:] or ["no output"]
            raise ToolFailure("grep", f"the search failed: {why[0]}")
        result: dict[str, Any] = json.loads(done.stdout)
        return result

    def _describe(self, entry: os.DirEntry[str]) -> str:
        """One listing line; a link names its target only when the target is inside the workspace."""
        try:
            if entry.is_symlink():
                real = Path(entry.path).resolve(strict=False)
                inside = real == self.root or self.root in real.parents
                return f"{entry.name} -> {self._relative(real) if inside else '(outside the workspace)'}"
            if entry.is_dir():
                return f"{entry.name}/"
            return f"{entry.name}\t{entry.stat().st_size:,} bytes"
        except (OSError, RuntimeError):
            return f"{entry.name}\t(unreadable)"
