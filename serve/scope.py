"""What scopes the name of a conversation that comes without an ``x-vak-session`` header: a secret of the
ledger's, made once and kept in the ledger folder (``serve-scope``, mode 0600), so the same conversation gets
the same session after every restart of ``vak serve`` on that ledger (each run's client key is new; naming
from it forked every headerless conversation at each restart), and a session's name cannot be derived from
the conversation's content without the ledger folder. It is no key: it opens nothing, and neither the
client's key nor the upstream's goes into it (docs/INTEGRATIONS.md)."""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

SCOPE_FILE = "serve-scope"


def ledger_scope(folder: str | os.PathLike[str]) -> bytes:
    """The ledger's scope secret, made on first use. Several processes serving one ledger (workers) may
    start at once: the file is written aside and linked into place, so all of them read the one that won."""
    path = Path(folder) / SCOPE_FILE
    with contextlib.suppress(FileNotFoundError):
        return _read(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    aside = path.with_name(f".{SCOPE_FILE}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="ascii") as out:
            out.write(secrets.token_hex(32) + "\n")
            out.flush()
            os.fsync(out.fileno())
        with contextlib.suppress(FileExistsError):  # another process made it first: theirs stands
            os.link(aside, path)
    finally:
        aside.unlink(missing_ok=True)
    return _read(path)


def _read(path: Path) -> bytes:
    return bytes.fromhex(path.read_text(encoding="ascii").strip())
