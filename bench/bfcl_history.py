"""What the engine buys on a real model: BFCL single-turn questions (simple_python, multiple, parallel; BFCL's
own AST checker) asked after K tokens of real recorded agent history, direct and through the engine, at a
given n_ctx; the model probed first (farm/bfcl/history.py; docs/BENCHMARKS.md, "What the engine buys").

    .venv/bin/python bench/bfcl_history.py --model local:qwen1.5b --entries 20      # the bundled 1.5B, n_ctx 8192
    .venv/bin/python bench/bfcl_history.py --model scripted --threshold 4096 --entries 2   # the scripted model
    .venv/bin/python bench/bfcl_history.py --model openai-compat:NAME --base-url http://127.0.0.1:8080/v1
    .venv/bin/python bench/bfcl_history.py --merge /tmp/h1 /tmp/h2          # one table from --out folders

``--entries N`` takes the first N entries of each category (the same entries at every K, interleaved by
category); ``--sizes`` the history sizes K in tokens (default 0 2000 4000 6000 7500). The model is probed
first by the engine's own probe (the ladder with its negative control, at the window ``--n-ctx``) unless
``--horizon`` gives a horizon (then the engine plans against it, and the table's "over the horizon" uses
it). ``scripted`` is :class:`~farm.bfcl.single_model.SingleTurnModel` on 127.0.0.1: BFCL's answers while a
request is at most ``--threshold`` tokens, degraded above. ``--out`` keeps every entry (``runs.jsonl``), the
probe and the table; ``--plot`` draws accuracy against request size with the horizon marked (PNG).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx

from vak_context.errors import VakError
from vak_context.farm.bfcl.history import (
    MODES,
    SIZES,
    Asked,
    cut,
    dump,
    load,
    read_history,
    run_sizes,
    table,
    writes_calls_as_text,
)
from vak_context.farm.bfcl.modes import Target
from vak_context.farm.bfcl.single import CATEGORIES, load_single
from vak_context.farm.bfcl.tasks import probe_target

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bfcl import target_for

SCRIPTED_KEY = "bfcl-scripted-key"


async def main(args: argparse.Namespace) -> int:
    if args.merge:
        runs = [r for folder in args.merge for r in load((Path(folder) / "runs.jsonl").read_text().splitlines())]
        meta = json.loads((Path(args.merge[0]) / "meta.json").read_text())
        text = table(runs, meta["horizon"], meta["window"], probe_line=meta.get("probe", ""))
        print(text)
        if args.plot:
            from vak_context.farm.bfcl.plot import plot

            plot(runs, meta["horizon"], Path(args.plot), title=meta.get("title", ""))
        return 0
    categories = args.category or list(CATEGORIES)
    entries = [e for row in zip(*(load_single(c, args.entries) for c in categories), strict=True) for e in row]
    recording = read_history(args.history, args.select)
    sizes, seen = [], dict[tuple[int, int], int]()
    for k in args.sizes:  # a K whose cut is a smaller K's (nothing more fits) would only repeat its runs
        history = cut(recording, k)
        same = seen.setdefault((history.tokens, len(history.messages)), k)
        if same != k:
            print(f"K={k:,}: its history is K={same:,}'s ({history.tokens:,} tokens, {len(history.messages)} messages: "
                  "the next closed point is larger), so it is left out", flush=True)
        else:
            sizes.append(k)
    out = Path(args.out) if args.out else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "runs.jsonl").write_text("", encoding="utf-8")
    work = Path(tempfile.mkdtemp(prefix="vak-bfcl-history-"))
    started = time.monotonic()
    with ExitStack() as stack:
        if args.model == "scripted":
            from vak_context.farm.bfcl.scripted import loopback
            from vak_context.farm.bfcl.single_model import SingleTurnModel

            upstream = stack.enter_context(loopback(SingleTurnModel(entries, args.threshold, name="scripted")))
            target = Target(upstream.base_url, "scripted", {"Authorization": f"Bearer {SCRIPTED_KEY}"}, SCRIPTED_KEY)
        else:
            target = target_for(args.model, args.base_url, args.n_ctx, stack)
        local = args.model.partition(":")[2] if args.model.startswith("local:") else ""
        async with httpx.AsyncClient(trust_env=False, timeout=args.timeout) as client:
            horizon, line, payloads = args.horizon, "", list[Any]()
            if horizon is None:
                horizon, line, payloads = await probe_target(target, client, args.n_ctx, local)
                print(line, flush=True)
            else:
                line = f"horizon {horizon:,} tokens (given, not probed)"

            def show(run: Asked) -> None:
                if out is not None:
                    with (out / "runs.jsonl").open("a", encoding="utf-8") as f:
                        f.write(dump([run]) + "\n")
                print(f"  K={run.k:,} {run.entry_id} {run.mode}: {'pass' if run.verdict.valid else 'fail'} "
                      f"({run.verdict.error_type or 'ok'}), {len(run.sent)} requests, checked one {run.size:,} "
                      f"tokens, {run.seconds:.1f} s", flush=True)

            text_calls = args.calls == "text" if args.calls else writes_calls_as_text(local)
            runs = await run_sizes(entries, sizes, recording, target, client, work, modes=args.modes,
                                   window=args.n_ctx, horizon=args.horizon, probe=payloads,
                                   max_tokens=args.max_tokens, text_calls=text_calls, on_asked=show)
    title = (f"BFCL {'/'.join(categories)} after {recording.name} history, model {args.model}, n_ctx {args.n_ctx:,}, "
             f"{args.entries} entries per category per K")
    print(f"{title}, {time.monotonic() - started:.0f} s")
    text = table(runs, horizon, args.n_ctx, probe_line=line)
    print(text)
    if out is not None:
        (out / "table.txt").write_text(text + "\n", encoding="utf-8")
        (out / "meta.json").write_text(json.dumps({"horizon": horizon, "window": args.n_ctx, "probe": line,
                                                   "title": title}) + "\n", encoding="utf-8")
    if args.plot:
        from vak_context.farm.bfcl.plot import plot

        plot(runs, horizon, Path(args.plot), title=title)
        print(f"plot: {args.plot}")
    return 0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="local:qwen1.5b",
                    help="local:<name>, openai-compat:<model> with --base-url, or scripted")
    ap.add_argument("--base-url", help="an OpenAI-compatible server's base URL (…/v1)")
    ap.add_argument("--n-ctx", type=int, default=8_192, help="the local server's context, the engine's window")
    ap.add_argument("--entries", type=int, default=20, help="the first N entries of each category")
    ap.add_argument("--category", action="append", choices=CATEGORIES, help="default: all three")
    ap.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="history sizes K in tokens")
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    ap.add_argument("--history", help="a recorded session file, its recordings one after another (default: the tau-bench airline file)")
    ap.add_argument("--select", default="", help="which recording of a file of several (a name suffix)")
    ap.add_argument("--horizon", type=int, help="plan against this horizon instead of probing first")
    ap.add_argument("--threshold", type=int, default=4_096, help="scripted: T in tokens")
    ap.add_argument("--calls", choices=("text", "native"),
                    help="read calls from the reply's text too (default: text for a bundled model whose "
                         "catalogue protocol is inline_fence, the Qwen models; else native)")
    ap.add_argument("--max-tokens", type=int, default=512, help="the reply's limit, both modes")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per request")
    ap.add_argument("--out", help="keep runs.jsonl, meta.json and table.txt here")
    ap.add_argument("--plot", help="write accuracy against request size (PNG) here")
    ap.add_argument("--merge", nargs="+", help="print one table from the --out folders of earlier runs")
    return ap.parse_args(argv)


if __name__ == "__main__":
    try:
        sys.exit(asyncio.run(main(parse())))
    except VakError as exc:
        sys.exit(f"bench/bfcl_history.py: {exc}")
