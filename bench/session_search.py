"""``session_search``'s costs (issue 25 item 5): what a search costs the session's writer, and what the tool's
declaration costs every request's stable prefix.

Indexing is off the append path: an append pays nothing for the search (the store does not index). The
session's index is caught up in the background when a turn closes (``storage/catchup.py``, the engine's
default, ``search_index="turn-close"``) and at each ``session_search`` (``storage/sessionsearch.py``), so
this measures, on generated sessions of N turns written by a store that does not index:

* first: the session's first search with no turn-close catch-up (``search_index="search"``: its whole index
  built from the ledger, committed, searched);
* first, caught up: the session's first search when each of its N turn closes queued a background catch-up
  (``LedgerStore.index_later`` at each card, as the services' ``turn_finished`` does), once they settled;
* one close's catch-up: the background catch-up of one more closed turn (a directive, a 60-line result and
  its card), off any caller's path: ``index_later`` to ``index_idle``;
* again: a search with nothing appended since (open, check, search, close);
* after a turn: a search after one more turn (a directive and a 60-line result) was appended;
* reopen: the first search in a new store on the same folder (a restarted writer: the index on disk used),
  after the store has loaded the session (``load``, which any first use of the session pays, printed apart).

Each is the median of ``--repeat`` runs, in milliseconds, through the engine tool's answer (parse, search,
render) over ``InProcessServices``. Then the declaration's cost at the prior 0.25 tokens per character.

Run: ``.venv/bin/python bench/session_search.py`` (``--turns 12,100,400``; ``--quick``: 12 and 50).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from vak_context.actors.local_services import InProcessServices
from vak_context.agent.tools import EngineCall, ToolRegistry, engine_tools, surface_for
from vak_context.agent.tools.sessionsearch import SESSION_SEARCH
from vak_context.context.capacity.tokens import PRIOR_TOKENS_PER_CHAR
from vak_context.context.request.surface import schema_chars
from vak_context.events.payloads import Directive, EvidenceBody, TurnCard
from vak_context.sessions.generator import generate_session
from vak_context.storage.ledger import LedgerStore

QUERY = "planner budget segment"


def _search(store: LedgerStore, session: str) -> float:
    tool = engine_tools().get("session_search")
    assert tool is not None
    registry = ToolRegistry()
    call = EngineCall({"query": QUERY}, "t", InProcessServices(store, session), surface_for(registry), registry)
    start = time.perf_counter()
    text, is_error = asyncio.run(tool.answer(call))
    assert not is_error and text.startswith("session_search"), text
    return (time.perf_counter() - start) * 1000.0


def _one_turn(store: LedgerStore, session: str, i: int) -> None:
    text = "".join(f"late line {i}.{n} about the segment reader\n" for n in range(60))
    store.append(session, [Directive(text=f"one more turn {i}")])
    store.append(session, [EvidenceBody(tool_use_id=f"t{i}", tool_name="bash", chars=len(text), bytes=len(text))],
                 blobs=[text.encode()])


def _closed_turns(store: LedgerStore, session: str, turns: int, seed: int) -> None:
    """The generated session with a background catch-up queued at each turn's close (its card)."""
    def append(payload: object, blob: bytes | None) -> str:
        entry = store.append(session, [payload], blobs=[blob])[0]
        if isinstance(payload, TurnCard):
            store.index_later(session)
        return entry

    generate_session(seed=seed, turns=turns, append=append)
    store.index_idle()


def _one_close(store: LedgerStore, session: str, i: int) -> float:
    _one_turn(store, session, i)
    directive = next(e.id for e in reversed(store.entries(session)) if e.kind == "directive")
    store.append(session, [TurnCard(turn_id=directive, asked=f"one more turn {i}")])
    start = time.perf_counter()
    store.index_later(session)
    store.index_idle()
    return (time.perf_counter() - start) * 1000.0


def measure(turns: int, repeat: int) -> dict[str, float]:
    first: list[float] = []
    again: list[float] = []
    after: list[float] = []
    reopen: list[float] = []
    load: list[float] = []
    caught: list[float] = []
    close: list[float] = []
    for r in range(repeat):
        with tempfile.TemporaryDirectory() as tmp:
            with LedgerStore(Path(tmp) / "ledger") as store:
                _closed_turns(store, "g", turns, r)
                caught.append(_search(store, "g"))
                close.append(_one_close(store, "g", r))
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp) / "ledger"
            with LedgerStore(root) as store:
                generate_session(seed=r, turns=turns, append=lambda p, b: store.append("g", [p], blobs=[b])[0])
                first.append(_search(store, "g"))
                again.append(_search(store, "g"))
                _one_turn(store, "g", r)
                after.append(_search(store, "g"))
            with LedgerStore(root) as store:
                start = time.perf_counter()
                store.count("g")  # the session's segments read: not the search's cost
                load.append((time.perf_counter() - start) * 1000.0)
                reopen.append(_search(store, "g"))
    return {"turns": turns, "first": statistics.median(first), "again": statistics.median(again),
            "after_turn": statistics.median(after), "reopen": statistics.median(reopen),
            "load": statistics.median(load), "first_caught_up": statistics.median(caught),
            "one_close": statistics.median(close)}


def main(argv: list[str] | None = None) -> list[dict[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", default="12,100,400", help="session sizes, comma-separated")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="12 and 50 turns, one run each")
    args = parser.parse_args(argv)
    sizes = [12, 50] if args.quick else [int(t) for t in args.turns.split(",")]
    repeat = 1 if args.quick else args.repeat
    rows = [measure(n, repeat) for n in sizes]
    print(f"{'turns':>6} {'first ms':>9} {'first, caught up ms':>20} {'one close (bg) ms':>18} {'again ms':>9} "
          f"{'after a turn ms':>16} {'reopen ms':>10} {'(ledger load ms)':>17}")
    for row in rows:
        print(f"{row['turns']:>6} {row['first']:>9.1f} {row['first_caught_up']:>20.1f} {row['one_close']:>18.1f} "
              f"{row['again']:>9.1f} {row['after_turn']:>16.1f} {row['reopen']:>10.1f} {row['load']:>17.1f}")
    chars = schema_chars([SESSION_SEARCH])
    print(f"declaration: {chars} chars, about {round(chars * PRIOR_TOKENS_PER_CHAR)} tokens at "
          f"{PRIOR_TOKENS_PER_CHAR} tokens/char (tests/unit/test_session_search_tool.py prints the prefix's growth)")
    return rows


if __name__ == "__main__":
    main()
