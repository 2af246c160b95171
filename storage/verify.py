"""verify(): re-read a session from disk and check every hash link, naming the first bad entry.

Whatever pyarrow raises on the bytes of a segment is a damage finding here, never an exception out of
verify(): the report names the first entry it can no longer vouch for. After the entries, the
session's manifest (``storage/manifest.py``) must still find its recorded head: a missing run of
newest sealed segments is a finding that names them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vak_context.errors import LedgerCorrupt
from vak_context.events import canonical
from vak_context.events.payloads import PAYLOAD_TYPES
from vak_context.storage.manifest import MANIFEST_NAME, Manifest, SegmentRecord, read_manifest
from vak_context.storage.segment.files import (
    ARROW_ERRORS,
    SCHEMA,
    ScannedSegment,
    from_batch,
    list_segments,
    scan_segment,
    sealed_name,
)
from vak_context.storage.segment.footer import StreamBatch, check_footer


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
    # cut short, unreadable), "missing" (entries the manifest records are gone), "manifest" (the
    # manifest itself is damaged, so truncation cannot be ruled out).
    finding: str = "entry"

    def __str__(self) -> str:
        if self.finding == "manifest":
            return f"bad manifest: session {self.session!r}, {self.segment}: {self.reason}"
        if self.finding == "missing":
            return f"missing entries from seq {self.seq} of session {self.session!r}: {self.reason}"
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
    # The manifest first, the folder after: a writer renames a sealed segment into place before its
    # manifest names it, so every segment this manifest names was in the folder before it was read.
    try:
        manifest, manifest_problem = read_manifest(session_dir, name), ""
    except LedgerCorrupt as exc:
        manifest, manifest_problem = None, str(exc.position.get("finding", exc))
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
                    jumped = e.session == name and e.seq > expected_seq
                    gone = _missing(manifest, expected_seq, e.seq, segments) if jumped else []
                    if gone:  # the seqs jump over sealed segments the manifest names, gone: say which
                        report.first_bad = BadEntry(name, gone[0].name, 0, None, expected_seq, None,
                                                    f"{reason}; {_gone_text(gone)}", "missing")
                    else:
                        report.first_bad = BadEntry(name, path.name, bi, ri, expected_seq, e.id, reason)
                    return
                seen[e.id] = e.seq
                expected_seq += 1
                report.entries += 1
        if _segment_end_bad(report, name, path, sealed, scanned, open_tail, expected_seq):
            return
    _check_manifest(report, name, manifest, manifest_problem, seen, expected_seq, segments)


def _segment_end_bad(report: VerifyReport, name: str, path: Path, sealed: bool, scanned: ScannedSegment,
                     open_tail: bool, expected_seq: int) -> bool:
    """What follows a segment's last complete batch: a torn tail (noted when it is the open tail, else the
    first bad), and a sealed segment's footer against its batches. True: ``report.first_bad`` is set."""
    # Damage after the last complete batch is reported at the seq the next entry would have had.
    if scanned.torn:
        if not open_tail:
            report.first_bad = BadEntry(name, path.name, len(scanned.batches), None, expected_seq, None,
                                        f"segment is cut short: {scanned.torn}", "segment")
            return True
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
            return True
    return False


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


def _check_manifest(report: VerifyReport, name: str, manifest: Manifest | None, problem: str,
                    seen: dict[str, int], next_seq: int, segments: list[tuple[int, Path, bool]]) -> None:
    """After every entry checked: the manifest's head must be among them, at its seq."""
    if problem:
        report.first_bad = BadEntry(name, MANIFEST_NAME, 0, None, None, None, problem, "manifest")
        return
    if manifest is None:
        if any(sealed for _, _, sealed in segments):
            report.notes.append(
                f"session {name!r} has no {MANIFEST_NAME} (written before manifests, or removed): its entries check, "
                "but whether newest sealed segments were removed cannot be told; the next writer to open it writes one")
        return
    if manifest.head is not None and seen.get(manifest.head) != manifest.seq:
        gone = _missing(manifest, next_seq, manifest.seq + 1, segments)
        if manifest.seq >= next_seq:
            what = (f"the manifest records head seq {manifest.seq} (id {manifest.head}) and the session ends at "
                    f"seq {next_seq - 1}")
            report.first_bad = BadEntry(name, gone[0].name if gone else MANIFEST_NAME, 0, None, next_seq, None,
                                        f"{what}; {_gone_text(gone) if gone else 'its segments are shorter'}",
                                        "missing")
        else:
            report.first_bad = BadEntry(
                name, MANIFEST_NAME, 0, None, manifest.seq, manifest.head,
                f"the manifest records id {manifest.head} at seq {manifest.seq}; the session holds another "
                "entry there (its sealed segments were replaced)", "missing")
        return
    present = {p.name for _, p, sealed in segments if sealed}
    elsewhere = [r.name for r in manifest.segments if r.name not in present]
    if elsewhere:  # their entries all checked, in other files: renamed, or merged by hand
        report.notes.append(f"session {name!r}: the manifest lists {', '.join(elsewhere)}, not in the folder; "
                            "the entries it records there were found in the session's other segments")


def _missing(manifest: Manifest | None, first: int, stop: int,
             segments: list[tuple[int, Path, bool]]) -> list[SegmentRecord]:
    """The manifest's sealed segments, absent from the folder, that held seqs ``first <= seq < stop``."""
    if manifest is None:
        return []
    present = {p.name for _, p, sealed in segments if sealed}
    return [r for r in manifest.segments if r.name not in present and r.entries
            and r.first_seq < stop and r.first_seq + r.entries > first]


def _gone_text(gone: list[SegmentRecord]) -> str:
    listed = ", ".join(f"{r.name} ({r.seqs}, last id {r.last_id})" for r in gone)
    return (f"the manifest lists {len(gone)} sealed segment(s) that are not in the folder: {listed}. "
            "Restore them from a backup")


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
