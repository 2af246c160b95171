"""Writing segment files: the tail a writer appends to, sealing, and durable file operations.

A segment is an Arrow IPC *file* (``ARROW1`` magic, the schema, one record batch per commit, then
the footer). While a writer has it open it is named ``_seg-NNNNNN.arrow`` (the leading ``_`` keeps
it out of ``pyarrow.dataset`` discovery, which cannot read a file without its footer) and works as
the write-ahead tail: each commit appends its batch *uncompressed*, because zstd costs about 14 µs
per column buffer whatever its size, which is more than half of a small commit. Sealing compacts
the tail into ``seg-NNNNNN.arrow``: the same batches, one per commit, zstd-compressed where that pays
for its reads (storage/seal_options.py), with the footer (written to a temporary file, fsynced, renamed
over, then the tail is removed).
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc

from vak_context.storage.seal_options import sealed_options
from vak_context.storage.segment.files import open_name, scan_segment, sealed_name
from vak_context.storage.segment.schema import MAGIC, SCHEMA


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def mkdir_durable(path: Path) -> None:
    """Create ``path`` and any missing parents, each followed by an fsync of its parent folder.

    A new folder's entry is in its parent's directory data: until the parent is synced, a power
    cut can lose the folder, and everything in it, even after its files were synced.
    """
    missing: list[Path] = []
    p = path
    while not p.exists():
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            d.mkdir()
        except FileExistsError:
            pass  # made meanwhile by another process; it syncs what it made
        fsync_dir(d.parent)


def unlink_durable(path: Path) -> None:
    """Remove a file and sync its folder, so a power cut cannot bring it back."""
    os.unlink(path)
    fsync_dir(path.parent)


ZERO_FILL_MIN = 64 * 1024  # a new tail is zero-filled this far, and grows by doubling ...
ZERO_FILL_MAX = 4 * 1024 * 1024  # ... up to this much at a time
_ZEROS = bytes(1024 * 1024)


class SegmentWriter:
    """Appends one record batch per commit to a session's tail, syncing before it returns.

    The tail is zero-filled ahead of the writes, as PostgreSQL does with its WAL segments: a
    commit then overwrites blocks the file already has, so its fsync has no file-size change or
    block allocation for the filesystem journal to commit (about two thirds of the cost of an
    fsync after an append, measured here). Each message is written body first and its leading
    continuation marker last, so a reader, and a writer reopening after a crash, sees either the
    whole message or zeros where it would start: zeros read as the end of the stream.
    """

    def __init__(self, session_dir: Path, number: int) -> None:
        self.session_dir = session_dir
        self.number = number
        self.path = session_dir / open_name(number)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        head = MAGIC + SCHEMA.serialize().to_pybytes()
        os.pwrite(self._fd, head, 0)
        self._end = len(head)  # where the next message goes
        self._zeroed = self._end  # the file is zero-filled up to here
        self._fill_to(self._end + ZERO_FILL_MIN)
        os.fsync(self._fd)
        fsync_dir(session_dir)

    @property
    def size(self) -> int:
        return self._end

    def _fill_to(self, end: int) -> None:
        """Zero-fill the file from the current fill mark to ``end`` (rounded up to 4 KiB)."""
        end = (end + 4095) // 4096 * 4096
        pos = self._zeroed
        while pos < end:
            n = min(len(_ZEROS), end - pos)
            os.pwrite(self._fd, _ZEROS[:n] if n < len(_ZEROS) else _ZEROS, pos)
            pos += n
        self._zeroed = max(self._zeroed, end)

    def write(self, batch: pa.RecordBatch) -> int:
        """Write and sync one batch; returns the byte offset of its IPC message."""
        return self.write_message(batch.serialize().to_pybytes())

    def write_message(self, message: bytes, *, sync: bool = True) -> int:
        """Write one encapsulated IPC message (uncompressed: marker, length, metadata, body), and sync it
        unless ``sync`` is False (a write-behind append: ``sync`` makes it durable later, with what follows)."""
        msg = memoryview(message)
        offset, size = self._end, len(msg)
        if offset + size > self._zeroed:
            # Keep a zero-filled stretch ahead; the message itself needs no fill, it is written whole.
            grow = min(max(self._zeroed, ZERO_FILL_MIN), ZERO_FILL_MAX)
            os.pwrite(self._fd, msg[4:], offset + 4)
            self._zeroed = max(self._zeroed, offset + size)
            self._fill_to(offset + size + grow)
        else:
            os.pwrite(self._fd, msg[4:], offset + 4)
        os.pwrite(self._fd, msg[:4], offset)  # the continuation marker last: the message is complete
        if sync:
            os.fsync(self._fd)
        self._end = offset + size
        return offset

    def sync(self) -> None:
        """Make every message written so far durable (one fsync covers all of them)."""
        os.fsync(self._fd)

    def seal(self) -> list[int]:
        """Compact the tail into the sealed segment (storage/seal_options.py); returns its batch offsets.

        The tail stays until ``remove_tail``, so a reader holding a tail offset can still read it.
        """
        os.close(self._fd)
        self._fd = -1
        scanned = scan_segment(self.path, self.number, False)
        if scanned.torn or scanned.bad_header or any(b.batch is None for b in scanned.batches):
            raise OSError(f"{self.path} changed under its writer: {scanned.torn or scanned.bad_header}")
        return rewrite_sealed(self.session_dir, self.number, [b.batch for b in scanned.batches])

    def remove_tail(self) -> None:
        """Remove the tail once its sealed copy is in place (and readers were pointed at it)."""
        unlink_durable(self.path)

    def abandon(self) -> None:
        """Close the file without sealing it (after a failed write)."""
        if self._fd >= 0:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = -1


def rewrite_sealed(session_dir: Path, number: int, batches: list[pa.RecordBatch]) -> list[int]:
    """Write complete batches into a sealed segment atomically (zstd, or plain where its batches are small:
    storage/seal_options.py).

    Used to seal a tail and to seal a segment a crash left open. Returns each batch's offset.
    """
    target = session_dir / sealed_name(number)
    tmp = session_dir / f"_tmp-{number:06d}.arrow"
    offsets: list[int] = []
    with open(tmp, "wb") as f:
        with ipc.new_file(f, SCHEMA, options=sealed_options(batches)) as w:
            for b in batches:
                offsets.append(f.tell())
                w.write_batch(b)
        f.flush()
        os.fsync(f.fileno())
    if offsets:
        offsets[0] = _first_batch_offset(tmp)
    os.rename(tmp, target)
    fsync_dir(session_dir)
    return offsets


def _first_batch_offset(path: Path) -> int:
    # Arrow writes the magic and the schema lazily, with the first batch: find where they end.
    with pa.OSFile(str(path), "rb") as f:
        f.seek(len(MAGIC))
        ipc.read_message(f)
        return int(f.tell())


