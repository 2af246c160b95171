"""The workspace's ``grep`` search, run in a child process the caller can kill.

Python's ``re`` has no time limit, and a model writes the pattern: ``(a+)+$`` against a line of thirty
``a``s backtracks for minutes, and a thread cannot be stopped. So :meth:`vak_context.agent.workspace.Workspace.grep`
checks the arguments in its own process, then runs :func:`search` here as ``python -m vak_context.agent.grep_search``
(the request as JSON on stdin, the result as JSON on stdout) under a timeout, and kills it when the
timeout passes. This module imports only the standard library, so the child starts in a few tens of ms.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# Files larger than this are named as skipped, not silently dropped (read_file reads them).
GREP_FILE_LIMIT = 8 * 1024 * 1024
# The most a result holds: past it the search stops and says so (a pattern that matches every line of a
# large tree is a question to narrow, not a result to store).
GREP_OUTPUT_LIMIT = 8 * 1024 * 1024
# Sniffing this many bytes for NUL tells a binary file from text, as git and grep do.
BINARY_SNIFF = 8192


def search(root: Path, start: Path, pattern: str, name_glob: str | None,
           limit: int = GREP_OUTPUT_LIMIT) -> dict[str, Any]:
    """Every ``path:line:text`` under ``start`` whose line matches, in sorted path order, never through a
    symlink that leaves ``root``; the files skipped for size; whether the output limit stopped it."""
    regex = re.compile(pattern)
    hits: list[str] = []
    skipped: list[str] = []
    size_out = 0
    for file in _walk(root, start):
        if name_glob and not fnmatch.fnmatch(file.name, name_glob):
            continue
        try:
            size = file.stat().st_size
            if size > GREP_FILE_LIMIT:
                skipped.append(f"{_relative(root, file)} ({size:,} bytes)")
                continue
            data = file.read_bytes()
        except OSError:
            continue
        if b"\x00" in data[:BINARY_SNIFF]:
            continue
        rel = _relative(root, file)
        for n, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
            if regex.search(line):
                hit = f"{rel}:{n}:{line}"
                size_out += len(hit) + 1
                if size_out > limit:
                    return {"hits": hits, "skipped": skipped, "truncated": True}
                hits.append(hit)
    return {"hits": hits, "skipped": skipped, "truncated": False}


def _relative(root: Path, path: Path) -> str:
    return path.relative_to(root).as_posix() or "."


def _walk(root: Path, start: Path) -> Iterator[Path]:
    """Regular files under ``start`` in sorted order, never through a symlink that leaves the root."""
    if start.is_file():
        yield start
        return
    for dirpath, dirnames, filenames in os.walk(start, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if path.is_symlink():
                real = path.resolve(strict=False)
                if real != root and root not in real.parents:
                    continue
            if path.is_file():
                yield path


def main() -> None:
    request = json.loads(sys.stdin.buffer.read())
    result = search(Path(request["root"]), Path(request["start"]), request["pattern"], request.get("glob"),
                    int(request.get("limit", GREP_OUTPUT_LIMIT)))
    sys.stdout.write(json.dumps(result))


if __name__ == "__main__":
    main()
