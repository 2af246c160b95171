"""verify(): re-read a session from disk and check every hash link, naming the first bad entry.

Whatever pyarrow raises on the bytes of a segment is a damage finding here, never an exception out of
verify(): the report names the first entry it can no longer vouch for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vak_context.events import canonical
from vak_context.events.payloads import PAYLOAD_TYPES
from vak_context.storage.segment_footer import StreamBatch, check_footer
from vak_context.storage.segments import (
    ARROW_ERRORS,
    SCHEMA,
    ScannedSegment,
    from_batch,
    list_segments,
    scan_segment,
    sealed_name,
)


@dataclass
class BadEntry:
    session: str
    segment: str
    batch: int
    row: int | None
    seq: int | None
    id: str | None
    reason: str
    # What was found: "entry" (an entry fails its checks), "segment" (a segment's bytes: header, footer,
    # cut short, unreadable).
    finding: str = "entry"

    def __str__(self) -> str:
        if self.seq is None and self.row is None and not self.id:  # the segment itself, not an entry (its footer)
            return f"bad segment: session {self.session!r}, {self.segment}: {self.reason}"
        where = f"session {self.session!r}, {self.segment} batch {self.batch}"
        if self.row is not None:
            where += f" row {self.row}"
        who = f"seq {self.seq}" if self.seq is not None else "unknown seq"
        if self.id:
            who += f" (id {self.id})"
        return f"first bad entry: {who} at {where}: {self.reason}"


@dataclass
class VerifyReport:
    sessions: int = 0
    entries: int = 0
    first_bad: BadEntry | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.first_bad is None

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "sessions": self.sessions,
            "entries": self.entries,
            "first_bad": None if self.first_bad is None else self.first_bad.__dict__,
            "notes": self.notes,
        }


def verify_session(session_dir: Path, name: str, report: VerifyReport) -> None:
    report.sessions += 1
    seen: dict[str, int] = {}
    expected_seq = 0
    segments = list_segments(session_dir)
    for si, (number, path, sealed) in enumerate(segments):
        # Only the last segment can be a live or crashed writer's tail: a writer seals (or, after a
        # crash, the next writer seals) a tail before it starts the next one.
        open_tail = not sealed and si == len(segments) - 1
        scanned = _scan(session_dir, number, path, sealed)
        if isinstance(scanned, str):
            report.first_bad = BadEntry(name, path.name, 0, None, expected_seq, None, scanned, "segment")
            return
        path, sealed = scanned.path, scanned.sealed  # the sealed copy, when the tail was sealed meanwhile
        if scanned.bad_header and not (scanned.torn and open_tail):
            report.first_bad = BadEntry(name, path.name, 0, None, expected_seq, scanned.first_id,
                                        scanned.bad_header, "segment")
            return
        for bi, sb in enumerate(scanned.batches):
            if sb.batch is None:
                report.first_bad = BadEntry(name, path.name, bi, None, expected_seq,
                                            _id_named_by_next(scanned.batches, bi, segments, si),
                                            f"record batch at byte {sb.offset} does not decode ({sb.error})",
                                            "segment")
                return
            for ri, e in enumerate(from_batch(sb.batch)):
                reason = _check(e, name, expected_seq, seen)
                if reason:
                    report.first_bad = BadEntry(name, path.name, bi, ri, expected_seq, e.id, reason)
                    return
                seen[e.id] = e.seq
                expected_seq += 1
                report.entries += 1
        # Damage after the last complete batch is reported at the seq the next entry would have had.
        if scanned.torn:
            if not open_tail:
                report.first_bad = BadEntry(name, path.name, len(scanned.batches), None, expected_seq, None,
                                            f"segment is cut short: {scanned.torn}", "segment")
                return
            # Its sync never returned, so nothing in the torn part was acknowledged. Read-only:
            # the note is all verify() does; the next writer truncates it.
            report.notes.append(f"session {name!r}, {path.name}: unacknowledged torn tail "
                                f"({scanned.torn}; {scanned.dropped} bytes not zero fill after the last "
                                "complete batch); the next writer truncates it")
        if sealed:
            why = _footer_problem(path, scanned)
            if why:
                report.first_bad = BadEntry(name, path.name, len(scanned.batches), None, None, None,
                                            f"the segment footer does not match its record batches: {why}",
                                            "segment")
                return


def _scan(session_dir: Path, number: int, path: Path, sealed: bool) -> ScannedSegment | str:
    """The segment scanned, or why it cannot be read (every pyarrow or OS error is a finding here)."""
    try:
        try:
            return scan_segment(path, number, sealed)
        except FileNotFoundError:
            if sealed:
                raise
            # A writer in another process sealed this tail since the folder was listed.
            return scan_segment(session_dir / sealed_name(number), number, True)
    except ARROW_ERRORS as exc:  # scan_segment translates what it expects; this is the edge's last net
        if isinstance(exc, OSError) and exc.errno is not None:  # the file system's, not pyarrow's
            return f"the segment cannot be read ({exc.strerror}); check the file and its permissions"
        return f"pyarrow cannot read the segment ({type(exc).__name__}: {exc})"


def _check(e: Any, session: str, expected_seq: int, seen: dict[str, int]) -> str:
    if e.session != session:
        return f"session column says {e.session!r}"
    if e.seq != expected_seq:
        return f"seq {e.seq} where {expected_seq} was expected"
    if e.kind not in PAYLOAD_TYPES:
        return f"unknown kind {e.kind!r}"
    if not canonical.is_canonical(e.payload):
        return "payload bytes are not canonical JSON (altered, or not UTF-8)"
    if e.compute_id() != e.id:
        return "content does not hash to the entry's id (tampered)"
    if e.parent is not None and e.parent not in seen:
        return f"parent {e.parent} is not an earlier entry of the session"
    return ""


def _footer_problem(path: Path, scanned: ScannedSegment) -> str:
    """Why a sealed segment's footer does not describe the batches of its stream ("" if it does)."""
    stream = [StreamBatch(b.offset, b.end - b.offset - b.body_length, b.body_length, b.batch)
              for b in scanned.batches if b.batch is not None]
    try:
        data = path.read_bytes()
    except OSError as exc:
        return f"cannot read the file: {exc}"
    return check_footer(data, stream, SCHEMA, scanned.good_end)


def _id_named_by_next(batches: list[Any], bi: int, segments: list[Any], si: int) -> str | None:
    """An undecodable batch's last id survives as the parent of the next good entry."""
    for sb in batches[bi + 1:]:
        if sb.batch is not None and sb.batch.num_rows:
            return str(sb.batch.column("parent")[0].as_py())
        return None
    return None
