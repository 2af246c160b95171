"""`vak import PATH`: import a recorded agent session into the ledger (see farm.importers)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from farm.mainjob import DEFAULT_LEDGER


def register(sub: Any) -> None:
    p = sub.add_parser(
        "import",
        help="import a recorded session: OpenAI chat messages with tool_calls, Claude Code JSONL, tau-bench, "
        "OpenHands, mini-swe-agent or SWE-agent",
    )
    p.add_argument("path", type=Path, help="the recorded session file")
    p.add_argument("--ledger", type=Path, default=DEFAULT_LEDGER, help="ledger folder (default: %(default)s)")
    p.add_argument(
        "--session",
        default=None,
        help="session name (default: from the file name); a prefix when the file holds several sessions",
    )
    p.add_argument(
        "--tokens-per-char",
        type=float,
        default=0.25,
        help="the model's tokens per character, for turn sizes no receipt covers (default: %(default)s)",
    )
    p.add_argument("--no-cards", action="store_true", help="do not close turns with TurnCards or index them")
    p.add_argument(
        "--skip-bad-lines",
        action="store_true",
        help="skip JSONL lines that are not JSON (counted in the report)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=_import)


class _Progress:
    """One status line on stderr, rewritten at most a few times a second."""

    def __init__(self) -> None:
        self.last = 0.0
        self.sessions = 0
        self.current = ""

    def __call__(self, session: str, done: int, total: int) -> None:
        if session != self.current:
            self.current, self.sessions = session, self.sessions + 1
        now = time.monotonic()
        if done == total or now - self.last > 0.25:
            self.last = now
            line = f"  session {self.sessions}: {session[:60]} {done}/{total} events"
            print(f"\r{line:<90}", end="", file=sys.stderr)

    def done(self) -> None:
        if self.sessions:
            print(file=sys.stderr)


def _import(args: argparse.Namespace) -> int:
    from farm.importers import import_path
    from storage.cardindex import CardIndex
    from storage.ledger import LedgerStore

    progress = None if args.quiet else _Progress()
    with LedgerStore(args.ledger) as store:
        report = import_path(
            store,
            args.path,
            session=args.session,
            tokens_per_char=args.tokens_per_char,
            close_turns=not args.no_cards,
            card_index=None if args.no_cards else CardIndex(args.ledger),
            progress=progress,
            skip_bad_lines=args.skip_bad_lines,
        )
    if progress is not None:
        progress.done()
    print(report.summary())
    for s in report.sessions[:20]:
        print(f"  {s.session}: {s.turns} turns, {s.tool_calls} tool calls, {s.entries} entries")
    if len(report.sessions) > 20:
        print(f"  … and {len(report.sessions) - 20} more sessions")
    return 0
