"""`vak serve-local`: run the bundled local model on 127.0.0.1 until Ctrl-C or SIGTERM; `vak serve`: the
OpenAI- and Anthropic-speaking endpoint (vak_context.serve) in front of any model, on 127.0.0.1."""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import tempfile
import threading
from pathlib import Path
from typing import Any

from vak_context.checks import MAX_TOKENS, bounded_float, bounded_int
from vak_context.cli.chat import RULES_HELP, SEARCH_INDEX, rules_option
from vak_context.errors import InvalidInput, ModelServerError
from vak_context.providers.local.catalogue import MODELS, agent_template
from vak_context.providers.local.server import LocalModelServer
from vak_context.serve.bodies import MAX_BODY_BYTES
from vak_context.serve.connections import HEAD_S
from vak_context.serve.workers import Spec, Workers, announce, shared_socket, worker_app

KEY_DIR_PREFIX = "vak-serve-"


def key_dir() -> Path:
    """A new 0700 folder for this run's key file, named for this process (``vak-serve-<pid>-...``), after
    removing those of runs whose process is gone: a SIGKILL leaves its folder behind (no handler runs), and
    the next start on this machine cleans it. A leftover is harmless meanwhile: its key opened only the
    server that died with it, and only this user can read it."""
    root = Path(tempfile.gettempdir())
    for folder in root.glob(f"{KEY_DIR_PREFIX}*-*"):
        pid = folder.name[len(KEY_DIR_PREFIX):].partition("-")[0]
        if pid.isdigit() and not _alive(int(pid)) and _ours(folder):
            shutil.rmtree(folder, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f"{KEY_DIR_PREFIX}{os.getpid()}-"))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _ours(folder: Path) -> bool:
    """A key folder this user made: a folder of ours holding nothing but the key file."""
    try:
        return (folder.is_dir() and not folder.is_symlink() and folder.stat().st_uid == os.getuid()
                and {f.name for f in folder.iterdir()} <= {"api_key"})
    except OSError:
        return False


def register(subparsers: Any) -> None:
    s: argparse.ArgumentParser = subparsers.add_parser(
        "serve",
        help="an OpenAI- and Anthropic-speaking endpoint on 127.0.0.1 in front of a model, through the engine",
        description="Serve /v1/chat/completions, /v1/messages and /v1/models on 127.0.0.1, every request "
        "projected from the ledger; the per-run API key goes to a 0600 file; upstream keys come from the "
        "environment only. docs/INTEGRATIONS.md.",
    )
    s.add_argument("--upstream", required=True, help="provider:model (openai-compat:NAME, anthropic:..., local:qwen)")
    s.add_argument("--base-url", default=None, help="the upstream's base URL (openai-compat, a running server)")
    s.add_argument("--ledger", default="ledger", help="the ledger folder (default ./ledger)")
    s.add_argument("--port", type=bounded_int(0, 65535), default=0, help="port to bind (default 0: any free port)")
    s.add_argument("--ray", nargs="?", const=True, default=None, metavar="ADDRESS",
                   help="run on Ray: a local cluster, or the one at ADDRESS")
    s.add_argument("--workers", type=bounded_int(1, 64), default=1, metavar="N",
                   help="serve workers (processes) on the one port, with --ray: each session's requests are "
                   "serialised by its lease wherever they land (default 1; docs/INTEGRATIONS.md)")
    s.add_argument("--search-index", choices=SEARCH_INDEX, default=SEARCH_INDEX[0],
                   help="when session_search's index is caught up: turn-close (default: in the background as each "
                   "turn closes) or search (at each search)")
    s.add_argument("--window", type=bounded_int(256, MAX_TOKENS), default=None,
                   help="tokens to plan against until a profile is measured (a provider that publishes none); "
                   "with local:MODEL, the context the bundled model is started with (default 8192)")
    s.add_argument("--calls", choices=("text", "native"), default=None,
                   help="how the upstream makes its tool calls: text (written in its reply, parsed from it, as the "
                   "bundled Qwen does) or native (its tool calls only; its text reaches the client whole). "
                   "Default: the protocol a probe measured, else the bundled model's own, else native")
    s.add_argument("--defer-tools", choices=("auto", "always", "never"), default="auto",
                   help="the client's tools behind find_tools (listed in the system prompt, each callable by name): "
                   "auto (default) when their schemas exceed a quarter of the model's horizon")
    s.add_argument("--rules", type=rules_option, default="observe",
                   help=RULES_HELP + " (default observe: the client is the agent; a request's x-vak-rules header "
                   "overrides it for that request)")
    s.add_argument("--max-body", type=bounded_int(1024, 1 << 30), default=MAX_BODY_BYTES, metavar="BYTES",
                   help=f"the largest request body, refused (413) as soon as more arrives (default {MAX_BODY_BYTES:,})")
    s.add_argument("--idle-timeout", type=bounded_float(0.1, 3600.0), default=HEAD_S, metavar="SECONDS",
                   help="a connection that sends no request head (or half of one), or a body that stops arriving, "
                   f"for this long is closed (the body: 408) (default {HEAD_S:g})")
    s.add_argument("--summaries", choices=("on", "off"), default="on",
                   help="packet summaries: on (default: the upstream writes each packet's summary once, a call the "
                   "client's upstream bills) or off (no such call: packets carry the engine's extract of their turns)")
    s.add_argument("--stated-pass", choices=("deterministic", "model"), default="deterministic",
                   help="what reads each closed turn's directive for what the user stated (docs/STATE.md): the "
                   "engine's patterns (default: no call) or also the upstream model (model: one call a turn, billed "
                   "by the client's upstream, after the reply is out)")
    s.set_defaults(func=run_serve)
    _register_serve_local(subparsers)


def _register_serve_local(subparsers: Any) -> None:
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
    p.add_argument("--template", default=None,
                   help="the chat template: a file in providers/local/templates, a path, or `model` (the one in the "
                   ".gguf). Default: the one under which the model's calls reach an agent as native tool calls "
                   "(for the Qwen coders chatml_fence_tools.jinja: they write ```json fences, which llama.cpp then "
                   "returns as tool_calls)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    template = args.template or agent_template(args.model)
    server = LocalModelServer(
        args.model, n_ctx=args.n_ctx, n_parallel=args.n_parallel, threads=args.threads, port=args.port,
        template=template,
    )
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    keys = key_dir()  # mode 0700
    try:
        server.start()
        # The run's API key goes to a file only this user can read, never to the terminal or a log.
        key_file = keys / "api_key"
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(server.api_key)
        print(f"serving {args.model} at {server.base_url} (OpenAI-compatible, n_ctx {args.n_ctx}, template {template})",
              flush=True)
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
        shutil.rmtree(keys, ignore_errors=True)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print(f"stopped (exit code {code})", flush=True)
    return 0


LOCAL_N_CTX = 8192  # the bundled model's context under vak serve unless --window says otherwise


def _key_file(folder: Path, key: str) -> Path:
    """The run's API key in a file only this user can read, never on the terminal or in a log."""
    key_file = folder / "api_key"
    fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(key)
    return key_file


def _exit_cleanly(signum: int, frame: Any) -> None:
    raise SystemExit(0)


def _start_workers(engine: Any, config: Any, args: argparse.Namespace, port: int) -> tuple[Workers, Any, Any]:
    """This process as the first of ``--workers`` workers (its app under the session leases, and the socket
    it takes forwarded requests on), and the others started (serve/workers.py), on the cluster this process
    joined."""
    import dataclasses

    import ray

    from vak_context.actors.factory import session_leases

    leases = session_leases(engine.folder)
    address = args.ray if isinstance(args.ray, str) else str(ray.get_runtime_context().gcs_address)
    spec = Spec(str(engine.folder), address, port, args.search_index, dataclasses.asdict(config))
    workers = Workers(spec, args.workers - 1, leases)
    try:
        workers.start()
    except BaseException:
        workers.stop()  # the ones that did start
        raise
    app, own = worker_app(engine, config, leases)
    return workers, app, own


def _print_leases(leases: Any) -> None:
    """What the session leases did in this run, for the operator (and bench/serve_workers.py)."""
    import ray

    try:
        stats = ray.get(leases.report.remote(), timeout=10)
    except Exception:  # the cluster went first: nothing to tell
        return
    print(f"vak serve: session leases: {stats.granted} granted, {stats.moved} moved between workers, "
          f"{stats.waited} waited for another worker, {stats.forwarded} forwarded to the worker holding "
          f"the session's open turn; per worker {dict(sorted(stats.workers.items()))}", flush=True)


def run_serve(args: argparse.Namespace) -> int:
    import secrets
    import signal

    import uvicorn

    from vak_context.engine.api import Engine
    from vak_context.serve.app import ServeConfig, build_app
    from vak_context.serve.connections import timed_protocol

    if args.workers > 1 and not args.ray:
        raise InvalidInput(f"--workers {args.workers} needs --ray: the workers share the ledger through its "
                           "LedgerActor and each session's lease; add --ray (a local cluster) or --ray ADDRESS")
    upstream = args.upstream
    local, base_url, upstream_key, window = _upstream(args)
    keys = key_dir()  # mode 0700
    engine = Engine.open(args.ledger, ray=args.ray, search_index=args.search_index)
    workers: Workers | None = None
    try:
        client_key = secrets.token_urlsafe(24)
        key_file = _key_file(keys, client_key)
        config = ServeConfig(upstream, base_url=base_url, upstream_key=upstream_key, client_key=client_key,
                             window=window, defer_tools=args.defer_tools, rules=args.rules, calls=args.calls,
                             summaries=args.summaries, stated_pass=args.stated_pass, max_body=args.max_body, idle_s=args.idle_timeout)
        sock = _listening(args)
        port = sock.getsockname()[1]
        root = f"http://127.0.0.1:{port}"
        app: Any
        sockets = [sock]
        if args.workers > 1:
            workers, app, own = _start_workers(engine, config, args, port)
            sockets.append(own)
            announce(port, own)
        else:
            app = build_app(engine, config)
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", http=timed_protocol(args.idle_timeout)))
        print(f"vak serve: {upstream} through the engine (ledger {args.ledger}); key in {key_file}; stop: Ctrl-C",
              flush=True)
        print(f"  OpenAI: base_url={root}/v1   Anthropic: base_url={root}", flush=True)
        # uvicorn shuts down gracefully on Ctrl-C or SIGTERM, then raises the signal again: this handler turns
        # SIGTERM into a clean exit, so the cleanup below runs (the key's folder, the engine, a local model).
        signal.signal(signal.SIGTERM, _exit_cleanly)
        server.run(sockets=sockets)
    finally:
        if workers is not None:
            workers.stop()
            _print_leases(workers.leases)
        engine.close()
        shutil.rmtree(keys, ignore_errors=True)
        if local is not None:
            local.stop()
    return 0


def _upstream(args: argparse.Namespace) -> tuple[LocalModelServer | None, str | None, str | None, int | None]:
    """The upstream's server (a bundled model started here, else None), base URL, key and window."""
    from vak_context.providers.registry import key_from_environment

    upstream, base_url, upstream_key = args.upstream, args.base_url, key_from_environment(args.upstream)
    if upstream.partition(":")[0].strip().lower() != "local" or base_url is not None:
        return None, base_url, upstream_key, args.window
    # The bundled model, started here: its per-run key stays in this process's memory.
    from vak_context.providers.local.catalogue import canonical_model

    local = LocalModelServer(canonical_model(upstream.partition(":")[2] or "qwen"), n_ctx=args.window or LOCAL_N_CTX)
    local.start()
    # The sessions plan against the context this server holds: unset, a local:<model> session would take
    # the engine's own default for a bundled model (16384), and a request past 8192 would be rejected.
    return local, local.base_url, local.api_key, local.n_ctx


def _listening(args: argparse.Namespace) -> Any:
    """The server's socket, bound here on loopback before uvicorn starts: the address printed is the one
    listening (also with --port 0), and nothing else is ever bound. With workers, each binds it too
    (serve/workers.py)."""
    import socket

    if args.workers > 1:
        sock = shared_socket(args.port)
    else:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", args.port))
    # Listening before the address is printed: a client that connects as soon as it reads it (a script,
    # serve/child.py) is queued until uvicorn accepts, never refused in between.
    sock.listen(2048)
    return sock
