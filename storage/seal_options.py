"""How a sealed segment is compressed: zstd where it pays for its reads, else plain.

A sealed segment keeps one record batch per commit (storage/segment_writer.py), and zstd inside Arrow
costs a fixed amount per column buffer to read, as it does to write (a decompression context per buffer):
about 0.13 ms a batch here, against 0.01 ms for the same batch stored plain, so a session ``vak serve``
wrote (one entry a commit: a note, a step, a result) read its sealed segments about 20 times slower
compressed than plain, and reading them was most of what resuming it after a restart cost
(bench/serve_bind.py). Where a segment's batches are large (a bulk import, a job that commits many entries
at once) the bytes dominate and zstd (about 2.4 times smaller on this ledger's text) still pays.

So a segment whose batches hold less than ``PLAIN_BELOW`` bytes on average is sealed plain. Either way the
file is the same Arrow IPC file with the same batches: each message says whether its buffers are compressed,
so every reader reads both, and ledgers whose small segments were sealed with zstd read as before
(docs/LEDGER_FORMAT.md, "Sealing").
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.ipc as ipc

PLAIN_BELOW = 16 * 1024  # mean bytes a batch (uncompressed) under which a segment is sealed plain
# use_threads=False: a thread-pool hop per buffer costs more than it saves.
ZSTD = ipc.IpcWriteOptions(compression="zstd", use_threads=False)
PLAIN = ipc.IpcWriteOptions(use_threads=False)


def sealed_options(batches: Sequence[pa.RecordBatch]) -> ipc.IpcWriteOptions:
    """The write options of a sealed segment holding ``batches``: plain when they are small on average."""
    if not batches:
        return ZSTD
    mean = sum(b.nbytes for b in batches) / len(batches)
    return PLAIN if mean < PLAIN_BELOW else ZSTD
