"""`vak search` and `vak reindex`: the session full-text index for people (docs/SEARCH.md)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from vak_context.checks import bounded_int


def register(sub: Any) -> None:
    p = sub.add_parser("search", help="full-text search of what a ledger's sessions saw (results, cards, directives)")
    p.add_argument("ledger", type=Path)
    p.add_argument("query", help="words to look for (any of them; no query syntax)")
    p.add_argument("--session", default=None, help="search this session only (default: every session)")
    p.add_argument("--limit", type=bounded_int(1, 100), default=10, help="hits to print, 1-100 (default 10)")
    p.add_argument("--json", action="store_true", help="print the hits as JSON lines")
    p.set_defaults(func=_search)

    p = sub.add_parser("reindex", help="rebuild the sessions' search and card indexes from the ledger alone")
    p.add_argument("ledger", type=Path)
    p.add_argument("--session", default=None, help="rebuild this session's index only (default: every session)")
    p.set_defaults(func=_reindex)


def _search(args: argparse.Namespace) -> int:
    """Read-only: an index that is missing, stale or broken is searched with the rest indexed in memory."""
    from vak_context.storage.ledger import LedgerStore
    from vak_context.storage.search import read_index

    with LedgerStore(args.ledger, readonly=True) as store:
        sessions = [args.session] if args.session else store.sessions()
        hits = []
        for name in sessions:
            found, note = read_index(store, name, args.query, args.limit)
            if note:
                print(f"note: {note}")
            hits += found
    hits.sort(key=lambda h: (-h.score, h.session, h.ref, h.start))
    hits = hits[: args.limit]
    if not hits:
        print(f"no match for {args.query!r}" + (f" in session {args.session!r}" if args.session else "")
              + "; `recall({\"turn\": N})` shows a whole turn")
        return 1
    for h in hits:
        if args.json:
            print(json.dumps(h.as_dict(), ensure_ascii=False))
            continue
        where = f"lines {h.start}-{h.end} of evidence {h.ref[:12]}" + (f" ({h.tool})" if h.tool else "")
        if h.kind != "evidence":
            where = f"{h.kind} {h.ref[:12]}"
        print(f"{h.session}  turn {h.turn}  {where}  score {h.score:.2f}")
        print(f"    {h.snippet}")
        print(f"    {h.recall}")
    return 0


def _reindex(args: argparse.Namespace) -> int:
    """Takes each session's writer lock (a running writer keeps its own index: stop it first)."""
    from vak_context.agent.carddocs import docs_from_ledger
    from vak_context.errors import UnknownSession
    from vak_context.storage.cardindex import CardIndex
    from vak_context.storage.ledger import LedgerStore

    with LedgerStore(args.ledger, search=True) as store, CardIndex(args.ledger) as cards:
        assert store.search_index is not None
        names = store.sessions()
        if args.session is not None and args.session not in names:
            raise UnknownSession(args.session)
        for name in [args.session] if args.session else names:
            docs = store.search_index.reindex(name)
            turns = docs_from_ledger(store, name)
            if turns or cards.path(name).exists():  # a session with no closed turn gets no card index
                cards.rebuild(name, turns)
            print(f"{name}: {docs} documents from {store.count(name)} entries; {len(turns)} turns in the card index")
    return 0
