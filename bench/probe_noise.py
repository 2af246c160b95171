"""How often the probe lands within one search step of a known threshold when answers are noisy.

The scripted threshold model (``tests/fakes/threshold.py``) follows the instruction iff the
billed prompt is under T tokens, and flips each instruction answer
with probability ``noise``. Its billing is not what the probe asked for: a template overhead, a
per-message cost and a tokens-per-char ratio far from the prior. For each sampling policy and noise
level, ``--runs`` seeded ladders (T drawn per run from 2,000-28,000) are run through the real
OpenAI-compatible adapter behind ``httpx.MockTransport``, and a run counts as *within one step*
when ``0 < T - horizon <= step`` (the horizon is a billed size that passed, so it is below T when
every verdict that mattered was right).

    .venv/bin/python bench/probe_noise.py              # 20 runs per cell, about 5 minutes here
    .venv/bin/python bench/probe_noise.py --runs 5     # a quick look

The figures it printed are in docs/CAPACITY.md ("Noise"); the chosen policy is the probe's default.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.fakes.threshold import ThresholdModel
from vak_context.agent.probe import ProbeRunner, ProbeSettings
from vak_context.context.capacity.profile import ProfileKey
from vak_context.providers.base import RetryPolicy
from vak_context.providers.openai_compat import OpenAICompatProvider

STEP = 64
# (label, samples cap, lead, second look)
POLICIES: tuple[tuple[str, int, int, bool], ...] = (
    ("majority of 3, stop when 2 agree (before)", 3, 2, False),
    ("up to 5, stop at a lead of 2", 5, 2, False),
    ("up to 5, lead 2, second look", 5, 2, True),
    ("up to 7, stop at a lead of 3, second look (default)", 7, 3, True),
)


async def one_run(threshold: int, noise: float, seed: int, settings: ProbeSettings) -> tuple[bool, int, int]:
    """(within one step, requests, T - horizon) of one seeded ladder."""
    model = ThresholdModel(threshold, n_ctx=32_768, noise=noise, seed=seed, tokens_per_char=0.31,
                           overhead=40, per_message=5)
    async with httpx.AsyncClient(transport=model.transport()) as client:
        provider = OpenAICompatProvider(client, base_url="http://scripted.test/v1", retry=RetryPolicy(attempts=1))
        runner = ProbeRunner(provider, ProfileKey("scripted", "threshold"), settings=settings,
                             clock=lambda: 1_800_000_000.0, salt=f"s{seed}")
        report = await runner.run()
    gap = threshold - report.ladder.horizon_tokens
    return report.ladder.passed_any and 0 < gap <= STEP, report.requests, gap


def settings_for(cap: int, lead: int, second_look: bool) -> ProbeSettings:
    return ProbeSettings(samples=cap, lead=lead, second_look=second_look, resolution=STEP, cache_rung=False)


async def measure(runs: int, noises: tuple[float, ...], only: str = "") -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for label, cap, lead, second in POLICIES:
        if only not in label:
            continue
        for noise in noises:
            hits, requests, gaps = 0, [], []
            for run in range(runs):
                rng = random.Random(f"noise-{noise}-{run}")
                threshold = rng.randint(2000, 28_000)
                ok, n, gap = await one_run(threshold, noise, run, settings_for(cap, lead, second))
                hits += ok
                requests.append(n)
                gaps.append(gap)
            rows.append({"policy": label, "noise": noise, "within": hits, "runs": runs,
                         "requests": statistics.median(requests),
                         "worst_gap": max(gaps, key=abs)})
            print(f"{label:<44} noise {noise:>4.0%}: {hits:>2}/{runs} within one step, "
                  f"median {statistics.median(requests):.0f} requests, worst T - horizon {max(gaps, key=abs)}",
                  flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--only", default="", help="run only the policies whose label contains this")
    args = parser.parse_args()
    started = time.perf_counter()
    rows = asyncio.run(measure(args.runs, (0.0, 0.1, 0.2), args.only))
    print("\n| policy | noise | within one step | median requests |\n|:---|---:|---:|---:|")
    for r in rows:
        print(f"| {r['policy']} | {float(r['noise']):.0%} | {r['within']}/{r['runs']} | {r['requests']:.0f} |")
    print(f"\n({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
