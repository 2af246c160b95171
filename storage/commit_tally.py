"""The durable commits this process made (``COMMITS``): what bench/embed.py reports as a step's durable
appends, and the LedgerActor's ``commit_tally``. Written by ``vak_context.storage.group_commit``."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field


@dataclass(slots=True)
class CommitTally:
    """The durable commits this process made (every store, every session): how many, their entries, and
    the seconds spent writing and syncing them. What a step's time split reports as its durable appends
    (bench/embed.py); read it with ``snapshot`` (on Ray, ``LedgerActor.commit_tally`` reads the actor's)."""

    commits: int = 0  # fsyncs: a durable commit, or a sync of what was written behind (GroupCommit.hold)
    entries: int = 0
    seconds: float = 0.0
    behind: int = 0  # batches written behind a hold, made durable by a later commit
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, entries: int, seconds: float, *, synced: bool = True) -> None:
        with self._lock:
            if synced:
                self.commits += 1
            else:
                self.behind += 1
            self.entries += entries
            self.seconds += seconds

    def snapshot(self) -> dict[str, float]:
        with self._lock:
            return {"commits": self.commits, "entries": self.entries, "seconds": self.seconds, "behind": self.behind}


COMMITS = CommitTally()
