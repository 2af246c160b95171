"""Checks the commands run on their arguments before any work starts (no Ray, no model server, no probe).

A probe can run for minutes, so everything that can be known wrong up front is checked up front:
numbers in range (argparse type functions that name the range), base URLs that parse, and output
and ledger folders that exist as folders, or can be created, and can be written.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from urllib.parse import urlsplit

from vak_context.errors import InvalidInput

# The largest context window any provider declares today is about 2M tokens; a number past this is a typo.
MAX_TOKENS = 2_097_152


def bounded_int(lo: int, hi: int) -> Callable[[str], int]:
    """An argparse ``type``: a whole number from ``lo`` to ``hi``; anything else is a one-line error."""

    def parse(text: str) -> int:
        try:
            value = int(text.strip().replace("_", ""), 10)
        except ValueError:
            value = None
        if value is None or not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"must be a whole number from {lo:,} to {hi:,} (got {text!r})")
        return value

    parse.__name__ = f"int {lo}..{hi}"
    return parse


def bounded_float(lo: float, hi: float) -> Callable[[str], float]:
    """An argparse ``type``: a number from ``lo`` to ``hi`` (seconds, say); anything else is a one-line error."""

    def parse(text: str) -> float:
        try:
            value = float(text.strip())
        except ValueError:
            value = None
        if value is None or not lo <= value <= hi:  # NaN fails both comparisons
            raise argparse.ArgumentTypeError(f"must be a number from {lo:g} to {hi:g} (got {text!r})")
        return value

    parse.__name__ = f"float {lo}..{hi}"
    return parse


def check_base_url(url: str, what: str = "--base-url") -> str:
    """``url`` if it is an http(s) URL with a host and a valid port, else ``InvalidInput`` saying why."""
    example = "write it as http(s)://host[:port][/path], e.g. http://127.0.0.1:8080/v1"
    try:
        parts = urlsplit(url)
        port = parts.port  # raises ValueError for a port that is not 0-65535
    except ValueError as exc:
        raise InvalidInput(f"{what} {url!r} is not a valid URL ({exc}): {example}") from exc
    if parts.scheme not in ("http", "https"):
        raise InvalidInput(f"{what} {url!r} needs an http:// or https:// scheme: {example}")
    if not parts.hostname:
        raise InvalidInput(f"{what} {url!r} names no host: {example}")
    if port == 0:
        raise InvalidInput(f"{what} {url!r} has port 0, which no server listens on: {example}")
    if any(c.isspace() for c in url):
        raise InvalidInput(f"{what} {url!r} contains whitespace: {example}")
    import httpx  # the client that will use the URL must accept it too

    try:
        httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise InvalidInput(f"{what} {url!r} is not a valid URL ({exc}): {example}") from exc
    return url


def base_url_arg(text: str) -> str:
    """An argparse ``type`` for ``--base-url``."""
    try:
        return check_base_url(text, "")
    except InvalidInput as exc:
        raise argparse.ArgumentTypeError(str(exc).strip()) from exc


def check_writable_folder(path: Path, what: str, files: Iterable[str] = ()) -> None:
    """``path`` is a folder this process can write, or one it can create. Changes nothing on disk.

    ``files`` are names the command will write inside it: none of them may be a folder.
    """
    if path.exists() and not path.is_dir():
        raise InvalidInput(f"{what} {path} is a file, not a folder: pass a folder path (it is created if missing).")
    existing = path
    while not existing.exists():
        if existing.is_symlink():  # a dangling link: mkdir would fail on it
            raise InvalidInput(f"{what} {path}: {existing} is a broken symbolic link. Remove it or pass another path.")
        existing = existing.parent
    if not existing.is_dir():
        raise InvalidInput(f"{what} {path} cannot be created: {existing} is a file, not a folder. Pass another path.")
    for name in files:
        if (path / name).is_dir():
            raise InvalidInput(f"{what} {path}: {path / name} is a folder, so it cannot be written. Remove it "
                               "or pass another folder.")
    needed = os.W_OK | os.X_OK | (os.R_OK if existing == path else 0)
    verb = "written" if existing == path else f"created (in {existing})"
    if not os.access(existing, needed):
        raise InvalidInput(f"{what} {path} cannot be {verb}: permission denied. Fix its permissions or pass "
                           "another folder.")
    try:  # os.access does not see read-only mounts or pseudo file systems; a real try does
        Path(tempfile.mkdtemp(prefix=".vak-check-", dir=existing)).rmdir()
    except OSError as exc:
        raise InvalidInput(f"{what} {path} cannot be {verb}: {exc.strerror or exc}. Pass another folder.") from exc


def check_ledger_folder(path: Path, what: str = "--ledger") -> None:
    """``path`` can hold a ledger: a writable folder (or creatable), whose ``sessions`` is a folder."""
    check_writable_folder(path, what)
    sessions = path / "sessions"
    if sessions.exists() and not sessions.is_dir():
        raise InvalidInput(f"{what} {path} is not a ledger: its 'sessions' is a file, not a folder. "
                           "Pass a ledger folder, or an empty or new one.")
    if sessions.is_dir():
        check_writable_folder(sessions, what)
