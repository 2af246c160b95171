"""How a session's search index takes documents: each analysed once into one whoosh segment per commit, and
the index's segments merged by tiers, so a turn's commit costs what its own documents cost.

whoosh's ``BufferedWriter`` (what ``WriterIndex`` used for every writer) indexes each added document into a
one-document in-memory segment of its own (a ``MemWriter`` opened, flushed and closed per document), then at
its commit reads every posting of that buffer back into the file writer's pool and writes them again; and
the default merge policy (``MERGE_SMALL``) merged small segments at most commits. A turn's background catch-up
at 1,000 turns spent most of its time there (bench/embed.py's worker threads, py-spy and yappi).
``SegmentBuffer`` adds each document straight to a ``SegmentWriter`` (opened at the first document: a
catch-up with nothing new opens none and writes nothing), whose pool is written once, as one segment, at the
commit. ``tiered_merge`` merges only segments of one size tier, once ``TIER`` of them are there: a commit
rewrites the few small segments of its tier, rarely a bigger one, and the segment count stays near ``TIER``
per tier (a few dozen at most; each segment costs a search one more reader).

The ``SearchIndexer`` of a ``search=True`` store keeps whoosh's ``BufferedWriter`` (``buffered=True``): it
searches what it buffered before any commit; its commits use ``tiered_merge`` too.
"""

from __future__ import annotations

import math
from typing import Any

TIER = 10  # segments of one size tier merged together once there are this many
TIER_BASE = 16  # documents: segments up to this size are the first tier


def _tier(docs: int) -> int:
    return 0 if docs <= TIER_BASE else 1 + int(math.log(docs / TIER_BASE, TIER))


def tiered_merge(writer: Any, segments: list[Any]) -> list[Any]:
    """A whoosh merge policy: the segments of the smallest size tier holding ``TIER`` or more, merged into the
    segment being written; the others kept as they are (in their order)."""
    from whoosh.reading import SegmentReader

    tiers: dict[int, list[Any]] = {}
    for segment in segments:
        tiers.setdefault(_tier(segment.doc_count_all()), []).append(segment)
    full = [t for t, members in tiers.items() if len(members) >= TIER]
    if not full:
        return segments
    merged = tiers[min(full)]
    for segment in merged:
        reader = SegmentReader(writer.storage, writer.schema, segment)
        try:
            writer.add_reader(reader)
        finally:
            reader.close()
    return [s for s in segments if all(s is not m for m in merged)]


class SegmentBuffer:
    """The documents added since the last commit, in a whoosh ``SegmentWriter`` opened at the first one;
    ``commit`` writes them as one segment (``tiered_merge``). Not searchable before its commit: a search
    commits first (``WriterIndex.search``)."""

    def __init__(self, ix: Any, limitmb: int = 64) -> None:
        self.ix = ix
        self.limitmb = limitmb
        self.writer: Any = None  # whoosh's SegmentWriter, holding the index's write lock while open
        self.bufferedcount = 0

    def add_document(self, **fields: Any) -> None:
        if self.writer is None:
            self.writer = self.ix.writer(limitmb=self.limitmb)
        self.writer.add_document(**fields)
        self.bufferedcount += 1

    def commit(self) -> None:
        writer, self.writer = self.writer, None
        if writer is not None:
            writer.commit(mergetype=tiered_merge)
        self.bufferedcount = 0

    def close(self) -> None:
        self.commit()

    def cancel(self) -> None:
        writer, self.writer = self.writer, None
        if writer is not None:
            writer.cancel()
        self.bufferedcount = 0


def open_writer(ix: Any, *, buffered: bool) -> Any:
    """A ``SegmentBuffer`` on ``ix``, or with ``buffered`` whoosh's ``BufferedWriter`` (searchable before its
    commit), merging by tiers too."""
    if not buffered:
        return SegmentBuffer(ix)
    from whoosh.writing import BufferedWriter

    return BufferedWriter(ix, period=None, limit=1 << 30, writerargs={"limitmb": 64},
                          commitargs={"mergetype": tiered_merge})
