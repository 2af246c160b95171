"""`vak chat` (an interactive session) and `vak turn "…"` (one turn), on any model the API binds.

Both are users of the public API (``vak_context.Engine`` / ``Session``), nothing else: ``--model`` is any
spec a session binds (``local:qwen``, a bare bundled name as shorthand for ``local:<name>``, a ``.gguf``
path, ``openai:…``, ``anthropic:…``, ``gemini:…``, ``ollama:…``, ``openai-responses:…``,
``openai-compat:NAME`` with ``--base-url``), and ``--ray`` (a local cluster on 127.0.0.1) or
``--ray ADDRESS`` (a running cluster) runs the session on the folder's actors, the ProbeActor measuring the
model in the background between turns.

Each step's text streams as the model writes it, then the step's line: the plan (turns full / card / packet),
prompt and cached tokens and the prefix digest. When the turn ends its outcome is printed (and the answer,
when it is not the text just streamed: a system-authored outcome). Everything goes to the ledger (``--ledger``).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vak_context.checks import MAX_TOKENS, bounded_int, check_base_url, check_ledger_folder
from vak_context.errors import ActorError, InvalidInput, ModelServerError, ProviderError
from vak_context.names import check_name

# the choices engine.api.Engine.open takes (a unit test keeps them equal; the parser does not import the engine)
SEARCH_INDEX = ("turn-close", "search")

if TYPE_CHECKING:
    import httpx

    from vak_context import Engine, Session, Step, TurnResult

DEFAULT_LEDGER = Path("vak-data") / "ledger"
DEFAULT_MODEL = "qwen"
LOCAL = "local"


def rules_option(value: str) -> str:
    """``--rules``: a rules setting (docs/DRIFT.md), checked as the command line is read."""
    from vak_context.context.rules.setting import ENGINE_LOOP, rule_setting
    from vak_context.errors import InvalidRules

    try:
        rule_setting(value, ENGINE_LOOP)
    except InvalidRules as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    return value


RULES_HELP = ("what the turn rules may do: enforce (nudge, redo, close the turn with the engine's statement), "
              "observe (only record in the ledger what each would have done) or off, optionally with per-rule "
              "overrides, e.g. observe,freshness-check=enforce (docs/DRIFT.md)")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=DEFAULT_MODEL,
                   help="the model: local:qwen, local:smollm2 (a bare bundled name is short for local:NAME), a "
                   ".gguf path, or provider:model (openai:…, anthropic:…, gemini:…, ollama:…, openai-responses:…, "
                   "openai-compat:NAME with --base-url); keys from the provider's environment variable "
                   "(default qwen: Qwen2.5-Coder-0.5B-Instruct, local)")
    p.add_argument("--base-url", default=None, help="the server of an openai-compat: model (or a running local one)")
    p.add_argument("--workspace", type=Path, default=Path("."), help="the folder the tools may read (default .)")
    p.add_argument("--session", default=None, help="session name (default chat-<time>)")
    p.add_argument("--ledger", type=Path, default=DEFAULT_LEDGER, help="ledger folder (default: %(default)s)")
    p.add_argument("--n-ctx", type=bounded_int(1024, MAX_TOKENS), default=16384,
                   help="a bundled model's context size when --window is not given (default 16384)")
    p.add_argument("--window", type=bounded_int(1024, MAX_TOKENS), default=None,
                   help="the model's context window in tokens, over what the provider publishes")
    p.add_argument("--horizon", type=bounded_int(256, MAX_TOKENS), default=None,
                   help="the instruction horizon in tokens, until a measured profile is recorded")
    p.add_argument("--max-steps", type=bounded_int(1, 64), default=6, help="model calls per turn, 1-64 (default 6)")
    p.add_argument("--no-stream", action="store_true", help="print each answer when it is done, not as it streams")
    p.add_argument("--ray", nargs="?", const=True, default=None, metavar="ADDRESS",
                   help="run on Ray: a local cluster on 127.0.0.1, or the running cluster at ADDRESS (host:port "
                   "or ray://host:port)")
    p.add_argument("--search-index", choices=SEARCH_INDEX, default=SEARCH_INDEX[0],
                   help="when session_search's index is caught up: turn-close (default: in the background as each "
                   "turn closes) or search (at each search)")
    p.add_argument("--rules", type=rules_option, default="enforce", help=RULES_HELP + " (default enforce: the "
                   "engine is the agent here)")


class Streamer:
    """Prints each step's text as it streams, and remembers it to tell the answer was already shown."""

    def __init__(self) -> None:
        self.step_text = ""  # the current step's text, as shown

    def text(self, delta: str) -> None:
        if not self.step_text:
            print("\n  model> ", end="", flush=True)
        self.step_text += delta
        print(delta, end="", flush=True)

    def step(self, line: str) -> None:
        if self.step_text:
            print(flush=True)
        print(line, flush=True)
        self.last, self.step_text = self.step_text, ""

    last = ""


def step_line(step: Step) -> str:
    """One line per step: the plan, prompt and cached tokens, and the prefix digest."""
    f = step.fidelity
    plan = f"full {f.get('full', 0)} / card {f.get('card', 0)} / packet {f.get('packet', 0)}"
    ratio = f" ({step.cached_tokens / step.prompt_tokens:.0%} cached)" if step.prompt_tokens else ""
    calls = ", ".join(step.calls) if step.calls else "answer"
    return (f"  step {step.index + 1}: plan {plan}{' (planned)' if step.replanned else ''}; "
            f"prompt {step.prompt_tokens} tok, cached {step.cached_tokens}{ratio}; "
            f"prefix {step.prefix_digest[:12]}; → {calls}")


def model_spec(model: str) -> str:
    """The API's spec for ``--model``: a bare bundled name or a ``.gguf`` path is a ``local:`` model."""
    model = model.strip()
    if not model:
        raise InvalidInput("--model is empty: pass local:qwen, a .gguf path, or provider:model")
    provider, sep, _rest = model.partition(":")
    if not sep or (model.endswith(".gguf") and provider.lower() != LOCAL):
        return f"{LOCAL}:{model}"
    return model


def register(subparsers: Any) -> None:
    chat = subparsers.add_parser("chat", help="an interactive session through the engine, on any model",
                                 description="Chat with a model through the context engine: each line is a "
                                 "turn. Ctrl-D or /quit ends the session.")
    _common(chat)
    chat.set_defaults(func=run_chat)
    turn = subparsers.add_parser("turn", help="run one turn through the engine, on any model",
                                 description="Run one turn non-interactively and print the answer.")
    turn.add_argument("directive", help="what to ask")
    _common(turn)
    turn.set_defaults(func=run_turn)


def _checked(args: argparse.Namespace) -> tuple[Path, str, Path, str]:
    """The arguments that can be wrong, checked before Ray or a model server starts."""
    check_ledger_folder(args.ledger, "the ledger folder")
    session = args.session or time.strftime("chat-%Y%m%d-%H%M%S")
    check_name(session, "session name")
    workspace = Path(args.workspace)
    if not workspace.is_dir():
        raise InvalidInput(f"the workspace {str(workspace)!r} is not a folder: pass --workspace DIR")
    spec = model_spec(args.model)
    if args.base_url is not None:
        check_base_url(args.base_url, "--base-url")
    elif spec.partition(":")[0].lower() in ("openai-compat", "llama.cpp", "llamacpp", "vllm"):
        raise InvalidInput(f"{spec} needs its server: pass --base-url URL (e.g. http://127.0.0.1:8080/v1)")
    if isinstance(args.ray, str) and not args.ray.strip():
        raise InvalidInput("--ray ADDRESS is empty: pass host:port or ray://host:port, or --ray alone for a local cluster")
    return args.ledger, session, workspace, spec


def _open_session(engine: Engine, args: argparse.Namespace, session: str, workspace: Path, spec: str,
                  streamer: Streamer, http_client: httpx.AsyncClient | None) -> Session:
    local = spec.partition(":")[0].lower() == LOCAL
    window = args.window if args.window is not None else (args.n_ctx if local else None)
    return engine.session(session, model=spec, workspace=workspace, base_url=args.base_url, window=window,
                          horizon=args.horizon, http_client=http_client, card_tools=True,
                          on_step=lambda s: streamer.step(step_line(s)),
                          on_text=None if args.no_stream else streamer.text, max_steps=args.max_steps,
                          max_tokens=384, rules=args.rules)


def _where(args: argparse.Namespace, spec: str, session: str) -> str:
    local = spec.partition(":")[0].lower() == LOCAL and args.base_url is None
    model = f"starting {spec} on 127.0.0.1 (n_ctx {args.window or args.n_ctx})" if local else f"model {spec}"
    ray = "" if args.ray is None else (" on a local Ray (127.0.0.1)" if args.ray is True else f" on Ray at {args.ray}")
    return f"vak: {model}; session {session!r}{ray}"


def _print_answer(result: TurnResult, streamer: Streamer) -> None:
    answer = result.answer.strip() or "(no answer)"
    shown = streamer.last.strip() and streamer.last.strip() == result.answer.strip()
    print(f"\n{'' if shown else answer + chr(10)}[{result.outcome}; card {result.card.id[:12]}]\n", flush=True)
    streamer.last = ""


def run_turn(args: argparse.Namespace, *, http_client: httpx.AsyncClient | None = None) -> int:
    """`vak turn`. ``http_client``: what the model's requests go through (a caller's own; tests)."""
    from vak_context import Engine

    ledger, session, workspace, spec = _checked(args)
    print(_where(args, spec, session), flush=True)
    streamer = Streamer()

    async def go(engine: Engine) -> TurnResult:
        async with _open_session(engine, args, session, workspace, spec, streamer, http_client) as live:
            return await live.run(args.directive)

    with Engine.open(ledger, ray=args.ray, search_index=args.search_index) as engine:
        result = asyncio.run(go(engine))
    _print_answer(result, streamer)
    return 0 if result.outcome == "completed" else 1


def run_chat(args: argparse.Namespace, *, http_client: httpx.AsyncClient | None = None,
             read_line: Callable[[], Awaitable[str]] | None = None) -> int:
    """`vak chat`: a turn per line of stdin (``read_line``: where lines come from instead; tests)."""
    from vak_context import Engine

    ledger, session, workspace, spec = _checked(args)
    print(f"{_where(args, spec, session)}; ledger {ledger}; Ctrl-D or /quit ends", flush=True)
    streamer = Streamer()

    async def go(engine: Engine) -> int:
        async with _open_session(engine, args, session, workspace, spec, streamer, http_client) as live:
            print(live.describe_profile(), flush=True)
            return await chat_loop(live, read_line or (lambda: asyncio.to_thread(input, "you> ")), streamer)

    with Engine.open(ledger, ray=args.ray, search_index=args.search_index) as engine:
        return asyncio.run(go(engine))


async def chat_loop(live: Any, read_line: Callable[[], Awaitable[str]], streamer: Streamer) -> int:
    """A turn per line until EOF or ``/quit``. A turn that fails on the model's side (the provider's error
    after its retries, the server gone) is reported and the session goes on: the engine has already closed
    that turn ``failed`` in the ledger, with the error named."""
    while True:
        try:
            line = await read_line()
        except EOFError:
            print(file=sys.stdout)
            return 0
        if line.strip() in ("/quit", "/exit"):
            return 0
        if not line.strip():
            continue
        try:
            result = await live.run(line)
        except (ProviderError, ModelServerError, ActorError) as exc:
            print(f"\nvak: this turn failed: {exc}\n  It is in the session as a failed turn. Ask again, or /quit "
                  "and check the model server.", flush=True)
            continue
        _print_answer(result, streamer)
