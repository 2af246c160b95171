"""What majority-of-three costs: the probe ladder at 3 samples per rung against 1, on the real local model.

Spec §1: "the second and third samples hit the prefix cache, so they cost decode time only". Three
ladders run side by side in one run against one llama.cpp server (SmolLM2 by default) over the same
rung sizes, each with one negative control per rung:

* single sample per rung: the baseline;
* majority of 3, stopping once two samples agree (the third cannot change the verdict);
* majority of 3, always taking all three samples;
* the probe's default: up to 7 samples, stopping at a lead of 3 (docs/CAPACITY.md "Noise").

Every request counts, the max_tokens=1 sizing shot that lands each rung's prompt on its target too
(it is where the rung's prefill happens).

Each ladder has its own salt at the head of the system prompt and its own server slot (the server
runs one slot per ladder, each with the full ``n_ctx``), so none reuses another's cached prefix
while each keeps its own, as a real probe does from rung to rung. The ladders are interleaved rung
by rung, in rotating order, so a burst of load from elsewhere on a shared machine hits all three.

Three figures per ladder: wall time; llama.cpp's own compute time (``timings.prompt_ms`` +
``predicted_ms``); and the work (tokens prefilled, tokens decoded) priced at the median prefill and
decode rates of every request in the run, which is what the ladder costs with the machine's load
taken out. The goal is judged on that last one: majority of 3 <= 1.3x the single-sample ladder.

    .venv/bin/python bench/probe_cost.py                 # n_ctx 4096, rungs 921/1842/3686, 3 repeats
    .venv/bin/python bench/probe_cost.py --quick         # n_ctx 2048, one repeat
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from vak_context.agent.probe import ProbeRunner, ProbeSettings
from vak_context.context.capacity.ladder import DEFAULT_CAP, DEFAULT_LEAD, SampleOutcome, plan_rungs
from vak_context.providers.local.catalogue import local_profile_key
from vak_context.providers.openai_compat import OpenAICompatProvider

# (label, samples per rung (the cap), stop once settled, lead that settles)
LADDERS: tuple[tuple[str, int, bool, int], ...] = (
    ("single sample", 1, False, 1),
    ("majority of 3 (stops when 2 agree)", 3, True, 2),
    ("majority of 3 (always 3 samples)", 3, False, 2),
    ("probe default (up to 7, stops at a lead of 3)", DEFAULT_CAP, True, DEFAULT_LEAD),
)


@dataclass
class Tally:
    wall_s: float = 0.0
    samples: list[SampleOutcome] = field(default_factory=list)

    @property
    def server_s(self) -> float:
        return sum((s.prefill_ms or 0.0) + (s.decode_ms or 0.0) for s in self.samples) / 1000.0

    @property
    def prefilled(self) -> int:
        return sum((s.prompt_tokens or 0) - s.cached_tokens for s in self.samples)

    @property
    def decoded(self) -> int:
        return sum(s.output_tokens for s in self.samples)

    def priced_s(self, prefill_tps: float, decode_tps: float) -> float:
        return self.prefilled / prefill_tps + self.decoded / decode_tps


async def one_repeat(client: httpx.AsyncClient, url: str, model: str, sizes: list[int], rep: int,
                     api_key: str | None = None) -> list[Tally]:
    runners = []
    for samples, early, lead in ((s, e, ld) for _, s, e, ld in LADDERS):
        provider = OpenAICompatProvider(client, base_url=url, api_key=api_key, timeout_s=900.0)
        settings = ProbeSettings(samples=samples, lead=lead, controls=1, cache_rung=False, decide_early=early)
        runner = ProbeRunner(provider, local_profile_key(model), settings=settings, salt=f"bench-{time.time_ns()}")
        await runner.cache_rung(256)  # calibrates tokens per char, untimed
        runners.append(runner)
    tallies = [Tally() for _ in LADDERS]
    for r, size in enumerate(sizes):
        order = list(range(len(LADDERS)))
        shift = (rep + r) % len(order)
        for i in order[shift:] + order[:shift]:  # rotate who goes first
            start = time.perf_counter()
            already = len(runners[i].sent)
            await runners[i].rung(size)
            tallies[i].wall_s += time.perf_counter() - start
            tallies[i].samples.extend(runners[i].sent[already:])  # the sizing shots prefill; count them
    return tallies


async def bench(url: str, model: str, n_ctx: int, repeats: int, api_key: str | None = None) -> float:
    sizes = list(plan_rungs(n_ctx, first=1024))
    print(f"model {model}, n_ctx {n_ctx} per slot, rungs {sizes}, 1 control per rung, max_tokens 32, "
          f"{repeats} repeat(s), {os.cpu_count()} CPUs")
    runs: list[list[Tally]] = []
    async with httpx.AsyncClient(trust_env=False) as client:
        for rep in range(repeats):
            tallies = await one_repeat(client, url, model, sizes, rep, api_key)
            runs.append(tallies)
            print(f"  repeat {rep + 1}: " + ", ".join(f"{t.wall_s:.1f} s" for t in tallies) + " wall", flush=True)
    every = [s for run in runs for t in run for s in t.samples]
    prefill_tps = statistics.median(((s.prompt_tokens or 0) - s.cached_tokens) / (s.prefill_ms / 1000.0)
                                    for s in every if s.prefill_ms and (s.prompt_tokens or 0) - s.cached_tokens >= 64)
    decode_tps = statistics.median(s.output_tokens / (s.decode_ms / 1000.0)
                                   for s in every if s.decode_ms and s.output_tokens >= 8)

    def median(i: int, value: str) -> float:
        if value == "priced_s":
            return statistics.median(run[i].priced_s(prefill_tps, decode_tps) for run in runs)
        return float(statistics.median(getattr(run[i], value) for run in runs))

    print(f"\nrates in this run (median per request): prefill {prefill_tps:.0f} tok/s, decode {decode_tps:.1f} tok/s")
    print("\n| ladder | requests | tokens prefilled | tokens decoded | wall (s) | server compute (s) "
          "| work at median rates (s) | ratio (wall) | ratio (work) |")
    print("|:---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for i, (label, _, _, _) in enumerate(LADDERS):
        requests = statistics.median(len(run[i].samples) for run in runs)
        print(f"| {label} | {requests:.0f} | {median(i, 'prefilled'):.0f} | {median(i, 'decoded'):.0f} | "
              f"{median(i, 'wall_s'):.1f} | {median(i, 'server_s'):.1f} | {median(i, 'priced_s'):.1f} | "
              f"{median(i, 'wall_s') / median(0, 'wall_s'):.2f}x | {median(i, 'priced_s') / median(0, 'priced_s'):.2f}x |")
    ratio = median(1, "priced_s") / median(0, "priced_s")
    print(f"\n(medians of {repeats} repeats) the probe's majority-of-3 ladder costs {ratio:.2f}x the single-sample "
          f"ladder in work ({median(1, 'wall_s') / median(0, 'wall_s'):.2f}x wall); goal <= 1.3x: "
          f"{'met' if ratio <= 1.3 else 'NOT met'}. Always taking 3 samples: "
          f"{median(2, 'priced_s') / median(0, 'priced_s'):.2f}x. The probe's default: "
          f"{median(3, 'priced_s') / median(0, 'priced_s'):.2f}x.")
    return ratio


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--n-ctx", type=int, default=4096, help="tokens per slot (one slot per ladder)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="n_ctx 2048 and one repeat")
    args = parser.parse_args()
    n_ctx, repeats = (2048, 1) if args.quick else (args.n_ctx, args.repeats)
    from vak_context.providers.local.server import LocalModelServer

    with LocalModelServer(args.model, n_ctx=n_ctx * len(LADDERS), n_parallel=len(LADDERS)) as server:
        asyncio.run(bench(server.base_url, args.model, n_ctx, repeats, server.api_key))
    return 0


if __name__ == "__main__":
    sys.exit(main())
