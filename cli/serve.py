"""`vak serve-local`: run the bundled local model on 127.0.0.1 until Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import tempfile
import threading
from pathlib import Path
from typing import Any

from vak_context.checks import MAX_TOKENS, bounded_int
from vak_context.errors import ModelServerError
from vak_context.providers.local.catalogue import MODELS
from vak_context.providers.local.server import LocalModelServer


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
    key_dir = Path(tempfile.mkdtemp(prefix="vak-serve-"))  # mode 0700
    try:
        server.start()
        # The run's API key goes to a file only this user can read, never to the terminal or a log.
        key_file = key_dir / "api_key"
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(server.api_key)
        print(f"serving {args.model} at {server.base_url} (OpenAI-compatible, n_ctx {args.n_ctx})", flush=True)
        print(f"health: {server.root_url}/health   props: {server.root_url}/props   stop: Ctrl-C", flush=True)
        print(f"api key (Bearer, this run only): in {key_file}; for vak: export OPENAI_COMPAT_API_KEY=$(cat {key_file})",
              flush=True)
        while not stop.wait(0.5):
            if not server.running():
                raise ModelServerError(
                    f"the local model server exited on its own. Last log lines:\n{server.log_tail()}"
                )
    finally:
        code = server.stop()
        shutil.rmtree(key_dir, ignore_errors=True)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print(f"stopped (exit code {code})", flush=True)
    return 0
