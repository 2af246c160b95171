"""`vak chat` (an interactive session) and `vak turn "…"` (one turn), live on a local model.

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
from typing import Any

from vak_context.checks import MAX_TOKENS, bounded_int, check_ledger_folder
from vak_context.errors import ActorError, InvalidInput, ModelServerError, ProviderError
from vak_context.names import check_name

DEFAULT_LEDGER = Path("vak-data") / "ledger"


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="qwen", help="a bundled local model (qwen, smollm2) or a .gguf path "
                   "(default qwen: Qwen2.5-Coder-0.5B-Instruct)")
    p.add_argument("--workspace", type=Path, default=Path("."), help="the folder the tools may read (default .)")
    p.add_argument("--session", default=None, help="session name (default chat-<time>)")
    p.add_argument("--ledger", type=Path, default=DEFAULT_LEDGER, help="ledger folder (default: %(default)s)")
    p.add_argument("--n-ctx", type=bounded_int(1024, MAX_TOKENS), default=16384,
                   help="the local server's context size (default 16384)")
    p.add_argument("--max-steps", type=bounded_int(1, 64), default=6, help="model calls per turn, 1-64 (default 6)")
    p.add_argument("--no-stream", action="store_true", help="print each answer when it is done, not as it streams")


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


def register(subparsers: Any) -> None:
    chat = subparsers.add_parser("chat", help="an interactive session on a local model, through the engine",
                                 description="Chat with a local model through the context engine: each line is a "
                                 "turn. Ctrl-D or /quit ends the session.")
    _common(chat)
    chat.set_defaults(func=run_chat)
    turn = subparsers.add_parser("turn", help="run one turn on a local model, through the engine",
                                 description="Run one turn non-interactively and print the answer.")
    turn.add_argument("directive", help="what to ask")
    _common(turn)
    turn.set_defaults(func=run_turn)


def _checked(args: argparse.Namespace) -> tuple[Path, str, Path]:
    """The arguments that can be wrong, checked before the model server starts."""
    check_ledger_folder(args.ledger, "the ledger folder")
    session = args.session or time.strftime("chat-%Y%m%d-%H%M%S")
    check_name(session, "session name")
    workspace = Path(args.workspace)
    if not workspace.is_dir():
        raise InvalidInput(f"the workspace {str(workspace)!r} is not a folder: pass --workspace DIR")
    return args.ledger, session, workspace


def _live(args: argparse.Namespace, ledger: Path, session: str, workspace: Path, streamer: Streamer) -> Any:
    from vak_context.engine.live import LiveSession, step_line

    return LiveSession(ledger=ledger, session=session, workspace=workspace, model=args.model, n_ctx=args.n_ctx,
                       max_steps=args.max_steps, on_step=lambda s: streamer.step(step_line(s)),
                       on_text=None if args.no_stream else streamer.text)


def _print_answer(report: Any, streamer: Streamer) -> None:
    answer = report.answer.strip() or "(no answer)"
    shown = streamer.last.strip() and streamer.last.strip() == report.answer.strip()
    print(f"\n{'' if shown else answer + chr(10)}[{report.outcome}; card {report.card_id[:12]}]\n", flush=True)
    streamer.last = ""


def run_turn(args: argparse.Namespace) -> int:
    ledger, session, workspace = _checked(args)

    async def go() -> int:
        print(f"vak: starting {args.model} on 127.0.0.1 (n_ctx {args.n_ctx}); session {session!r}", flush=True)
        streamer = Streamer()
        async with _live(args, ledger, session, workspace, streamer) as live:
            report = await live.turn(args.directive)
        _print_answer(report, streamer)
        return 0 if report.outcome == "completed" else 1

    return asyncio.run(go())


def run_chat(args: argparse.Namespace) -> int:
    ledger, session, workspace = _checked(args)

    async def go() -> int:
        print(f"vak: starting {args.model} on 127.0.0.1 (n_ctx {args.n_ctx}); session {session!r}; "
              f"ledger {ledger}; Ctrl-D or /quit ends", flush=True)
        streamer = Streamer()
        async with _live(args, ledger, session, workspace, streamer) as live:
            print(live.describe_profile(), flush=True)
            return await chat_loop(live, lambda: asyncio.to_thread(input, "you> "), streamer)

    return asyncio.run(go())


async def chat_loop(live: Any, read_line: Callable[[], Awaitable[str]], streamer: Streamer) -> int:
    """A turn per line until EOF or ``/quit``. A turn that fails on the model's side (the provider's error
    after its retries, the server gone) is reported and the session goes on: the loop has already closed
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
            report = await live.turn(line)
        except (ProviderError, ModelServerError, ActorError) as exc:
            print(f"\nvak: this turn failed: {exc}\n  It is in the session as a failed turn. Ask again, or /quit "
                  "and check the model server.", flush=True)
            continue
        _print_answer(report, streamer)
