"""Where a farm unit's CPU goes: an opt-in profile of each unit, in the process that runs it.

Set ``VAK_FARM_PROFILE`` to a folder before the Ray the farm uses starts (Ray's workers inherit the
environment of the process that starts them), and every unit that runs writes there:

* one line in ``units.<pid>.jsonl``: the unit's CPU seconds, wall seconds, the garbage collections it
  triggered (count and seconds, per generation) and the objects the collector tracks after it, so a
  worker whose cost grows with its age shows it unit after unit;
* with ``VAK_FARM_CPROFILE=1`` as well, ``<unit>.<pid>.prof``: a cProfile of the unit (``python -m pstats``,
  or ``pstats.Stats(path)``). cProfile slows Python code about twice, so the CPU figures of a profiled run
  are not the unprofiled ones.

Unset (the default), ``unit_profile`` costs one environment lookup. ``bench/farm.py --profile DIR`` sets it.
"""

from __future__ import annotations

import cProfile
import gc
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

PROFILE_ENV = "VAK_FARM_PROFILE"
CPROFILE_ENV = "VAK_FARM_CPROFILE"


class _GcClock:
    """Counts the collections that run while it is installed, and the seconds they take, per generation."""

    def __init__(self) -> None:
        self.count = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            generation = info["generation"]
            self.count[generation] += 1
            self.seconds[generation] += time.perf_counter() - self._started


@contextmanager
def unit_profile(unit: str) -> Iterator[None]:
    """Profile what runs inside, when ``VAK_FARM_PROFILE`` names a folder (see the module docstring)."""
    folder = os.environ.get(PROFILE_ENV)
    if not folder:
        yield
        return
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    clock = _GcClock()
    profiler = cProfile.Profile() if os.environ.get(CPROFILE_ENV) == "1" else None
    cpu, wall = time.process_time(), time.perf_counter()
    gc.callbacks.append(clock)
    if profiler is not None:
        profiler.enable()
    try:
        yield
    finally:
        if profiler is not None:
            profiler.disable()
        gc.callbacks.remove(clock)
        pid = os.getpid()
        line = {"unit": unit, "pid": pid, "cpu_s": time.process_time() - cpu, "wall_s": time.perf_counter() - wall,
                "gc_count": clock.count, "gc_s": clock.seconds, "tracked_objects": len(gc.get_objects()),
                "frozen_objects": gc.get_freeze_count()}
        if profiler is not None:
            profiler.dump_stats(out / f"{unit.replace('/', '--')}.{pid}.prof")
        with (out / f"units.{pid}.jsonl").open("a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")
