"""Evidence digests computed once per result and kept (issue 26 item 3): one bounded cache per process.

A closed turn's results are shown as digests (``vak_context.context.history.render.evidence_info``). Several
holders of a session want the same digests: the PlannerActor's and the AssemblerActor's ``SessionView``
(each folds every evidence entry once), the EvidenceActor (a turn's card at close, ``recall({"turn": N})``),
a view rebuilt after the session branched, a ``vak serve`` fork of a session, a session bound again. In
one process they all ask this cache, so a result's digest is computed once and every later holder reads it;
no request recomputes a digest (a request folds only the entries appended since the last one).

The key is the evidence entry's id and the id its tag shows. An entry id is blake3 over the entry's header
(which holds the blob's own blake3 and length) and payload, so an id names its bytes; what callers pass
beside the id (the blob's length and encoding, the tool, its error flag and its input) is checked on every
hit all the same, and a mismatch is computed afresh and kept in its place. Bounded by count, least recently
used first out: a digest is at most ``DIGEST_CHARS`` characters, so ``KEPT`` of them are tens of MB at most.

Pure in what it returns: a hit is the value a miss computes. It holds no clock; ``stats`` counts.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from vak_context.errors import InvalidInput

V = TypeVar("V")
KEPT = 16_384  # results kept per process: a 10,000-turn session's evidence, about 25 MB of digests at most


@dataclass(frozen=True)
class CacheStats:
    """What a cache did since it was made (or last cleared): ``computed`` misses, ``hits``, and how many it keeps."""

    computed: int
    hits: int
    kept: int
    limit: int


class InfoCache(Generic[V]):
    """A bounded map from a key to a computed value, checked against what the caller passes on each hit."""

    def __init__(self, limit: int = KEPT) -> None:
        if limit < 1:
            raise InvalidInput(f"limit={limit}: an InfoCache keeps at least one value; pass limit >= 1")
        self.limit = limit
        self._kept: OrderedDict[Hashable, tuple[Any, V]] = OrderedDict()
        self._lock = threading.Lock()  # the actors call from threads (a Ray async actor's, asyncio.to_thread)
        self.computed = 0
        self.hits = 0

    def get(self, key: Hashable, check: Any, compute: Callable[[], V]) -> V:
        """The value kept under ``key`` when it was kept with an equal ``check``, else ``compute()``, kept."""
        with self._lock:
            found = self._kept.get(key)
            if found is not None and found[0] == check:
                self._kept.move_to_end(key)
                self.hits += 1
                return found[1]
        value = compute()  # outside the lock: a digest may take milliseconds, other sessions need not wait
        with self._lock:
            self.computed += 1
            self._kept[key] = (check, value)
            self._kept.move_to_end(key)
            while len(self._kept) > self.limit:
                self._kept.popitem(last=False)
        return value

    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(self.computed, self.hits, len(self._kept), self.limit)

    def clear(self) -> None:
        """Forget every value and zero the counts (a benchmark's cold start)."""
        with self._lock:
            self._kept.clear()
            self.computed = self.hits = 0
