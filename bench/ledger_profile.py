"""Where one append's time goes, stage by stage (docs/PERFORMANCE.md).

Wraps the functions the store calls on its hot path with timers, runs one writer appending groups
of 1, 16 and 256 entries, and prints µs per append and per entry for each stage: validation,
canonical encoding, ids (header and blake3), batch build (the commit's IPC message), write
(``pwrite``), sync (``fsync``), index, and wake-up (from the commit's acknowledgement to the
caller running again). The CPU stages are the thread's CPU time; write, sync and wake-up are wall
time. "other" is the wall time no stage accounts for: locks, the hand-off to the committer thread,
the loop around them, and time the machine ran something else. "cpu" is the process's CPU time per append, which a loaded
machine disturbs far less than wall time. A timer costs about 0.1 µs a call, so the per-entry
stages read a little high.

The wrapped names are looked up, not imported, so the same script profiles an older tree (where
the batch was built with ``to_batch`` and ids with ``compute_id``): run it from that tree's root with
``PYTHONPATH=. python /path/to/bench/ledger_profile.py``.

    .venv/bin/python bench/ledger_append.py --profile [--dir /dev/shm]
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

STAGES = ["validation", "encoding", "ids (blake3)", "batch build", "write", "sync", "index", "wake-up", "other"]


class StageTimer:
    def __init__(self) -> None:
        self.totals: dict[str, float] = dict.fromkeys(STAGES, 0.0)
        self.finished_at = 0.0
        self._undo: list[Callable[[], None]] = []

    def wrap(self, owner: Any, name: str, stage: str, *, cpu: bool = True) -> bool:
        """Time ``owner.name`` into ``stage``: the calling thread's CPU time (``cpu``), which a
        loaded machine does not inflate, or wall time (for calls that wait on the disk)."""
        real = owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name, None)
        if real is None:
            return False
        totals = self.totals
        clock = time.thread_time if cpu else time.perf_counter

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = clock()
            try:
                return real(*args, **kwargs)
            finally:
                totals[stage] += clock() - t0

        setattr(owner, name, timed)
        self._undo.append(lambda: setattr(owner, name, real))
        return True

    def undo(self) -> None:
        for fn in reversed(self._undo):
            fn()
        self._undo.clear()


def install(timer: StageTimer) -> None:
    import vak_context.events.canonical as canonical
    import vak_context.events.envelope as envelope
    import vak_context.storage.group_commit as ledger  # the write path: ids, the commit message, indexing
    import vak_context.storage.segment.writer as segments
    import vak_context.storage.session_state as session_state

    timer.wrap(envelope.Mapper, "validate", "validation")
    # encode_payload = validation + model_dump + canonical bytes; validation is subtracted below.
    timer.wrap(envelope.Mapper, "encode_payload", "encoding")
    _ = canonical  # the canonical encoder runs inside encode_payload
    timer.wrap(ledger, "chain_ids", "ids (blake3)") or timer.wrap(ledger, "compute_id", "ids (blake3)")
    timer.wrap(ledger, "encode_message", "batch build") or timer.wrap(ledger, "to_batch", "batch build")
    timer.wrap(segments.os, "pwrite", "write", cpu=False)
    timer.wrap(segments.os, "fsync", "sync", cpu=False)
    timer.wrap(ledger.GroupCommit, "_index_committed", "index")
    group = session_state.Group
    real_finish = group.__dict__["finish"]

    def finish(self: Any, error: BaseException | None = None) -> None:
        timer.finished_at = time.perf_counter()
        real_finish(self, error)

    group.finish = finish
    timer._undo.append(lambda: setattr(group, "finish", real_finish))


def profile(folder: Path | None, sizes: tuple[int, ...] = (1, 16, 256)) -> dict[int, dict[str, float]]:
    """µs per append of each stage, for one writer appending groups of each size."""
    from vak_context.events.payloads import Nudge
    from vak_context.storage.ledger import LedgerStore

    text = ("The tool returned a result that the model will read on its next step; " * 7)[:480]
    out: dict[int, dict[str, float]] = {}
    root = Path(tempfile.mkdtemp(prefix="vak-profile-", dir=folder))
    for n in sizes:
        payloads = [Nudge(tag="bench", text=f"0:{i}:{text}") for i in range(n)]
        store = LedgerStore(root / f"l{n}")
        store.append("p", payloads)  # the tail exists, the session is open
        timer = StageTimer()
        install(timer)
        rounds = max(30, 3000 // n)
        wake = 0.0
        try:
            c0, t0 = time.process_time(), time.perf_counter()
            for _ in range(rounds):
                store.append("p", payloads)
                wake += time.perf_counter() - timer.finished_at
            wall = time.perf_counter() - t0
            cpu = time.process_time() - c0
        finally:
            timer.undo()
            store.close()
        stages = {k: v / rounds * 1e6 for k, v in timer.totals.items()}
        stages["encoding"] -= stages["validation"]
        stages["wake-up"] = wake / rounds * 1e6
        stages["other"] = wall / rounds * 1e6 - sum(v for k, v in stages.items() if k != "other")
        stages["total"] = wall / rounds * 1e6
        stages["cpu, all threads"] = cpu / rounds * 1e6
        out[n] = stages
    return out


def main(folder: Path | None = None) -> dict[int, dict[str, float]]:
    result = profile(folder)
    where = folder or Path(tempfile.gettempdir())
    print(f"one writer, one append at a time, on {where}: µs per append (µs per entry)")
    sizes = list(result)
    print(f"{'stage':<17}" + "".join(f"{'group of ' + str(n):>22}" for n in sizes))
    for stage in [*STAGES, "total", "cpu, all threads"]:
        cells = "".join(f"{result[n][stage]:>12,.1f} ({result[n][stage] / n:>6.2f})" for n in sizes)
        print(f"{stage:<17}{cells}")
    return result


if __name__ == "__main__":
    sys.path.insert(0, os.getcwd())
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else None)
