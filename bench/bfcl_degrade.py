"""What the engine buys: BFCL v4 multi-turn (multi_turn_base, multi_turn_long_context; BFCL's own checker)
against a scripted model that plays the ground truth while a request is at most T tokens and degrades above
it (farm/bfcl/scripted.py: no call and malformed calls, alternately), at each T direct, through the engine
(the caller's loop) and through ``vak serve``, the engine knowing T only from its own probe of the model
(farm/bfcl/degrade.py; docs/BENCHMARKS.md, "What the engine buys").

    .venv/bin/python bench/bfcl_degrade.py                                  # all 200 entries, T = 4k, 8k, 16k
    .venv/bin/python bench/bfcl_degrade.py --entries 3 --threshold 4096     # a quick look
    .venv/bin/python bench/bfcl_degrade.py --threshold 8192 --out /tmp/t8k   # one T (table.txt, runs.jsonl)
    .venv/bin/python bench/bfcl_degrade.py --merge /tmp/t4k /tmp/t8k /tmp/perfect   # one table from several runs

The reference row ("perfect", T none) is the same model with no threshold, direct: what the engine should
reach at every T. Each run prints every entry as it ends; ``--out`` also keeps the table and every entry's
verdict and request sizes (``runs.jsonl``), which ``--merge`` reads back.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

from vak_context.errors import VakError
from vak_context.farm.bfcl.degrade import (
    MODES,
    THRESHOLDS,
    ProbeFigure,
    ThresholdRun,
    dump,
    run_threshold,
    table,
)
from vak_context.farm.bfcl.modes import EntryRun, Sent, Target
from vak_context.farm.bfcl.multiturn import CATEGORIES, Verdict, load_entries


def progress(threshold: int | None, out: Path | None) -> Callable[[EntryRun], None]:
    """Each entry as it ends: a line printed, and (``out``) a line of ``T<n>.jsonl``, so that a run stopped
    early keeps every entry it finished."""
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / f"T{threshold or 'none'}.jsonl").write_text("", encoding="utf-8")

    def show(run: EntryRun) -> None:
        if out is not None:
            with (out / f"T{threshold or 'none'}.jsonl").open("a", encoding="utf-8") as f:
                f.write(dump([ThresholdRun(threshold, None, [run])]) + "\n")
        sizes = [s.prompt_tokens for s in run.sent]
        print(f"  T={threshold or 'none'} {run.entry_id} {run.mode}: {'pass' if run.verdict.valid else 'fail'} "
              f"({run.verdict.error_type or 'ok'}), {len(sizes)} requests, max {max(sizes, default=0):,} tokens, "
              f"{run.seconds:.1f} s", flush=True)
    return show


async def main(args: argparse.Namespace) -> int:
    if args.merge:
        runs = [r for folder in args.merge for r in load(Path(folder))]
        print(table(runs))
        return 0
    categories = args.category or list(CATEGORIES)
    # the categories interleaved, entry by entry: a run stopped early has as many of each
    entries = [e for row in zip(*(load_entries(c, args.entries) for c in categories), strict=True) for e in row]
    thresholds: list[int | None] = list(args.threshold or THRESHOLDS)
    if args.perfect:
        thresholds.insert(0, None)
    started, runs = time.monotonic(), []
    for threshold in thresholds:
        out = Path(args.out) if args.out else None
        run = await run_threshold(entries, threshold, modes=args.modes, on_entry=progress(threshold, out),
                                  on_probe=lambda p, t=threshold, o=out: probed(t, p, o), start_serve=start_serve)
        runs.append(run)
    print(f"BFCL v4 multi-turn against the degrading scripted model, first {args.entries} entries per category, "
          f"{time.monotonic() - started:.0f} s")
    print(table(runs))
    if args.out:
        (Path(args.out) / "table.txt").write_text(table(runs) + "\n", encoding="utf-8")
    return 0


def start_serve(stack: ExitStack, ledger: Path, upstream: Target) -> Target:
    """``vak serve`` as a child process in front of the upstream, on ``ledger`` (which holds the probe)."""
    from vak_context.serve.child import serve_child

    child = stack.enter_context(serve_child(f"openai-compat:{upstream.model}", ledger=ledger,
                                            base_url=upstream.base_url,
                                            env={"OPENAI_COMPAT_API_KEY": upstream.api_key or ""}))
    return Target(child.base_url, upstream.model, {"Authorization": f"Bearer {child.key}"}, child.key)


def probed(threshold: int | None, probe: ProbeFigure, out: Path | None) -> None:
    print(f"T={threshold or 0:,}: {probe.line()}", flush=True)
    if out is not None:
        (out / f"T{threshold or 'none'}.probe.json").write_text(json.dumps(
            {"horizon": probe.horizon, "clean": probe.clean_controls, "rungs": probe.rungs}) + "\n", encoding="utf-8")


def load(folder: Path) -> list[ThresholdRun]:
    """The runs ``--out`` kept in ``folder`` (one per T)."""
    out = []
    for path in sorted(folder.glob("T*.jsonl")):
        lines = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
        threshold = lines[0]["T"] if lines else None
        probe_path = path.with_suffix(".probe.json")
        probe = None
        if probe_path.exists():
            p = json.loads(probe_path.read_text(encoding="utf-8"))
            probe = ProbeFigure(p["horizon"], p["clean"], tuple(tuple(r) for r in p["rungs"]))
        runs = [EntryRun(x["entry"], x["category"], x["mode"], Verdict(x["passed"], x["error"]),
                         [Sent(200, t, 0, False) for t in x["sent"]]) for x in lines]
        out.append(ThresholdRun(threshold, probe, runs))
    return out


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--entries", type=int, default=200, help="the first N entries of each category (default all 200)")
    ap.add_argument("--category", action="append", choices=CATEGORIES, help="default: both")
    ap.add_argument("--threshold", type=int, action="append", help="T in tokens, repeatable (default 4096 8192 16384)")
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    ap.add_argument("--no-perfect", dest="perfect", action="store_false", help="skip the reference (no threshold)")
    ap.add_argument("--out", help="keep each T's entries (T<n>.jsonl, T<n>.probe.json) and the table here")
    ap.add_argument("--merge", nargs="+", help="print one table from the --out folders of earlier runs")
    return ap.parse_args(argv)


if __name__ == "__main__":
    try:
        sys.exit(asyncio.run(main(parse())))
    except VakError as exc:
        sys.exit(f"bench/bfcl_degrade.py: {exc}")
