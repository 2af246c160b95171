"""Where a ledger lives on disk: the folder checks, session folders, and the one-writer file lock."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from vak_context.errors import LedgerPathError, SessionLocked
from vak_context.names import check_name
from vak_context.storage.segment.writer import mkdir_durable

SEARCH_DIR = "_search"  # a session's search index (storage/search.py); the underscore keeps it out of the segments


def check_ledger_path(root: Path, *, create: bool) -> None:
    """Raise a one-line typed error unless ``root`` is a usable ledger folder.

    With ``create``, a missing ledger is made (each new folder synced into its parent). Checked
    before any work, so `vak` commands can call it on their ``--ledger`` argument first.
    """
    sessions = root / "sessions"
    need = os.R_OK | os.X_OK | (os.W_OK if create else 0)
    try:
        for path in (root, sessions):  # the ledger folder first, so an error names the folder at fault
            if not path.exists():
                if not create:
                    raise LedgerPathError(root, "is not a ledger: it has no sessions/ folder", "Check the path.")
                mkdir_durable(sessions)
                return
            if not path.is_dir():
                whose = "a ledger's folder" if path == root else "a ledger's sessions/"
                raise LedgerPathError(path, f"is a file; {whose} must be a folder",
                                      "Pass the ledger's folder (the one holding sessions/), or a new path.")
            # Checked up front: without read permission on sessions/ a stat still works, and the
            # error would come later, as a traceback from whatever first lists the folder.
            if not os.access(path, need):
                mode = "readable and writable" if create else "readable"
                raise LedgerPathError(path, f"is not {mode} by this user", "Check the folder's permissions.")
    except OSError as exc:
        raise LedgerPathError(exc.filename or root, f"cannot be used as a ledger ({exc.strerror})",
                              "Check the path and its permissions.") from exc


def list_session_names(root: Path) -> set[str]:
    """The session folders under ``root/sessions`` (a symlinked one is listed, so that opening it
    refuses it by name)."""
    base = root / "sessions"
    try:
        return {p.name for p in base.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))}
    except OSError as exc:
        raise LedgerPathError(base, f"cannot be listed ({exc.strerror})",
                              "Check the folder's permissions for this user.") from exc


def session_dir(root: Path, name: str, *, create: bool) -> Path | None:
    """The session's folder; None when it does not exist and ``create`` is false."""
    d = root / "sessions" / check_name(name, "session name")
    try:
        if d.is_symlink():
            raise LedgerPathError(d, "is a symlink; a session folder must be a real folder inside the ledger",
                                  "Move the session's folder into sessions/ instead of linking it.")
        if d.exists() and not d.is_dir():
            raise LedgerPathError(d, "is a file, not a session folder", "Move it out of sessions/.")
        if not d.exists():
            if not create:
                return None
            mkdir_durable(d)
        elif not os.access(d, os.R_OK | os.X_OK):
            raise LedgerPathError(d, "is not readable by this user", "Check the folder's permissions.")
    except OSError as exc:
        raise LedgerPathError(d, f"cannot be used ({exc.strerror})", "Check the folder's permissions.") from exc
    return d


def take_writer_lock(folder: Path, session: str) -> int:
    """Take the session's writer lock (``_lock``, flock); the descriptor holds it until closed."""
    path = folder / "_lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as exc:
        os.close(fd)
        raise SessionLocked(session, str(path)) from exc
    return fd
