"""`vak serve-local`: run the bundled local model on 127.0.0.1 until Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import signal
import threading
from typing import Any

from farm.cli_checks import MAX_TOKENS, bounded_int
from providers.localserver import MODELS, LocalModelServer
from vak.errors import ModelServerError


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "serve-local",
        help="serve a bundled local model (llama.cpp) on 127.0.0.1",
        description="Start llama.cpp's OpenAI-compatible server for a bundled model on 127.0.0.1, print "
        "its URL, and stop it cleanly on Ctrl-C or SIGTERM.",
    )
    p.add_argument("--model", default="smollm2", help=f"one of {', '.join(sorted(MODELS))}, or a .gguf path")
    p.add_argument("--port", type=bounded_int(0, 65535), default=0, help="port to bind, 0-65535 (default 0: any free port)")
    p.add_argument("--n-ctx", type=bounded_int(256, MAX_TOKENS), default=8192,
                   help="context size in tokens (default 8192)")
    p.add_argument("--n-parallel", type=bounded_int(1, 64), default=1,
                   help="parallel slots, 1-64; each gets n_ctx / n_parallel")
    p.add_argument("--threads", type=bounded_int(1, 512), default=None, help="CPU threads, 1-512 (default: up to 4)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    server = LocalModelServer(
        args.model, n_ctx=args.n_ctx, n_parallel=args.n_parallel, threads=args.threads, port=args.port
    )
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        server.start()
        print(f"serving {args.model} at {server.base_url} (OpenAI-compatible, n_ctx {args.n_ctx})", flush=True)
        print(f"health: {server.root_url}/health   props: {server.root_url}/props   stop: Ctrl-C", flush=True)
        while not stop.wait(0.5):
            if not server.running():
                raise ModelServerError(
                    f"the local model server exited on its own. Last log lines:\n{server.log_tail()}"
                )
    finally:
        code = server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print(f"stopped (exit code {code})", flush=True)
    return 0
