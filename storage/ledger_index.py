"""The ledger's index (format 2): per session, its head and its newest ``capacity_profile`` entry per model key.

Binding a session needs the newest profile recorded for its model in any session of the ledger. Scanning
every entry of every session for it cost seconds on a 20 MB ledger, on each new session; the index makes it
a read of one small file per session (docs/LEDGER_FORMAT.md, "The index").

``<session>/_index.json`` covers the session's entries up to a seq, and says where the entries it does not
cover start: a segment and a byte offset in it (0: the segment's first batch). A reader reads the index, then
the batches from that point on (``read_rest``): nothing when it is current, a turn's entries after a crash.
So an index is never wrong, only behind: any index a writer or a catch-up wrote is a true account of the
entries it covers, whoever wrote it last (a stale one costs the reader more batches, not a wrong answer), and
a session without one (a format-1 ledger) is read from its first segment.

The session's writer keeps its index in memory on every commit (``SessionIndex.note``) and writes the file
at each seal (durably, with the manifest), at open when the file is behind (after a crash's recovery), and
after a commit that holds a ``capacity_profile`` entry or follows ``REWRITE_BYTES`` of entries since the last
write (not synced: a cache, rebuilt from the entries if a power cut tears it). The file is canonical JSON
with a blake3 of its body; one that does not check is treated as absent.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import blake3
import pyarrow as pa
import pyarrow.ipc as ipc

from vak_context.events import canonical
from vak_context.events.envelope import StoredEntry, upcast
from vak_context.storage.ledger_format import LEDGER_FORMAT, readable
from vak_context.storage.segment.files import ARROW_ERRORS, list_segments
from vak_context.storage.segment.schema import MAGIC, SCHEMA
from vak_context.storage.segment.writer import fsync_dir

INDEX_NAME = "_index.json"  # "_": pyarrow.dataset discovery skips it, as it skips tails and the manifest
PROFILE_KIND = "capacity_profile"
REWRITE_BYTES = 256 * 1024  # a writer rewrites the file at least this often (bytes of entries): a crash's rest is small
RETRIES = 4  # a segment sealed (renamed away) while it was read: list the folder again

ProfileKey = tuple[str, str, str]  # (provider, model, quantisation), as a capacity_profile payload names them


def profile_key(v: int, payload: bytes) -> ProfileKey | None:
    """The model key a ``capacity_profile`` payload is recorded under; None if it names none."""
    try:
        raw = canonical.decode(payload)
        if not isinstance(raw, dict):
            return None
        raw = upcast(PROFILE_KIND, v, raw)
    except Exception:  # a payload that does not decode is not indexed; reading the entry names it
        return None
    provider, model, quant = raw.get("provider"), raw.get("model"), raw.get("quantisation", "")
    if isinstance(provider, str) and isinstance(model, str) and isinstance(quant, str):
        return provider, model, quant
    return None


def newer(a: StoredEntry, b: StoredEntry | None) -> bool:
    """Whether ``a`` is the newer of two profile entries: by entry time; on a tie the later session (by
    name), then the later seq (what a scan of every session in order, keeping the last newest, chose)."""
    return b is None or (a.time_us, a.session, a.seq) >= (b.time_us, b.session, b.seq)


@dataclass
class SessionIndex:
    """What the index holds of one session: seqs ``0 .. seq-1`` covered, the head, the newest profile entry
    per model key, and where the entries it does not cover start (``segment``, at byte ``offset``)."""

    session: str
    seq: int = 0
    head: str | None = None
    profiles: dict[ProfileKey, StoredEntry] = field(default_factory=dict)
    segment: int = 1
    offset: int = 0

    def note(self, seq: int, entry_id: str, parent: str | None, time_us: int, kind: str, v: int,
             payload: bytes | None) -> None:
        """One entry, in seq order (one already covered is skipped)."""
        if seq < self.seq:
            return
        self.seq, self.head = seq + 1, entry_id
        if kind == PROFILE_KIND and payload is not None:
            key = profile_key(v, payload)
            if key is not None:
                entry = StoredEntry(entry_id, parent, self.session, seq, time_us, kind, v, payload, None)
                if newer(entry, self.profiles.get(key)):
                    self.profiles[key] = entry

    def note_batch(self, batch: pa.RecordBatch) -> None:
        """Every row of a record batch read from a segment."""
        kinds = batch.column("kind").to_pylist()
        payloads = batch.column("payload").view(pa.large_binary())
        seqs = batch.column("seq").to_pylist()
        ids = batch.column("id").to_pylist()
        parents = batch.column("parent").to_pylist()
        times = batch.column("time").view(pa.int64()).to_pylist()
        vs = batch.column("v").to_pylist()
        for i, kind in enumerate(kinds):
            payload = payloads[i].as_py() if kind == PROFILE_KIND else None
            self.note(seqs[i], ids[i], parents[i], times[i], kind, vs[i], payload)

    def copy(self) -> SessionIndex:
        return SessionIndex(self.session, self.seq, self.head, dict(self.profiles), self.segment, self.offset)

    def body(self) -> dict[str, Any]:
        profiles = sorted(self.profiles.values(), key=lambda e: e.seq)
        return {"format": LEDGER_FORMAT, "session": self.session, "seq": self.seq, "head": self.head,
                "rest": [self.segment, self.offset],
                "profiles": [[e.id, e.parent, e.seq, e.time_us, e.v, e.payload.decode()] for e in profiles]}


def encode_index(index: SessionIndex) -> bytes:
    """``canonical.encode({"blake3": <blake3 of the body's canonical bytes>, "index": body}) + b"\\n"``, the body
    encoded once: canonical keys are sorted and unspaced, and a hex digest needs no escape, so the wrapper is
    those bytes around the body's (a writer rewrites the file at each profile, a profile each model call)."""
    data = canonical.encode(index.body())
    return b'{"blake3":"' + blake3.blake3(data).hexdigest().encode() + b'","index":' + data + b"}\n"


def write_index(session_dir: Path, index: SessionIndex, *, durable: bool) -> None:
    """Replace the session's index atomically: a temporary file of this thread's own, renamed over (synced,
    with the folder, when ``durable``: at a seal, beside the manifest)."""
    tmp = session_dir / f"_tmp-index-{os.getpid()}-{threading.get_ident()}.json"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(encode_index(index))
        while view:
            view = view[os.write(fd, view):]
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, session_dir / INDEX_NAME)
    if durable:
        fsync_dir(session_dir)


def index_stamp(session_dir: Path) -> tuple[int, int, int] | None:
    """The index file's inode, size and modification time (None: no file): a file replaced since has another."""
    try:
        st = (session_dir / INDEX_NAME).stat()
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def read_index(session_dir: Path, session: str) -> SessionIndex | None:
    """The session's index file; None when it has none, or one this code cannot trust (torn, altered, of
    another session, of a newer format): the entries are then read instead."""
    try:
        data = (session_dir / INDEX_NAME).read_bytes()
        value = canonical.decode(data[:-1]) if data.endswith(b"\n") else None
        if not isinstance(value, dict) or set(value) != {"blake3", "index"}:
            return None
        body = value["index"]
        if (not isinstance(body, dict) or canonical.encode(value) + b"\n" != data
                or blake3.blake3(canonical.encode(body)).hexdigest() != value["blake3"]):
            return None
        if not readable(body["format"]) or body["session"] != session:
            return None
        segment, offset = body["rest"]
        index = SessionIndex(session, int(body["seq"]), body["head"], {}, int(segment), int(offset))
        for entry_id, parent, seq, time_us, v, payload in body["profiles"]:
            data_bytes = str(payload).encode()
            key = profile_key(int(v), data_bytes)
            if key is not None:
                index.profiles[key] = StoredEntry(str(entry_id), parent, session, int(seq), int(time_us), PROFILE_KIND,
                                                  int(v), data_bytes, None)
        return index
    except Exception:  # missing, torn, flipped or of another shape: a cache, so the entries are read instead
        return None


def read_rest(session_dir: Path, index: SessionIndex) -> SessionIndex:
    """``index`` brought up to the session's last complete batch: the batches from where it stops on, read
    from the folder (a tail a live writer appends to, or one a crash left, is read up to its last complete
    message). Returns a new index; ``index`` is left as it was."""
    for attempt in range(RETRIES):
        out = index.copy()
        try:
            for number, path, sealed in list_segments(session_dir):
                if number < out.segment:
                    continue
                # An offset is into the tail it was taken from; once that tail is sealed (compressed, its
                # offsets moved) its batches are read from the first, the covered ones skipped by seq.
                start = out.offset if number == out.segment and not sealed and out.offset else 0
                end = _note_segment(path, start, out)
                out.segment, out.offset = (number + 1, 0) if sealed else (number, end)
            return out
        except FileNotFoundError:
            if attempt == RETRIES - 1:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def _note_segment(path: Path, start: int, index: SessionIndex) -> int:
    """Note the rows of ``path``'s record batches from byte ``start`` (0: the first) into ``index``; the end
    of the last complete message read."""
    with pa.OSFile(str(path), "rb") as f:
        if start == 0:
            if f.read(len(MAGIC)) != MAGIC:
                return 0  # an empty or torn tail's header: nothing in it was acknowledged
            start = len(MAGIC)
        f.seek(start)
        end = start
        while True:
            try:
                msg = ipc.read_message(f)
            except EOFError:  # the end of the stream, or the zero fill ahead of a tail's next commit
                return end
            except ARROW_ERRORS:  # a message cut short: never acknowledged; verify() reports damage
                return end
            end = f.tell()
            if msg.type != "record batch":
                continue  # the schema message
            try:
                index.note_batch(ipc.read_record_batch(msg, SCHEMA))
            except ARROW_ERRORS:
                continue  # a batch that does not decode: damage verify() names; its rows are not indexed
