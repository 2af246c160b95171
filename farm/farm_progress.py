"""The farm's progress actor, in a module of its own that imports nothing heavy.

Ray starts the actor in a fresh worker process, which imports the module its class is defined in. Kept in
``farm.farm_ray`` it pulled in pyarrow, httpx and the model-unit code: about 1.5 s of CPU per run for an
actor that only keeps a dict (docs/FARM.md "Benchmark").
"""

from __future__ import annotations


class FarmProgressActor:
    """Which units started, where, and how many times (a retried unit starts again)."""

    def __init__(self) -> None:
        self.starts: dict[str, list[str]] = {}

    def started(self, unit: str, node: str) -> None:
        self.starts.setdefault(unit, []).append(node)

    def snapshot(self) -> dict[str, list[str]]:
        return self.starts
