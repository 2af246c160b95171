"""BFCL v4 multi-turn, a third-party benchmark: the first N entries of multi_turn_base and
multi_turn_long_context (fixed order, so runs compare), direct and through the engine, scored by BFCL's own
checker (farm/bfcl/multiturn.py, farm/bfcl/modes.py, farm/bfcl/report.py; docs/BENCHMARKS.md).

    .venv/bin/python bench/bfcl.py --entries 3                       # the bundled local:qwen, n_ctx 16384
    .venv/bin/python bench/bfcl.py --entries 3 --model openai-compat:NAME --base-url http://127.0.0.1:8080/v1
    .venv/bin/python bench/bfcl.py --entries 3 --modes direct engine             # without vak serve
    VAK_SERVE_KEY=... .venv/bin/python bench/bfcl.py --via http://127.0.0.1:8765/v1  # a vak serve already running

**direct**: the whole history and every tool sent as they are, as BFCL's OpenAI FC handler does.
**engine**: each entry its own session in a fresh ledger, the public API's caller's loop, the entry's
functions the caller's tools (deferred). **serve**: the direct client pointed at ``vak serve``'s
OpenAI-compatible base URL, each entry naming its session with the ``x-vak-session`` header: a ``vak serve``
this script starts as a child process in front of the same model server (``--upstream
openai-compat:<model> --base-url <its URL>``, a fresh ledger per run, ``--window`` the n_ctx), or the one at
``--via URL`` (its key from ``$VAK_SERVE_KEY``). The default modes are direct and serve. ``local:<name>`` starts the bundled model once on 127.0.0.1 for both modes (``[local]`` extra);
an ``openai-compat:`` model's key is read from ``OPENAI_API_KEY`` when set.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import httpx

from vak_context.errors import InvalidInput, VakError
from vak_context.farm.bfcl.modes import EntryRun, Sent, Target
from vak_context.farm.bfcl.multiturn import CATEGORIES
from vak_context.farm.bfcl.report import ALL_MODES, figures, run_categories, table


def target_for(model: str, base_url: str | None, n_ctx: int, stack: ExitStack) -> Target:
    provider, name = model.split(":", 1) if ":" in model else (model, "")
    if provider == "local":
        from vak_context.providers.local.catalogue import canonical_model
        from vak_context.providers.local.server import LocalModelServer

        server = stack.enter_context(LocalModelServer(canonical_model(name or "qwen"), n_ctx=n_ctx))
        return Target(server.base_url, name or "qwen", server.auth_headers(), server.api_key)
    if provider in ("openai-compat", "openai") and base_url:
        key = os.environ.get("OPENAI_API_KEY")
        return Target(base_url.rstrip("/"), name, {"Authorization": f"Bearer {key}"} if key else {}, key)
    raise InvalidInput(f"--model {model!r}: both modes speak OpenAI chat completions; use local:<name> or "
                       "openai-compat:<model> with --base-url")


def served(args: argparse.Namespace, target: Target, stack: ExitStack) -> tuple[Target, Path | None]:
    """vak serve for the mode "serve": the one at ``--via``, or a child started in front of ``target``
    (and its ledger, where the per-call receipts are read from)."""
    if args.via:
        key = os.environ.get("VAK_SERVE_KEY")
        return Target(args.via.rstrip("/"), target.model, {"Authorization": f"Bearer {key}"} if key else {}, key), None
    from vak_context.serve.child import serve_child

    ledger = stack.enter_context(tempfile.TemporaryDirectory(prefix="vak-bfcl-serve-"))
    child = stack.enter_context(serve_child(f"openai-compat:{target.model}", ledger=Path(ledger) / "ledger",
                                            base_url=target.base_url, window=args.n_ctx,
                                            env={"OPENAI_COMPAT_API_KEY": target.api_key or ""}))
    print(f"vak serve at {child.base_url} in front of {target.base_url}", flush=True)
    return Target(child.base_url, target.model, {"Authorization": f"Bearer {child.key}"}, child.key), Path(ledger) / "ledger"


def per_upstream_call(runs: list[EntryRun], ledger: Path) -> None:
    """The serve mode's requests as the upstream saw them: one per model call, from the receipts vak serve's
    engine wrote (the client's usage sums every upstream call of a client request, engine-answered steps
    included, so its sizes say nothing about the horizon). Rejected requests leave no receipt: kept."""
    from vak_context.events.envelope import Mapper
    from vak_context.storage.ledger import LedgerStore

    mapper = Mapper()
    with LedgerStore(ledger, readonly=True) as store:
        for run in (r for r in runs if r.mode == "serve" and r.session):
            usages = [mapper.payload_of(e).usage for e in store.entries(run.session) if e.kind == "receipt"]
            refused = [s for s in run.sent if s.status != 200]
            run.sent = [Sent(200, u.prompt_tokens, u.cache_read_tokens, False) for u in usages] + refused


def progress(run: EntryRun) -> None:
    prompts = [s.prompt_tokens for s in run.sent]
    print(f"  {run.category} {run.entry_id} {run.mode}: {'pass' if run.verdict.valid else 'fail'} "
          f"({run.verdict.error_type or 'ok'}), {len(prompts)} requests, {sum(prompts):,} prompt tokens, "
          f"{run.seconds:.0f} s", flush=True)


async def main(args: argparse.Namespace) -> int:
    categories = args.category or list(CATEGORIES)
    with ExitStack() as stack:
        target = target_for(args.model, args.base_url, args.n_ctx, stack)
        via, serve_ledger = served(args, target, stack) if "serve" in args.modes else (None, None)
        started = time.monotonic()
        async with httpx.AsyncClient(timeout=args.timeout) as client:
            run = await run_categories(categories, args.entries, target, client, modes=args.modes,
                                       window=args.n_ctx, horizon=args.horizon, via=via, on_entry=progress)
        if serve_ledger is not None:  # read while it still exists (a temporary folder of the stack)
            per_upstream_call(run.runs, serve_ledger)
    print(f"BFCL v4 multi-turn, first {args.entries} entries per category, model {args.model}, "
          f"n_ctx {args.n_ctx}, {time.monotonic() - started:.0f} s")
    print(table(figures(run), run.horizon))
    return 0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--entries", type=int, default=3, help="the first N entry ids of each category")
    ap.add_argument("--category", action="append", choices=CATEGORIES, help="default: both")
    ap.add_argument("--modes", nargs="+", default=["direct", "serve"], choices=ALL_MODES)
    ap.add_argument("--model", default="local:qwen", help="local:<name>, or openai-compat:<model> with --base-url")
    ap.add_argument("--base-url", help="an OpenAI-compatible server's base URL (…/v1)")
    ap.add_argument("--n-ctx", type=int, default=16_384, help="the local server's context, the engine's window")
    ap.add_argument("--horizon", type=int, help="plan against this horizon (default: the session's profile)")
    ap.add_argument("--via", help="a running vak serve's base URL for the mode 'serve' (its key in $VAK_SERVE_KEY); "
                    "default: one started here")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per request")
    return ap.parse_args(argv)


if __name__ == "__main__":
    try:
        sys.exit(asyncio.run(main(parse())))
    except VakError as exc:
        sys.exit(f"bench/bfcl.py: {exc}")
