"""Which part of the engine's request decides a real model's answer after history: for each BFCL entry, the
engine's first request after K tokens of recorded history (as ``bench/bfcl_history.py``'s engine mode builds
it, through the caller's loop), sent straight to the model as is and with one part taken out or changed
(farm/bfcl/parts.py: no ``<thread>``; no ``<stance>`` either; no earlier turns; the earlier turns as their
cards in the user turn). Prints, per entry and variant, whether the reply calls the entry's function, and
the call (docs/BENCHMARKS.md, "A real model after long real history").

    .venv/bin/python bench/bfcl_parts.py --entries simple_python_0,simple_python_4,multiple_4 --k 2000
    .venv/bin/python bench/bfcl_parts.py --first 7 --k 3500 --variants "as sent,earlier turns as cards"
    .venv/bin/python bench/bfcl_parts.py --model openai-compat:NAME --base-url http://127.0.0.1:8080/v1 ...

Temperature 0, ``--max-tokens`` per reply (a call fits in 160; a reply without one is cut there). The local
model is served at ``--n-ctx`` with ``--threads`` (default 1: it can run beside a longer benchmark).
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
    MAX_STEPS,
    SESSION,
    cut,
    entry_tools,
    read_history,
    reply_calls,
    write_history,
    writes_calls_as_text,
)
from vak_context.farm.bfcl.modes import Target
from vak_context.farm.bfcl.parts import VARIANTS, variants
from vak_context.farm.bfcl.single import CATEGORIES, check, load_single

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bfcl import target_for


def entry_of(entry_id: str) -> Any:
    category, _, n = entry_id.rpartition("_")
    if category not in CATEGORIES or not n.isdigit():
        raise SystemExit(f"--entries: {entry_id!r} is not one of {', '.join(CATEGORIES)} with an index")
    return load_single(category, int(n) + 1)[int(n)]


def cards_of(folder: Path) -> list[str]:
    """The rendered cards of the session's closed turns, in order (the engine's own ``render_card``)."""
    from vak_context.context.history.turncard import render_card
    from vak_context.events.payloads import TurnCard
    from vak_context.storage.ledger import LedgerStore

    with LedgerStore(folder, readonly=True) as store:
        stored = [TurnCard.model_validate_json(e.payload) for e in store.entries(SESSION) if e.kind == "turn_card"]
    return [render_card(card, n) for n, card in enumerate(stored, start=1)]


async def engine_request(entry: Any, k: int, recording: Any, target: Target, client: httpx.AsyncClient,
                         folder: Path, *, window: int, horizon: int | None, text_calls: bool) -> tuple[dict[str, Any], list[str]]:
    """The engine's first request for ``entry`` after K tokens (nothing sent), and the earlier turns' cards."""
    import vak_context

    write_history(folder, cut(recording, k), recording)
    cards = cards_of(folder)
    with vak_context.Engine.open(folder) as engine:
        async with engine.session(SESSION, model=target.spec, base_url=target.base_url, api_key=target.api_key,
                                  http_client=client, tools=entry_tools(entry), window=window, horizon=horizon,
                                  max_steps=MAX_STEPS, calls="text" if text_calls else "native") as session:
            async with session.begin(entry.text) as turn:
                request = await turn.request()
                assert request is not None
                body = request.body if isinstance(request.body, dict) else json.loads(request.body)
    return body, cards


async def main(args: argparse.Namespace) -> int:
    entries = ([e for row in zip(*(load_single(c, args.first) for c in CATEGORIES), strict=True) for e in row]
               if args.first else [entry_of(e) for e in args.entries.split(",") if e])
    recording = read_history(args.history, args.select)
    local = args.model.partition(":")[2] if args.model.startswith("local:") else ""
    text_calls = writes_calls_as_text(local)
    work = Path(tempfile.mkdtemp(prefix="vak-bfcl-parts-"))
    with ExitStack() as stack:
        if local:
            from vak_context.providers.local.catalogue import canonical_model
            from vak_context.providers.local.server import LocalModelServer

            server = stack.enter_context(LocalModelServer(canonical_model(local), n_ctx=args.n_ctx, threads=args.threads))
            target = Target(server.base_url, local, server.auth_headers(), server.api_key)
        else:
            target = target_for(args.model, args.base_url, args.n_ctx, stack)
        async with httpx.AsyncClient(trust_env=False, timeout=args.timeout) as client:
            print(f"K={args.k:,}, model {args.model}, n_ctx {args.n_ctx:,}; call = the reply calls the entry's "
                  "function (checked: BFCL's AST checker passes it)", flush=True)
            chosen = [v.strip() for v in args.variants.split(",")] if args.variants else list(VARIANTS)
            unknown = [v for v in chosen if v not in VARIANTS]
            if unknown:
                raise SystemExit(f"--variants: {unknown} are not of {', '.join(VARIANTS)}")
            tally = {v: [0, 0] for v in chosen}
            for n, entry in enumerate(entries):
                body, cards = await engine_request(entry, args.k, recording, target, client, work / f"{n}-{entry.id}",
                                                   window=args.n_ctx, horizon=args.horizon, text_calls=text_calls)
                names = [t["function"]["name"] for t in body.get("tools", [])]
                for name, sent in variants(body, cards).items():
                    if name not in tally:
                        continue
                    sent.update(model=target.model, temperature=0.0, max_tokens=args.max_tokens)
                    started = time.monotonic()
                    answer = await client.post(f"{target.base_url}/chat/completions", json=sent, headers=target.headers)
                    answer.raise_for_status()
                    message = answer.json()["choices"][0]["message"]
                    calls = reply_calls(message, names, text_calls=text_calls)
                    passed = bool(calls) and check(entry, calls).valid
                    tally[name][0] += bool(calls)
                    tally[name][1] += passed
                    shown = f"call {calls[0][0]}({json.dumps(calls[0][1])[:80]})" if calls else \
                        f"no call: {(message.get('content') or '')[:80]!r}"
                    print(f"  {entry.id:<18} {name:<24} {shown}{' (checked)' if passed else ''} "
                          f"[{time.monotonic() - started:.0f} s]", flush=True)
    print(f"\n{'variant':<24} calls  checked  (of {len(entries)} entries)")
    for name, (called, passed) in tally.items():
        print(f"{name:<24} {called:>5}  {passed:>7}")
    return 0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="local:qwen1.5b", help="local:<name>, or openai-compat:<model> with --base-url")
    ap.add_argument("--base-url", help="an OpenAI-compatible server's base URL (…/v1)")
    ap.add_argument("--entries", default="simple_python_0,simple_python_4,multiple_4",
                    help="comma-separated BFCL entry ids (simple_python_N, multiple_N, parallel_N)")
    ap.add_argument("--first", type=int, default=0,
                    help="instead of --entries: the first N entries of each category, interleaved (as bfcl_history.py)")
    ap.add_argument("--k", type=int, default=2_000, help="history size K in tokens (stated count)")
    ap.add_argument("--n-ctx", type=int, default=4_096, help="the local server's context, the engine's window")
    ap.add_argument("--horizon", type=int, help="plan against this horizon (default: the declared window's)")
    ap.add_argument("--threads", type=int, default=1, help="the local server's threads")
    ap.add_argument("--history", help="a recorded session file (default: the tau-bench airline file)")
    ap.add_argument("--select", default="", help="which recording of a file of several (a name suffix)")
    ap.add_argument("--variants", default="", help="comma-separated, of: " + ", ".join(VARIANTS) + " (default: all)")
    ap.add_argument("--max-tokens", type=int, default=160, help="per reply")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per request")
    return ap.parse_args(argv)


if __name__ == "__main__":
    try:
        sys.exit(asyncio.run(main(parse())))
    except VakError as exc:
        sys.exit(f"bench/bfcl_parts.py: {exc}")
