"""The session search index against issue 25's goals (item 7): what indexing adds to an append, query latency
beside a linear scan and the in-memory BM25, and the first query after a restart.

On a synthetic corpus generated once (seeded; result ``i`` depends on the seed and ``i`` only, so a smaller
corpus is a prefix of a larger one) and cached with its whoosh indexes under
``~/.cache/vak/bench-search/<version>/`` (``--cache DIR``): one ledger folder, one session per size.
Each tool result is 60 lines (grep hits, log lines, test output, code, listings) over a Zipf vocabulary of
identifiers, plus a per-result request id; it makes 2 evidence documents (windows 1-40 and 31-60).

a. **append**: ``--appends`` results appended one by one to a fresh session of a ``LedgerStore(search=False)``
   and of a ``LedgerStore(search=True)``, median and p90 of each append, in rounds so that the shared
   machine's load falls on all alike; with the index both back to back (a burst: the indexing thread waits
   for the appends to pause, ``storage/indexer.py``, and takes the burst in at the ``flush`` after it) and
   paced (the thread has taken in and committed each result before the next append: what an agent's
   appends, a model call apart, see; beside a plain store's paced appends, in turn first, since any work
   between two appends slows the next one), and, paced, the time until the thread has taken the result in
   (``sync``: the result searchable). Then the lazy path
   (``storage/sessionsearch.py``): the same results appended without an index, and the next search's
   catch-up cost per result. Goal: indexing adds at most 50% to an append's time.
b. **query**: at each corpus size (``--docs``; ``--full`` adds 100,000 evidence documents), the median over a
   fixed query set (rare, mid and frequent terms, chosen by rank in the vocabulary) of: whoosh through
   ``WriterIndex.search`` (what the indexer answers with: a searcher over the buffer and segments per
   query), whoosh with one searcher kept open (``run_query``), a linear scan (term counts over every
   document's lowercased text, top 5), and ``vak_context.bm25.Bm25Index`` (built in memory over the same
   documents; its build time printed apart). Goal: a query at 100k documents under 50 ms (checked at the
   largest size measured).
c. **restart**: a session of ``--turns`` turns (a directive, a 60-line result and a turn card each) with its
   index on disk; a new Python process imports, opens the store and the index, and runs one query, through
   each of the three readers: ``session_search``'s lazy writer path (``own_session``: the engine's default),
   a ``LedgerStore(search=True)`` writer (``store.search``), and the read-only ``read_index`` (``vak search``).
   Import time and the ledger's load of the session are printed apart. Goal: the first query after a
   restart under 100 ms at 10,000 turns (printed for the index's open + query, and with the ledger load).

Run: ``.venv/bin/python bench/search.py`` (about 2.5 minutes on 2 cores with the cache cold, 35 s warm; ``--full``
adds the 100k point, about 7 minutes more the first time; ``--parts a``: one part; ``--quick``: the tests' tiny
run). Figures: docs/SEARCH.md, "Against the goals".
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import whoosh
from whoosh.scoring import BM25F

from vak_context.bm25 import K1, B, Bm25Index, best_first, terms
from vak_context.context.history.searchdocs import OVERLAP_LINES, WINDOW_LINES, windows
from vak_context.events.payloads import Answer, Directive, EvidenceBody, TraceLine, TurnCard
from vak_context.storage.ledger import LedgerStore
from vak_context.storage.search import SEARCH_FORMAT, WriterIndex, run_query
from vak_context.storage.sessionsearch import own_session

GENERATOR = "bench-search/1"  # bump when the corpus changes: the cache folder is named after it
SEED = 25
LINES = 60
VOCAB = 20_000
LIMIT = 5  # hits per query, as session_search returns
APPEND_GOAL = 1.5  # indexing adds at most 50% to an append's time
QUERY_GOAL_MS = 50.0  # a query at 100k documents
RESTART_GOAL_MS = 100.0  # the first query after a restart at 10,000 turns
BUILD_CHUNK = 250  # results per append_many (one fsync) while the corpus is written


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------- the corpus


def vocabulary() -> list[str]:
    """``VOCAB`` identifier-like words, rank 0 the most frequent (Zipf weights below)."""
    rng = random.Random(SEED)
    syll = [c + v for c in "bcdfghklmnprstvz" for v in "aeiou"]
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < VOCAB:
        w = "".join(rng.choice(syll) for _ in range(rng.randint(2, 4)))
        if rng.random() < 0.3:
            w += "_" + "".join(rng.choice(syll) for _ in range(rng.randint(1, 2)))
        if w not in seen and len(terms(w)) == 1:
            seen.add(w)
            words.append(w)
    return words


WORDS = vocabulary()
_CUM: list[float] = []
for _rank in range(VOCAB):
    _CUM.append((_CUM[-1] if _CUM else 0.0) + 1.0 / (_rank + 1) ** 1.05)
TOOLS = ("grep", "bash", "read_file", "pytest", "list_dir")
LEVELS = ("INFO", "INFO", "INFO", "DEBUG", "WARN", "ERROR")


def request_id(i: int) -> str:
    return hashlib.blake2b(f"{SEED}:{i}".encode(), digest_size=6).hexdigest()


def result(i: int) -> tuple[str, str]:
    """The ``i``-th tool result: (tool, 60 lines of text). Deterministic from ``SEED`` and ``i`` alone."""
    rng = random.Random(SEED * 1_000_003 + i)
    tool = TOOLS[rng.randrange(len(TOOLS))]
    ws = rng.choices(WORDS, cum_weights=_CUM, k=LINES * 7)
    rid = request_id(i)
    lines = []
    for n in range(LINES):
        a, b, c, d, e, f, g = ws[n * 7 : n * 7 + 7]
        if tool == "grep":
            lines.append(f"src/{a}/{b}.py:{rng.randint(1, 900)}:    {c} = {d}.{e}({f}, {g})")
        elif tool == "bash":
            lines.append(f"2026-11-30T12:{n % 60:02d}:{rng.randint(0, 59):02d}.{rng.randint(0, 999):03d}Z "
                         f"{rng.choice(LEVELS)} {a}.{b} {c} {d} {e} request={rid} took={rng.randint(1, 900)}ms")
        elif tool == "pytest":
            status = "PASSED" if rng.random() < 0.9 else "FAILED"
            lines.append(f"tests/test_{a}.py::test_{b}_{c} {status} [{n * 100 // LINES:3d}%] {d} {e}")
        elif tool == "read_file":
            lines.append(f"    def {a}(self, {b}: {c}) -> {d}:" if n % 5 == 0 else f"        return self.{e}({f}, {g})")
        else:
            lines.append(f"-rw-r--r--  1 dev  staff  {rng.randint(10, 99999):>6} Nov 30 12:{n % 60:02d} {a}_{b}.py")
    if i % 5 == 0:  # the id a model would search for, once per result deep in it
        lines[rng.randrange(LINES)] += f" trace={rid}"
    return tool, "\n".join(lines) + "\n"


def documents(results: int) -> list[str]:
    """The evidence documents of the first ``results`` results, as the index holds them (lowercased)."""
    return [chunk.lower() for i in range(results) for _a, _b, chunk in windows(result(i)[1])]


def queries() -> list[tuple[str, str]]:
    """(band, query): frequent, mid and rare terms by vocabulary rank, and a request id (one result's)."""
    return [("frequent", WORDS[0]), ("frequent", f"{WORDS[1]} {WORDS[2]}"), ("frequent", f"{WORDS[3]} {WORDS[4]} {WORDS[5]}"),
            ("mid", WORDS[150]), ("mid", f"{WORDS[300]} {WORDS[400]}"), ("mid", f"{WORDS[200]} {WORDS[250]} {WORDS[350]}"),
            ("rare", WORDS[9_000]), ("rare", f"{WORDS[15_000]} {WORDS[19_000]}"), ("rare", request_id(35))]


def _evidence(tool: str, text: str, n: int) -> EvidenceBody:
    return EvidenceBody(tool_use_id=f"call_{n}", tool_name=tool, chars=len(text), bytes=len(text.encode()))


def cache_folder(base: Path) -> Path:
    version = hashlib.sha256(json.dumps([GENERATOR, SEED, LINES, VOCAB, SEARCH_FORMAT, WINDOW_LINES, OVERLAP_LINES,
                                         whoosh.versionstring()]).encode()).hexdigest()[:12]
    return base / version


def _ready(root: Path, session: str) -> Path:
    return root / f"{session}.ready"


def _build(root: Path, session: str, write: Callable[[LedgerStore], None]) -> None:
    """Write a session and its whoosh index once; a half-built one (no ``.ready``) is written again."""
    if _ready(root, session).exists():
        return
    shutil.rmtree(root / "ledger" / "sessions" / session, ignore_errors=True)
    t0 = time.perf_counter()
    with LedgerStore(root / "ledger") as store:
        write(store)
        t1 = time.perf_counter()
        log(f"  {session}: ledger written in {t1 - t0:.1f} s; indexing it (whoosh)")
        WriterIndex(store, session).close()
        log(f"  {session}: indexed in {time.perf_counter() - t1:.1f} s")
    _ready(root, session).write_text("ok\n")


def docs_session(root: Path, results: int) -> str:
    session = f"docs-{2 * results}"

    def write(store: LedgerStore) -> None:
        store.append(session, [Directive(text="find the failing request in the logs")])
        for start in range(0, results, BUILD_CHUNK):
            batch = [result(i) for i in range(start, min(start + BUILD_CHUNK, results))]
            store.append_many(session, [([_evidence(tool, text, start + k)], [text.encode()])
                                        for k, (tool, text) in enumerate(batch)])
            if (start // BUILD_CHUNK) % max(results // BUILD_CHUNK // 5, 1) == 0:
                log(f"  {session}: {start + len(batch):,} / {results:,} results written")

    _build(root, session, write)
    return session


def turns_session(root: Path, turns: int, chunk: int = 50) -> str:
    """``turns`` turns: a directive and a result each, then (after each chunk of turns, for one fsync per
    chunk) their turn cards, which need the directives' ids."""
    session = f"turns-{turns}"

    def write(store: LedgerStore) -> None:
        for start in range(0, turns, chunk):
            batch = [(i, *result(i)) for i in range(start, min(start + chunk, turns))]
            reqs: list[tuple[Sequence[Any], Sequence[bytes | None] | None]] = [
                ([Directive(text=f"turn {i}: why does {WORDS[i % 500]} fail in {WORDS[(i * 7) % 900]}?"),
                  _evidence(tool, text, i)], [None, text.encode()]) for i, tool, text in batch]
            ids = [got for got in store.append_many(session, reqs) if isinstance(got, list)]
            cards = [([TurnCard(turn_id=got[0], asked=f"turn {i}",
                                did=(TraceLine(tool=tool, args_digest=f'pattern="{WORDS[i % 300]}"'),),
                                answered=Answer(narration=f"{WORDS[i % 700]} comes from {WORDS[(i * 3) % 800]}."))],
                      None) for (i, tool, _t), got in zip(batch, ids, strict=True)]
            store.append_many(session, cards)
            if (start // chunk) % max(turns // chunk // 5, 1) == 0:
                log(f"  {session}: {start + len(batch):,} / {turns:,} turns written")

    _build(root, session, write)
    return session


# ---------------------------------------------------------------------------------------------- measuring


def ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000.0


def p90(xs: Sequence[float]) -> float:
    return sorted(xs)[min(len(xs) - 1, int(len(xs) * 0.9))]


def measure_appends(tmp: Path, n: int, rounds: int = 5) -> dict[str, float]:
    """The three ways of appending in ``rounds`` rounds of ``n / rounds`` appends each (plain, paced, back to
    back, in turn), both stores open throughout, so load that comes and goes on a shared machine falls on
    all three alike."""
    texts = [result(i) for i in range(n)]
    out: dict[str, float] = {}
    plain: list[float] = []
    plain_paced: list[float] = []
    paced: list[float] = []
    taken: list[float] = []
    back: list[float] = []
    loop_ms = flush_ms = 0.0

    def run(store: LedgerStore, session: str, chunk: Sequence[tuple[str, str]], paced: bool = False,
            appends: list[float] | None = None) -> None:
        for k, (tool, text) in enumerate(chunk):
            t0 = time.perf_counter()
            store.append(session, [_evidence(tool, text, k)], blobs=[text.encode()])
            if appends is not None:
                appends.append(ms(t0))
            if paced and store.search_index is not None:
                store.search_index.sync()

    rounds = max(1, min(rounds, n))
    with LedgerStore(tmp / "plain") as pstore, LedgerStore(tmp / "indexed", search=True) as istore:
        assert istore.search_index is not None
        # warm-up, not counted: the first appends of a process and of a session pay for imports and caches
        run(pstore, "a", texts[:10])
        run(pstore, "p", texts[:10])
        run(istore, "p", texts[:10], paced=True)
        run(istore, "b", texts[:10])
        istore.search_index.flush()
        for r in range(rounds):
            chunk = texts[r * n // rounds : (r + 1) * n // rounds]
            run(pstore, "a", chunk, appends=plain)
            for k, (tool, text) in enumerate(chunk):
                # paced: a plain and an indexed append side by side, in turn first, between the indexing
                # thread's work (taken in, committed): whatever runs between two appends evicts the caches
                # the append's code ran hot in (any Python work between appends costs ~0.2 ms here)
                order = (pstore, istore) if k % 2 == 0 else (istore, pstore)
                for store in order:
                    t0 = time.perf_counter()
                    store.append("p", [_evidence(tool, text, k)], blobs=[text.encode()])
                    (paced if store is istore else plain_paced).append(ms(t0))
                    if store is istore:
                        istore.search_index.sync()
                        taken.append(ms(t0))
                istore.search_index.flush()  # and committed, as the thread does in the pause before the next one
            t0 = time.perf_counter()
            run(istore, "b", chunk, appends=back)
            loop_ms += ms(t0)
            t0 = time.perf_counter()
            istore.search_index.flush()  # the backlog taken in and committed before the next round
            flush_ms += ms(t0)
    # lazy catch-up: a store that does not index; the index opened once, then n results appended
    with LedgerStore(tmp / "lazy") as store:
        store.append("l", [Directive(text="warm up")])
        own_session(store, "l", WORDS[0])
        t0 = time.perf_counter()
        own_session(store, "l", WORDS[0])
        nothing_new = ms(t0)
        run(store, "l", texts)
        t0 = time.perf_counter()
        own_session(store, "l", WORDS[0])
        catch_up = ms(t0)
    for name, xs in (("plain", plain), ("back", back), ("plain_paced", plain_paced), ("paced", paced),
                     ("taken", taken)):
        out[f"{name}_med"], out[f"{name}_p90"] = statistics.median(xs), p90(xs)
    out.update(loop_ms=loop_ms, flush_ms=flush_ms, nothing_new=nothing_new, catch_up=catch_up, n=n)
    return out


def measure_queries(root: Path, session: str, results: int, repeat: int) -> dict[str, Any]:
    qs = [q for _band, q in queries()]
    t0 = time.perf_counter()
    texts = documents(results)
    gen_ms = ms(t0)
    t0 = time.perf_counter()
    bm = Bm25Index[int]()
    for i, text in enumerate(texts):
        bm.add(i, text)
    bm_build = ms(t0)
    qterms = [sorted(set(terms(q))) for q in qs]

    def scan(wanted: list[str]) -> list[tuple[int, int]]:
        hits = []
        for i, text in enumerate(texts):
            score = sum(text.count(t) for t in wanted)
            if score:
                hits.append((-score, i))
        hits.sort()
        return [(i, -s) for s, i in hits[:LIMIT]]

    def per_query(fn: Callable[[int], object]) -> list[float]:
        """The median of ``repeat`` runs of each query, after one warm-up run of it."""
        out = []
        for k in range(len(qs)):
            fn(k)
            out.append(statistics.median(_times(partial(fn, k), repeat)))
        return out

    with LedgerStore(root / "ledger", readonly=False) as store:
        idx = WriterIndex(store, session)
        try:
            fresh = per_query(lambda k: idx.search(qs[k], LIMIT))
            with idx.ix.searcher(weighting=BM25F(B=B, K1=K1)) as searcher:
                kept = per_query(lambda k: run_query(searcher, session, qs[k], LIMIT))
        finally:
            idx.close()
    scan_ms = per_query(lambda k: scan(qterms[k]))
    bm_ms = per_query(lambda k: best_first(bm.search(qs[k]))[:LIMIT])
    med = statistics.median
    shares = [sum(1 for text in texts if any(t in text for t in wanted)) / len(texts) for wanted in qterms]
    bands = [band for band, _q in queries()]
    by_band = {f"whoosh_{band}": med(x for b, x in zip(bands, fresh, strict=True) if b == band) for band in set(bands)}
    return {**by_band, "shares": shares, "docs": len(texts), "whoosh": med(fresh), "whoosh_worst": max(fresh), "whoosh_open": med(kept),
            "whoosh_open_worst": max(kept), "scan": med(scan_ms), "bm25": med(bm_ms), "bm25_build": bm_build,
            "gen": gen_ms}


def _times(fn: Callable[[], object], repeat: int) -> Iterator[float]:
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        yield ms(t0)


CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
sys.path[:0] = {paths!r}
from vak_context.storage.ledger import LedgerStore
from vak_context.storage.search import read_index
from vak_context.storage.sessionsearch import own_session
imported = time.perf_counter()
root, session, query, how = {root!r}, {session!r}, {query!r}, {how!r}
kind = {{"read_index": dict(readonly=True), "search=True": dict(search=True)}}.get(how, {{}})
with LedgerStore(root, **kind) as store:  # search=True: its SearchIndexer opens the index at the first search
    store.count(session)  # the session's segments read: what any first use of the session pays
    loaded = time.perf_counter()
    if how == "read_index":  # vak search: a read-only store, never the writer lock
        hits, note = read_index(store, session, query, 5)
    elif how == "search=True":
        hits, note = store.search(session, query, 5), None
    else:  # session_search in a store that does not index (the engine's): WriterIndex opened, caught up, closed
        hits, note = own_session(store, session, query, 5), None
    done = time.perf_counter()
print(json.dumps({{"import_ms": (imported - t0) * 1000, "load_ms": (loaded - imported) * 1000,
                   "query_ms": (done - loaded) * 1000, "hits": len(hits), "note": note}}))
"""


def measure_restart(root: Path, session: str, repeat: int) -> dict[str, dict[str, float]]:
    paths = [p for p in sys.path if p]
    out: dict[str, dict[str, float]] = {}
    for how in ("own_session", "search=True", "read_index"):
        code = CHILD.format(paths=paths, root=str(root / "ledger"), session=session, query=WORDS[150], how=how)
        runs = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
            got = json.loads(done.stdout.strip().splitlines()[-1])
            got["process_ms"] = ms(t0)
            runs.append(got)
        if runs[0]["note"]:
            log(f"  restart ({how}): {runs[0]['note']}")
        out[how] = {k: statistics.median(r[k] for r in runs) for k in ("import_ms", "load_ms", "query_ms", "process_ms", "hits")}
    return out


# ---------------------------------------------------------------------------------------------- printing


def goal(what: str, measured: str, ratio: float, met: bool) -> None:
    print(f"goal: {what}: measured {measured}, ratio {ratio:.2f} ({'met' if met else 'not met'})")


def table(title: str, header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    print(f"\n{title}")
    for line in (header, ["-" * w for w in widths], *rows):
        print("  ".join(c.rjust(w) for c, w in zip(line, widths, strict=True)))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", default="1000,10000", help="evidence documents per query point, comma-separated")
    parser.add_argument("--full", action="store_true", help="add the 100,000-document point")
    parser.add_argument("--turns", type=int, default=10_000, help="turns of the restart session")
    parser.add_argument("--appends", type=int, default=300, help="results appended per store in part a")
    parser.add_argument("--repeat", type=int, default=5, help="runs per query (and restarts per reader)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (the tests' run): 100 and 400 documents, "
                        "50 turns, 20 appends, 1 run")
    parser.add_argument("--parts", default="abc", help="which parts to run (a: appends, b: queries, c: restart)")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "vak" / "bench-search",
                        help="where the corpus and its indexes are kept between runs")
    args = parser.parse_args(argv)
    sizes = [int(d) for d in args.docs.split(",")]
    turns, appends, repeat = args.turns, args.appends, args.repeat
    if args.quick:
        sizes, turns, appends, repeat = [100, 400], 50, 20, 1  # part c starts 3 processes a run
    if args.full:
        sizes.append(100_000)
    root = cache_folder(args.cache)
    root.mkdir(parents=True, exist_ok=True)
    log(f"corpus: {root} (generated once, then reused)")
    t_start = time.perf_counter()
    docs_sessions = [(docs_session(root, max(d // 2, 1)), max(d // 2, 1)) for d in sizes] if "b" in args.parts else []
    restart_session = turns_session(root, turns) if "c" in args.parts else ""
    log(f"corpus ready in {time.perf_counter() - t_start:.1f} s")
    load = os.getloadavg()
    print(f"bench/search.py: whoosh {whoosh.versionstring()}, {LINES}-line results, {os.cpu_count()} cores, "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")

    found: dict[str, Any] = {}
    if "a" in args.parts:
        found["append"] = part_a(appends)
    if "b" in args.parts:
        found["queries"] = part_b(root, docs_sessions, repeat)
    if "c" in args.parts:
        found["restart"] = part_c(root, restart_session, turns, repeat)
    print(f"bench time {time.perf_counter() - t_start:.0f} s")
    return found


def part_a(appends: int) -> dict[str, float]:
    log("a. appends")
    with tempfile.TemporaryDirectory(prefix="vak-bench-search-") as tmp:
        a = measure_appends(Path(tmp), appends)
    table(f"a. append of a {LINES}-line result (ms, {appends} appends per store)",
          ["store", "median", "p90"],
          [["search=False", f"{a['plain_med']:.2f}", f"{a['plain_p90']:.2f}"],
           ["search=True, back to back", f"{a['back_med']:.2f}", f"{a['back_p90']:.2f}"],
           ["search=False, paced", f"{a['plain_paced_med']:.2f}", f"{a['plain_paced_p90']:.2f}"],
           ["search=True, paced", f"{a['paced_med']:.2f}", f"{a['paced_p90']:.2f}"],
           ["  until indexed (paced: append + sync)", f"{a['taken_med']:.2f}", f"{a['taken_p90']:.2f}"]])
    print(f"back to back: {appends} appends in {a['loop_ms']:.0f} ms, then (in rounds of {appends // 5}) what the "
          f"indexing thread had left, taken in and committed by flush: {a['flush_ms']:.0f} ms")
    lazy = (a["catch_up"] - a["nothing_new"]) / appends
    print(f"lazy catch-up (search=False, indexed at the next session_search): {a['catch_up']:.1f} ms for {appends} "
          f"results, {a['nothing_new']:.1f} ms with nothing new: {lazy:.2f} ms per result")
    for label, key, base in (("back to back, median", "back_med", "plain_med"), ("back to back, p90", "back_p90", "plain_p90"),
                             ("paced, median", "paced_med", "plain_paced_med")):
        r = a[key] / a[base]
        goal(f"indexing adds at most 50% to an append's time ({label})",
             f"{a[key]:.2f} ms vs {a[base]:.2f} ms ({r:.2f}x)", r / APPEND_GOAL, r <= APPEND_GOAL)

    return a


def part_b(root: Path, docs_sessions: list[tuple[str, int]], repeat: int) -> list[dict[str, Any]]:
    log("b. queries")
    rows, measured = [], []
    for session, results in docs_sessions:
        log(f"  {session}")
        q = measure_queries(root, session, results, repeat)
        measured.append(q)
        rows.append([f"{q['docs']:,}", f"{q['whoosh']:.2f}", f"{q['whoosh_worst']:.2f}", f"{q['whoosh_open']:.2f}",
                     f"{q['whoosh_open_worst']:.2f}", f"{q['scan']:.2f}", f"{q['bm25']:.2f}", f"{q['bm25_build']:.0f}"])
    table(f"b. query latency (ms: median over {len(queries())} queries of each one's median of {repeat} runs, "
          f"and the slowest query's; top {LIMIT})",
          ["evidence docs", "whoosh", "worst", "whoosh (searcher open)", "worst", "scan", "BM25 (memory)",
           "BM25 build"], rows)
    top = measured[-1]
    print(f"queries (the share of the {top['docs']:,} documents holding a term of each): " + "; ".join(
        f"{band} {q!r} {share:.2%}" for (band, q), share in zip(queries(), top["shares"], strict=True)))
    print(f"whoosh by band at {top['docs']:,} documents (median ms): frequent {top['whoosh_frequent']:.2f}, "
          f"mid {top['whoosh_mid']:.2f}, rare {top['whoosh_rare']:.2f}")
    goal(f"a query at 100k documents under {QUERY_GOAL_MS:.0f} ms (at {top['docs']:,}, WriterIndex.search, median)",
         f"{top['whoosh']:.2f} ms", top["whoosh"] / QUERY_GOAL_MS, top["whoosh"] < QUERY_GOAL_MS)
    if top["whoosh_frequent"] >= QUERY_GOAL_MS:
        print(f"note: queries of frequent terms only take {top['whoosh_frequent']:.0f} ms at {top['docs']:,}: whoosh "
              "scores every posting of such a term (its block-quality skipping is off: the buffer's postings and "
              "segments written from it lack the block statistics it needs)")

    return measured


def part_c(root: Path, restart_session: str, turns: int, repeat: int) -> dict[str, dict[str, float]]:
    log("c. restart")
    rs = measure_restart(root, restart_session, repeat)
    table(f"c. first query after a restart, {turns:,} turns (ms, median of {repeat} new processes)",
          ["reader", "import", "ledger load", "index open + query", "whole process"],
          [[how, f"{r['import_ms']:.0f}", f"{r['load_ms']:.0f}", f"{r['query_ms']:.1f}", f"{r['process_ms']:.0f}"]
           for how, r in rs.items()])
    first = rs["own_session"]
    goal(f"the first query after a restart under {RESTART_GOAL_MS:.0f} ms at {turns:,} turns (session_search: "
         "index open + query)", f"{first['query_ms']:.1f} ms", first["query_ms"] / RESTART_GOAL_MS,
         first["query_ms"] < RESTART_GOAL_MS)
    both = first["query_ms"] + first["load_ms"]
    goal(f"the first query after a restart under {RESTART_GOAL_MS:.0f} ms at {turns:,} turns (session_search: "
         "ledger load + index open + query)", f"{both:.1f} ms", both / RESTART_GOAL_MS, both < RESTART_GOAL_MS)
    return rs


if __name__ == "__main__":
    main()
