"""Ray's own cost of the crossings a step makes, on this machine: the floor under ``bench/embed.py --ray``.

A step on Ray is at least one pass: the driver calls the AssemblerActor, which commits what the turn wrote
through the LedgerActor (or asks the PlannerActor for a plan) before it answers: one call that makes one more
(``tests/ray/test_step_crossings_ray.py`` counts them). A turn's close adds two calls of the driver's (the
EvidenceActor's card, which commits through the LedgerActor, and the PlannerActor's plan made ahead). Here the
same shapes with actors that do nothing: an empty call of an async actor (an int in, the int back), and a call
whose actor awaits an empty call of another before it answers. Each is timed ``--calls`` times in a row, the
fastest of ``--repeat`` runs, with the driver's CPU time per call beside it (read by ``time.process_time``).

What a step adds on Ray can be no less than these calls take with no work in them: ``floor_ms`` is one nested
call a step and the turn's close shared by its two steps (two nested calls a turn: one a step), so
``bench/embed.py --ray`` prints its added ms beside this floor, and whether its goal (5 ms) is above it here.

    .venv/bin/python bench/raycall.py          # starts a local Ray on 127.0.0.1
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


@dataclass(frozen=True)
class RayCalls:
    empty_ms: float  # an empty call of an async actor, wall ms (the fastest run's mean)
    nested_ms: float  # a call whose actor awaits an empty call of another
    empty_cpu_ms: float  # this process's CPU per empty call
    nested_cpu_ms: float

    @property
    def floor_ms(self) -> float:
        """The least a two-step turn's crossings take a step with nothing in them: one nested call (the pass
        and its commit) a step, and the close's two calls (the card and its commit, the plan ahead) shared
        by the turn's two steps."""
        return self.nested_ms + self.nested_ms / 2 + self.empty_ms / 2

    def line(self) -> str:
        return (f"Ray's own calls here: an empty actor call {self.empty_ms:.2f} ms (driver cpu {self.empty_cpu_ms:.2f}), "
                f"one that makes another {self.nested_ms:.2f} ms (driver cpu {self.nested_cpu_ms:.2f}): "
                f"a step's crossings take at least {self.floor_ms:.2f} ms with no work in them")


def measure(calls: int = 100, repeat: int = 3) -> RayCalls:
    """``RayCalls`` on the Ray this process joined (``ray.init`` first)."""
    import ray

    @ray.remote(num_cpus=0)
    class Echo:
        async def echo(self, x: int) -> int:
            return x

    @ray.remote(num_cpus=0)
    class Relay:
        def __init__(self, other: Any) -> None:
            self.other = other

        async def echo(self, x: int) -> int:
            result: int = await self.other.echo.remote(x)
            return result

    echo = Echo.remote()  # type: ignore[attr-defined]
    relay = Relay.remote(echo)  # type: ignore[attr-defined]
    try:
        ray.get(relay.echo.remote(0))  # both actors up, their first calls made
        empty = _fastest(lambda: ray.get(echo.echo.remote(1)), calls, repeat)
        nested = _fastest(lambda: ray.get(relay.echo.remote(1)), calls, repeat)
    finally:
        ray.kill(relay)
        ray.kill(echo)
    return RayCalls(empty[0], nested[0], empty[1], nested[1])


def _fastest(call: Any, calls: int, repeat: int) -> tuple[float, float]:
    """(wall ms, this process's CPU ms) per call of the fastest of ``repeat`` runs of ``calls`` calls."""
    best = (math.inf, math.inf)
    for _ in range(max(repeat, 1)):
        t, c = time.perf_counter(), time.process_time()
        for _ in range(calls):
            call()
        wall, cpu = (time.perf_counter() - t) * 1000 / calls, (time.process_time() - c) * 1000 / calls
        best = min(best, (wall, cpu))
    return best


def main(argv: list[str] | None = None) -> RayCalls:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=100, help="calls in a row per run")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each shape (the fastest counts)")
    args = parser.parse_args(argv)
    from vak_context.engine.localray import start_local_ray

    start_local_ray()
    found = measure(args.calls, args.repeat)
    print(found.line())
    return found


if __name__ == "__main__":
    main()
