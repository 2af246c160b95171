"""Opening a session: index its segments and seal what a crashed writer left open.

A writer that opens a session removes a tail whose sealed copy is complete (an interrupted seal),
and seals a tail a crash left open, truncating a torn write: the last message cut off, or whose
marker reached the disk before the rest of it. It refuses a session whose manifest records a head
the folder no longer holds (``storage/manifest.py``), and brings the manifest up to date. Those were never acknowledged (their sync never
returned). A complete batch that does not decode is damage, not a torn write: it is kept for
inspection and reported by ``verify()``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa

from vak_context.storage.ledger_index import SessionIndex, encode_index, read_index, write_index
from vak_context.storage.manifest import check_at_open, manifest_of, read_manifest, write_manifest
from vak_context.storage.segment.files import (
    ScannedSegment,
    list_segments,
    scan_segment,
    sealed_name,
    stale_tails,
)
from vak_context.storage.segment.schema import from_batch
from vak_context.storage.segment.writer import rewrite_sealed, unlink_durable
from vak_context.storage.session_state import SessionState, index_batch


def batch_intact(batch: pa.RecordBatch | None) -> bool:
    return batch is not None and all(e.compute_id() == e.id for e in from_batch(batch))


def load_session(s: SessionState, *, readonly: bool,
                 read: Callable[[int, pa.RecordBatch], None] | None = None) -> list[dict[str, Any]]:
    """Index every segment of ``s`` (sealing crash leftovers unless ``readonly``); the recoveries made.
    ``read``: handed each batch indexed (its index in ``s.batches``, the batch as decoded here).

    A recovery that dropped bytes is a torn tail: the caller records it in the ledger.
    """
    recoveries: list[dict[str, Any]] = []
    if not readonly:
        for tail in stale_tails(s.dir):  # an interrupted seal: the sealed copy is complete
            unlink_durable(tail)
    s.index = SessionIndex(s.name)
    tail_end = 0  # a read-only view's: where the last complete message of an unsealed tail ends
    for number, path, sealed in list_segments(s.dir):
        try:
            scanned = scan_segment(path, number, sealed)
        except FileNotFoundError:
            if sealed:
                raise
            # Sealed since the folder was listed (its writer closed it, or a writer's open recovered it):
            # the sealed copy is complete, and read instead.
            path, sealed = s.dir / sealed_name(number), True
            scanned = scan_segment(path, number, sealed)
        if not sealed and not readonly:
            report = seal_leftover(s, scanned)
            if report is not None:
                recoveries.append(report)
                scanned = scan_segment(s.dir / sealed_name(number), number, True)
                sealed = True
        if sealed:
            s.sealed.add(number)
        s.next_segment = max(s.next_segment, number + 1)
        for bi, sb in enumerate(scanned.batches):
            if sb.batch is None:
                s.damaged.append({"segment": path.name, "batch": bi, "offset": sb.offset, "error": sb.error})
                continue
            index_batch(s, number, sb.offset, sb.batch)
            if read is not None:
                read(len(s.batches) - 1, sb.batch)
        tail_end = 0 if sealed else scanned.good_end
    # Where what the index covers ends: after the last sealed segment (a writer starts a new tail there),
    # or inside the tail a read-only view read.
    s.index.segment, s.index.offset = (s.next_segment - 1, tail_end) if tail_end else (s.next_segment, 0)
    last = next((r for r in reversed(s.rows) if r is not None), None)
    s.head = last.id if last else None
    s.next_seq = len(s.rows)
    s.durable_seq = s.next_seq - 1
    if not readonly:
        _catch_up_files(s, s.index)
    return recoveries


def _catch_up_files(s: SessionState, index: SessionIndex) -> None:
    """A writer's open, once the segments are read (``index``: the session's, as read): the manifest checked,
    then the manifest and the index files caught up with the folder."""
    recorded = read_manifest(s.dir, s.name)
    check_at_open(s, recorded)
    # Catch the manifest up with the folder: after a crash between a seal and its manifest, after
    # sealing leftovers just now, or for a session from before manifests.
    s.manifest = manifest_of(s)
    if s.manifest != recorded and s.manifest.segments:
        write_manifest(s.dir, s.manifest)
    # The index too (format 2; a format-1 session gets its first one here), unless nothing is written yet.
    if s.rows:
        on_disk = read_index(s.dir, s.name)
        if on_disk is None or encode_index(on_disk) != encode_index(index):
            write_index(s.dir, index, durable=True)


def seal_leftover(s: SessionState, scanned: ScannedSegment) -> dict[str, Any] | None:
    """Seal a segment a crashed writer left open, dropping an incomplete tail."""
    if scanned.bad_header and not scanned.torn:
        s.damaged.append({"segment": scanned.path.name, "error": scanned.bad_header})
        return None
    batches = list(scanned.batches)
    dropped = scanned.dropped  # zero fill not counted
    reason = scanned.torn
    if batches and not batch_intact(batches[-1].batch):
        # The last message is there but its rows do not decode or hash: its marker reached the
        # disk before the rest of it (a power cut inside the zero fill). Its sync never
        # returned, so it was never acknowledged: a torn write, like a cut-off message.
        last = batches.pop()
        dropped += last.end - last.offset
        reason = reason or f"the last record batch, at byte {last.offset}, was not completely written"
    if any(b.batch is None for b in batches):
        # A complete but undecodable batch is damage, not a torn write: keep the bytes for inspection.
        return None
    rewrite_sealed(s.dir, scanned.number, [b.batch for b in batches])
    unlink_durable(scanned.path)
    return {
        "session": s.name,
        "segment": sealed_name(scanned.number),
        "bytes_dropped": dropped,
        "batches_kept": len(batches),
        "reason": reason or "segment left open by a crash",
    }
