"""The session manifest: a durable record of a session's sealed head, so verify() can tell truncation.

A hash chain proves every entry it holds, but not that nothing came after: remove the newest sealed
segments and what is left is a shorter, perfectly valid chain. So each seal (and a writer's open, when
the folder is ahead of it) writes ``<session>/_manifest.json``: the head of the sealed segments (id
and seq) and the list of sealed segments with each one's seqs. verify() then requires the entry at
the recorded seq to be the recorded head, and names the segments that held what is missing.

Written atomically, off the append path: a temporary file, fsync, rename over, fsync of the folder.
The file is canonical JSON with a blake3 of its body, and is read back only when it is exactly
that, so a torn or flipped manifest is ``LedgerCorrupt``, never a wrong head. What it does not
protect against (an attacker who rewrites the manifest too; the unsealed tail): docs/LEDGER_FORMAT.md.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import blake3

from vak_context.errors import InvalidUtf8, LedgerCorrupt, NonCanonicalValue
from vak_context.events import canonical
from vak_context.storage.segment.files import sealed_name
from vak_context.storage.segment.writer import fsync_dir
from vak_context.storage.session_state import SessionState

MANIFEST_NAME = "_manifest.json"  # "_": pyarrow.dataset discovery skips it, as it skips tails
MANIFEST_FORMAT = 1
_TMP_NAME = "_tmp-manifest.json"


@dataclass(frozen=True)
class SegmentRecord:
    """One sealed segment as the manifest records it: its file, first seq and entries, and last id."""

    name: str
    first_seq: int
    entries: int
    last_id: str | None

    @property
    def seqs(self) -> str:
        return f"seq {self.first_seq}..{self.first_seq + self.entries - 1}" if self.entries else "no entries"


@dataclass(frozen=True)
class Manifest:
    session: str
    head: str | None  # the newest entry of the sealed segments; None when they hold none
    seq: int  # the head's seq; -1 with no head
    segments: tuple[SegmentRecord, ...]

    def body(self) -> dict[str, Any]:
        return {"format": MANIFEST_FORMAT, "session": self.session, "head": self.head, "seq": self.seq,
                "segments": [[s.name, s.first_seq, s.entries, s.last_id] for s in self.segments]}


def manifest_of(s: SessionState, since: Manifest | None = None) -> Manifest:
    """The manifest of what ``s`` has indexed in its sealed segments (its open tail left out).

    ``since``: a manifest made from the same index earlier; its records are kept and only segments
    sealed after it are read from the index, so a seal costs the batches of its own segment, not of
    the whole session.
    """
    known = {r.name: r for r in since.segments} if since is not None else {}
    spans: dict[int, list[int]] = {}  # segment number -> [first seq, last seq] of its batches
    for loc in reversed(s.batches):  # segments are indexed in order: the new ones are at the end
        if sealed_name(loc.number) in known:
            break
        if loc.number in s.sealed and loc.rows:
            last = loc.first_seq + loc.rows - 1
            span = spans.setdefault(loc.number, [loc.first_seq, last])
            span[0], span[1] = min(span[0], loc.first_seq), max(span[1], last)
    records: list[SegmentRecord] = []
    head: str | None = None
    seq = -1
    for number in sorted(s.sealed):
        record = known.get(sealed_name(number))
        if record is None:
            found = spans.get(number)
            if found is None:
                record = SegmentRecord(sealed_name(number), seq + 1, 0, None)
            else:
                row = s.rows[found[1]]
                record = SegmentRecord(sealed_name(number), found[0], found[1] - found[0] + 1,
                                       row.id if row is not None else None)
        records.append(record)
        last_seq = record.first_seq + record.entries - 1
        if record.entries and record.last_id is not None and last_seq > seq:
            head, seq = record.last_id, last_seq
    return Manifest(s.name, head, seq, tuple(records))


def encode_manifest(m: Manifest) -> bytes:
    body = m.body()
    return canonical.encode({"blake3": blake3.blake3(canonical.encode(body)).hexdigest(), "manifest": body}) + b"\n"


def write_manifest(session_dir: Path, m: Manifest) -> None:
    """Replace the session's manifest atomically and durably (temp file, fsync, rename, folder fsync)."""
    tmp = session_dir / _TMP_NAME
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        data = encode_manifest(m)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, session_dir / MANIFEST_NAME)
    fsync_dir(session_dir)


def read_manifest(session_dir: Path, session: str) -> Manifest | None:
    """The session's manifest; None when it has none (a ledger from before manifests, or nothing sealed
    yet). Raises LedgerCorrupt, saying what to do, when the file is there but is not an intact manifest."""
    path = session_dir / MANIFEST_NAME
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _damaged(session, f"cannot be read ({exc.strerror})") from exc
    try:
        value = canonical.decode(data[:-1]) if data.endswith(b"\n") else None
    except (InvalidUtf8, NonCanonicalValue) as exc:
        raise _damaged(session, f"is not JSON ({exc})") from exc
    if not isinstance(value, dict) or set(value) != {"blake3", "manifest"} or _canonical_line(value) != data:
        raise _damaged(session, "is not a manifest in canonical form (torn, or altered)")
    body = value["manifest"]
    if not isinstance(body, dict) or blake3.blake3(canonical.encode(body)).hexdigest() != value["blake3"]:
        raise _damaged(session, "does not match its checksum (altered)")
    try:
        if body["format"] != MANIFEST_FORMAT:
            raise _damaged(session, f"has format {body['format']!r}; this vak reads format {MANIFEST_FORMAT}")
        if body["session"] != session:
            raise _damaged(session, f"names session {body['session']!r} (copied from another session?)")
        segments = tuple(SegmentRecord(str(n), int(f), int(k), None if i is None else str(i))
                         for n, f, k, i in body["segments"])
        head = body["head"]
        return Manifest(session, None if head is None else str(head), int(body["seq"]), segments)
    except (KeyError, TypeError, ValueError) as exc:
        raise _damaged(session, f"does not have the manifest's fields ({type(exc).__name__}: {exc})") from exc


def _canonical_line(value: dict[str, Any]) -> bytes:
    """The bytes a writer would have written for ``value`` (b"" when it has none): a file that differs
    from them in any byte was not written whole by a writer."""
    try:
        return canonical.encode(value) + b"\n"
    except (InvalidUtf8, NonCanonicalValue):
        return b""


def _damaged(session: str, problem: str) -> LedgerCorrupt:
    """``position["finding"]`` is the text verify() reports (the error's own adds "run `vak verify`")."""
    finding = (f"the manifest of session {session!r} ({MANIFEST_NAME}) {problem}: whether its newest sealed "
               "segments are all there cannot be checked. Restore the file from a backup; or, once `vak verify` "
               "finds the entries intact, remove it to accept the session as it is (the next writer to open it "
               "writes a new one)")
    return LedgerCorrupt(finding, {"session": session, "segment": MANIFEST_NAME, "finding": finding})


def check_at_open(s: SessionState, m: Manifest | None) -> None:
    """Refuse to write to a session whose manifest records entries the folder no longer has.

    A writer that went on would chain new entries onto an older head, reusing the lost seqs, and its
    next seal would overwrite the manifest: the truncation would be invisible from then on.
    """
    if m is None or m.head is None:
        return
    if m.seq >= len(s.rows):
        found = f"its segments end at seq {len(s.rows) - 1}"
    else:
        row = s.rows[m.seq]
        if row is None or row.id == m.head:  # the head is there (None: its batch does not decode; verify() names it)
            return
        found = f"its entry at that seq is {row.id}"
    raise LedgerCorrupt(
        f"session {s.name!r}: its manifest records head seq {m.seq} (id {m.head}) but {found}: sealed "
        "entries are missing, were replaced or do not decode, so no writer opens it. Restore the missing segments from a "
        f"backup; or, to go on from what is left, remove {MANIFEST_NAME} from the session's folder",
        {"session": s.name, "seq": m.seq, "segment": MANIFEST_NAME},
    )
