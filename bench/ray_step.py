"""A step on Ray as one pass against every call in line, alternated on one cluster (issue 37 item 1).

The same session, the same turn loop (``TurnLoop.run`` over ``RayServices``) and a scripted model on loopback
(``tests/fakes/scripted.py``: two ``grep`` calls, then the answer); turns alternate between the services held
for the turn (a step is one pass: what the step writes, its results included, is chained by the driver and
committed by the AssemblerActor's next pass with the plan entry) and not held (every call made in line, the call
pattern before the change: a separate append for the receipt, each result stored before the loop goes on).
Wall ms per step of each turn (the model's loopback answer and the tool included, the same for both); the
load average is printed beside it: compare the two columns of one run only.

    .venv/bin/python bench/ray_step.py             # 10 turns each way
    .venv/bin/python bench/ray_step.py --turns 3   # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx

from tests.fakes.httpserver import serve
from tests.fakes.scripted import PROFILE, Scripted, completion, fixed, notes_workspace, tool_surface
from vak_context.agent.loop import TurnConfig, TurnLoop
from vak_context.context.request.assemble import system_prompt
from vak_context.providers.base import RetryPolicy
from vak_context.providers.openai_compat import OpenAICompatProvider


async def measure(turns: int, tmp: Path) -> dict[str, list[float]]:
    """Wall ms per step of each timed turn, by mode ("pass": held, "inline": not held), alternated."""
    from tests.fakes.ray_folders import kill_folder_actors
    from vak_context.actors.turn_services import RayServices

    root = os.path.realpath(tmp / "ledger")
    greps = [completion(calls=[("grep", {"pattern": p})]) for p in ("beta", "gamma")]
    script = Scripted([*map(fixed, greps), fixed(completion("beta is on line 2"))] * (8 * turns + 8))
    surface = tool_surface()
    times: dict[str, list[float]] = {"pass": [], "inline": []}
    try:
        with serve(script.handle) as server:
            async with httpx.AsyncClient() as client:
                provider = OpenAICompatProvider(client, base_url=server.base_url, retry=RetryPolicy(attempts=1))
                config = TurnConfig(model="scripted", provider="openai-compat", surface=surface, max_steps=4,
                                    system=system_prompt(surface.catalogue()), max_tokens=64)
                services = RayServices(root, "s1")
                loop = TurnLoop(services, provider, PROFILE, config, workspace=notes_workspace(tmp))
                await loop.run("where is beta?")  # builds the actors and their views: not timed
                for i in range(2 * turns):
                    mode = "pass" if i % 2 == 0 else "inline"
                    if mode == "inline":
                        services.hold = None  # type: ignore[assignment]  # TurnLoop.run then holds nothing
                    else:
                        services.__dict__.pop("hold", None)
                    start = time.perf_counter()
                    report = await loop.run(f"where is beta? ({i})")
                    times[mode].append((time.perf_counter() - start) * 1000 / len(report.steps))
    finally:
        kill_folder_actors(root)
    return times


def main(argv: list[str] | None = None, *, start_ray: Callable[[], Any] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=10, help="timed turns each way (alternated)")
    args = parser.parse_args(argv)
    from vak_context.engine.localray import start_local_ray

    (start_ray or start_local_ray)()
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="vak-bench-ray-step-") as tmp:
        times = asyncio.run(measure(args.turns, Path(tmp)))
    medians = {}
    for mode, values in times.items():
        values.sort()
        medians[mode] = values[len(values) // 2]
        print(f"{mode:7s} ms a step: median {medians[mode]:.1f}, min {values[0]:.1f}, "
              f"mean {sum(values) / len(values):.1f} ({len(values)} turns)")
    print(f"one pass saves {medians['inline'] - medians['pass']:+.1f} ms a step at the median")
    after = os.getloadavg()
    print(f"load average (1/5/15 min): before {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}, after {after[0]:.1f} "
          f"{after[1]:.1f} {after[2]:.1f} on {os.cpu_count()} CPUs")
    return medians


if __name__ == "__main__":
    main()
