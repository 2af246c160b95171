"""`vak import PATH`: import a recorded agent session into the ledger (see vak_context.importers)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from vak_context.cli.mainjob import DEFAULT_LEDGER
from vak_context.context.capacity.tokens import PRIOR_TOKENS_PER_CHAR


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
        type=_tokens_per_char,
        default=PRIOR_TOKENS_PER_CHAR,
        help="the model's tokens per character, for turn sizes no receipt covers: a number from 0.01 to 4 "
        "(default: %(default)s)",
    )
    p.add_argument("--no-cards", action="store_true", help="do not close turns with TurnCards or index them")
    p.add_argument(
        "--skip-bad-lines",
        action="store_true",
        help="skip JSONL lines that are not JSON, or not a JSON object (counted in the report)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=_import)


def _tokens_per_char(text: str) -> float:
    """argparse type: a finite ratio in the importer's range; anything else is a one-line usage error."""
    from vak_context.errors import InvalidInput
    from vak_context.importers import check_tokens_per_char

    try:
        return check_tokens_per_char(float(text))
    except (ValueError, InvalidInput) as exc:
        message = (
            str(exc)
            if isinstance(exc, InvalidInput)
            else f"{text!r} is not a number; give one from 0.01 to 4"
        )
        raise argparse.ArgumentTypeError(message) from exc


PROGRESS_INTERVAL_S = 0.25  # a rewritten status line more often than this only flickers


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
        if done == total or now - self.last > PROGRESS_INTERVAL_S:
            self.last = now
            line = f"  session {self.sessions}: {session[:60]} {done}/{total} events"
            print(f"\r{line:<90}", end="", file=sys.stderr)

    def done(self) -> None:
        if self.sessions:
            print(file=sys.stderr)


def _import(args: argparse.Namespace) -> int:
    """Read and dry-run the whole file first: a file that cannot be imported leaves the ledger folder
    exactly as it was (not even created)."""
    from vak_context.importers import existing_sessions_at, plan_import, refuse_existing, write_import
    from vak_context.storage.cardindex import CardIndex
    from vak_context.storage.ledger import LedgerStore

    plan = plan_import(
        args.path,
        session=args.session,
        tokens_per_char=args.tokens_per_char,
        close_turns=not args.no_cards,
        skip_bad_lines=args.skip_bad_lines,
    )
    refuse_existing(existing_sessions_at(args.ledger, plan.names), args.ledger)
    progress = None if args.quiet else _Progress()
    cards = None if args.no_cards else CardIndex(args.ledger)
    try:
        with LedgerStore(args.ledger) as store:
            report = write_import(store, plan, card_index=cards, progress=progress)
    finally:
        if cards is not None:
            cards.close()  # commits what it buffered: another process (the next `vak chat`) reads it
    if progress is not None:
        progress.done()
    print(report.summary())
    for s in report.sessions[:20]:
        print(f"  {s.session}: {s.turns} turns, {s.tool_calls} tool calls, {s.entries} entries")
    if len(report.sessions) > 20:
        print(f"  … and {len(report.sessions) - 20} more sessions")
    return 0
