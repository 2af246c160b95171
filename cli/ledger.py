"""`vak run`, `vak verify`, `vak inspect`: the main job and ledger checks."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from vak_context.checks import bounded_int
from vak_context.cli.mainjob import (
    DEFAULT_LEDGER,
    DEFAULT_MODEL,
    DEFAULT_REPEAT_RULE,
    MAX_SEED,
    MAX_TURNS,
    REPEAT_RULES,
)


def register(sub: Any) -> None:
    p = sub.add_parser("run", help="run the main job on embedded defaults (local Ray, local ledger, local model)")
    p.add_argument("--ledger", type=Path, default=DEFAULT_LEDGER, help="ledger folder (default: %(default)s)")
    p.add_argument("--turns", type=bounded_int(1, MAX_TURNS), default=12,
                   help=f"turns in the generated session, 1-{MAX_TURNS} (default 12)")
    p.add_argument("--seed", type=bounded_int(0, MAX_SEED), default=7,
                   help="seed of the session generator (default 7)")
    p.add_argument("--model", default=DEFAULT_MODEL,
                   help="the local model for the probe and the live turns (default qwen1.5b: Qwen2.5-Coder-1.5B; qwen is the 0.5B)")
    p.add_argument("--workspace", type=Path, default=Path("."),
                   help="the folder the live turns' tools may read (default: the current folder)")
    p.add_argument("--repeat-rule", choices=REPEAT_RULES, default=DEFAULT_REPEAT_RULE,
                   help="the live turns' repeated-call rule on its second strike: close ends the turn with the "
                   "results it had, redo asks once more for the answer without tools (default %(default)s)")
    p.set_defaults(func=_run)

    p = sub.add_parser("verify", help="check every hash link of a ledger folder; names the first bad entry")
    p.add_argument("ledger", type=Path)
    p.add_argument("--session", default=None)
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=_verify)

    p = sub.add_parser("inspect", help="sessions, entries by kind, bytes and heads of a ledger folder")
    p.add_argument("ledger", type=Path)
    p.set_defaults(func=_inspect)


def _run(args: argparse.Namespace) -> int:
    from vak_context.checks import check_ledger_folder
    from vak_context.cli.mainjob import run_main_job
    from vak_context.errors import InvalidInput
    from vak_context.providers.local.catalogue import resolve_model

    check_ledger_folder(args.ledger, "--ledger")  # here too, so the message names the option
    if not args.workspace.is_dir():
        raise InvalidInput(f"the workspace {str(args.workspace)!r} is not a folder: pass --workspace DIR")
    resolve_model(args.model)  # an unknown or missing model is said now, not after Ray started
    run_main_job(args.ledger, turns=args.turns, seed=args.seed, local_model=args.model, workspace=args.workspace,
                 repeat_rule=args.repeat_rule)
    return 0


def _verify(args: argparse.Namespace) -> int:
    from vak_context.storage.ledger import LedgerStore

    with LedgerStore(args.ledger, readonly=True) as store:
        report = store.verify(args.session)
        # The search indexes are caches (docs/SEARCH.md): one that disagrees with the ledger is reported,
        # never repaired here, and does not fail the ledger's check (the next writer or `vak reindex` rebuilds it).
        index_notes = _search_index_notes(store, args.session) if report.ok else []
    if args.json:
        print(json.dumps({**report.as_dict(), "search_index": index_notes}, indent=2))
    elif report.ok:
        print(f"ok: {report.entries} entries in {report.sessions} session(s) hash-check")
        for note in report.notes:
            print(f"note: {note}")
        for note in index_notes:
            print(f"search index: {note}")
    else:
        print(f"FAILED: {report.first_bad}")
        print("The entries before it are intact. Keep a copy of the folder before repairing anything.")
    return 0 if report.ok else 1


def _search_index_notes(store: Any, session: str | None) -> list[str]:
    """The session search index's and the card index's findings (both caches of the ledger)."""
    from vak_context.agent.carddocs import card_index_findings
    from vak_context.storage.search import index_findings

    names = [session] if session else store.sessions()
    found = [index_findings(store, name) for name in names] + [card_index_findings(store, name) for name in names]
    return [f for f in found if f is not None]


def _inspect(args: argparse.Namespace) -> int:
    """The stats, and the same checks as `vak verify`: a damaged ledger is never reported as fine."""
    from vak_context.storage.ledger import LedgerStore

    with LedgerStore(args.ledger, readonly=True) as store:
        report = store.verify()
        stats = store.stats().as_dict()
    stats["verify"] = report.as_dict()
    print(json.dumps(stats, indent=2))
    if not report.ok:
        print(f"vak: the ledger is damaged: {report.first_bad}. Run `vak verify` on it for the full report; "
              "keep a copy of the folder before repairing anything.", file=sys.stderr)
        return 1
    return 0
