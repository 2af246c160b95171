"""Reproducibility of the instruction horizon: full probe ladders on the real local model, one after another.

Each ladder is what ``vak probe local:<model> --n-ctx N --protocol P --out DIR`` runs (the probe's
default sampling policy, its own server, a fresh salt), with two differences for a shared 2-core
machine: the server runs ``--threads`` llama.cpp threads (default 1: with other jobs running, two
threads on two cores spin on each other and decode ten times slower), and the summary of every
ladder is appended to ``--summary`` as one JSON line (horizon, billed bracket, rungs, wall time).

    .venv/bin/python bench/probe_repro.py --model qwen --n-ctx 16384 --out /tmp/ladder1 \\
        --summary /tmp/ladders.jsonl                                    # one ladder (about 10-30 min here)
    .venv/bin/python bench/probe_repro.py --summarise /tmp/ladders.jsonl     # the table of all of them

A ladder's folder gets ``ladder.csv/.md/.png``, ``profile.json`` and ``activity.json`` (every sample).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from vak_context.agent.probe import ProbeReport, ProbeRunner, ProbeSettings
from vak_context.cli.probe_cmd import print_progress, write_ladder
from vak_context.context.capacity.profile import describe
from vak_context.providers.local.catalogue import canonical_model, local_profile_key, local_protocol
from vak_context.providers.local.server import LocalModelServer
from vak_context.providers.openai_compat import OpenAICompatProvider


async def ladder(model: str, n_ctx: int, threads: int, settings: ProbeSettings) -> ProbeReport:
    key = local_profile_key(model)
    with LocalModelServer(model, n_ctx=n_ctx, threads=threads) as server:
        print(f"started {model} at {server.base_url} (n_ctx {n_ctx}, {threads} threads)", flush=True)
        async with httpx.AsyncClient(trust_env=False, timeout=1800.0) as client:
            provider = OpenAICompatProvider(client, base_url=server.base_url,
                                            api_key=getattr(server, "api_key", None), timeout_s=1800.0)
            return await ProbeRunner(provider, key, settings=settings, on_progress=print_progress).run()


def summarise(path: Path) -> str:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    lines = ["| run | horizon (billed) | bracket (billed) | step | rungs run | requests | wall (min) |",
             "|---:|---:|:---|---:|---:|---:|---:|"]
    for i, r in enumerate(rows, 1):
        lines.append(f"| {i} | {r['horizon']:,} | {r['bracket'][0]}..{r['bracket'][1]} | {r['step']} | "
                     f"{r['rungs_run']} | {r['requests']} | {r['wall_s'] / 60:.1f} |")
    horizons = sorted(r["horizon"] for r in rows)
    if horizons:
        step = max((r["step"] or 0) for r in rows) or 1
        best = max(sum(1 for h in horizons if lo <= h <= lo + step) for lo in horizons)
        lines.append(f"\n{len(horizons)} ladders; horizons {horizons}; the most within one step "
                     f"({step} tokens) of each other: {best}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="qwen")
    parser.add_argument("--n-ctx", type=int, default=16384)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--protocol", choices=("native", "inline_fence"), default=None)
    parser.add_argument("--out", type=Path, default=Path("/tmp/ladder"))
    parser.add_argument("--summary", type=Path, default=None, help="append one JSON line per ladder here")
    parser.add_argument("--summarise", type=Path, default=None, help="print the table of a summary file and exit")
    args = parser.parse_args()
    if args.summarise is not None:
        print(summarise(args.summarise))
        return 0
    model = canonical_model(args.model)
    settings = ProbeSettings(protocol=args.protocol or local_protocol(model))
    started = time.perf_counter()
    report = asyncio.run(ladder(model, args.n_ctx, args.threads, settings))
    wall = time.perf_counter() - started
    print()
    print(describe(report.profile))
    write_ladder(report, args.out)
    (args.out / "activity.json").write_text(json.dumps(report.activity().detail, indent=1) + "\n", encoding="utf-8")
    lo, hi = report.ladder.bracket
    row: dict[str, Any] = {"out": str(args.out), "horizon": report.ladder.horizon_tokens, "bracket": [lo, hi],
                           "step": report.ladder.step, "rungs_run": len(report.ladder.outcomes),
                           "requests": report.requests, "wall_s": round(wall, 1), "n_ctx": args.n_ctx,
                           "threads": args.threads, "settings": {k: v for k, v in settings.__dict__.items()}}
    print(json.dumps(row))
    if args.summary is not None:
        with args.summary.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
