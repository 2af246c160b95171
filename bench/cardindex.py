"""Card-index benchmark (issue 4 item 12, second half; issue 25 item 3): write and query latency at 100,
1,000 and 10,000 turns, each beside a baseline measured in the same run.

* write: indexing one closed turn (a whoosh ``update_document`` into the session's buffer, then a count
  over segments and buffer) beside appending that turn's TurnCard entry to the ledger (one fsynced append),
  which closing a turn pays anyway; the ratio is what the index adds.
* commit: the whoosh commit of the 20 buffered turns (and the state file after it), what the buffer defers
  to ``COMMIT_DOCS``, ``COMMIT_S`` or ``close``.
* query: a BM25 lookup (whoosh, scored as ``vak_context.bm25``) of a three-word query beside a plain scan of
  every turn's index text for the same words (what discovery would cost without an index).
* first query: a new ``CardIndex`` on the same folder (a restarted actor) opens the session's whoosh index
  (the state checked against whoosh's files) and searches it; its cost is beside the same scan.

Run: ``.venv/bin/python bench/cardindex.py`` (``--quick`` stops at 1,000 turns). ``bench/evidence.py``
runs it after the digest and window tables.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from vak_context.events.payloads import Answer, TraceLine, TurnCard
from vak_context.storage.cardindex import CardDoc, CardIndex
from vak_context.storage.ledger import LedgerStore

SIZES = (100, 1_000, 10_000)
SAMPLES = 20


def vocabulary(rng: random.Random, n: int = 3000) -> list[str]:
    consonants, vowels = "bcdfghklmnprstvz", "aeiou"
    words: set[str] = set()
    while len(words) < n:
        words.add("".join(rng.choice(consonants) + rng.choice(vowels) for _ in range(rng.randint(2, 4))))
    return sorted(words)


def synthetic_card(rng: random.Random, words: list[str], i: int) -> tuple[TurnCard, CardDoc]:
    """A turn card of realistic size: a 15-word ask, three trace lines with queries, 40 words of answer."""

    def phrase(n: int) -> str:  # Zipf-like: a few words are common, most are rare
        return " ".join(
            words[min(int(rng.paretovariate(1.2)) * 7 % len(words), len(words) - 1)] for _ in range(n)
        )

    asked = phrase(15) + "?"
    did = tuple(
        TraceLine(tool=rng.choice(["web_search", "read_file", "bash"]), args_digest=f'query="{phrase(4)}"')
        for _ in range(3)
    )
    card = TurnCard(turn_id=f"{i:064x}", asked=asked, did=did, answered=Answer(narration=phrase(40) + "."))
    text = "\n".join([asked, card.answered.narration, *(f"{t.tool} {t.args_digest}" for t in did)])
    return card, CardDoc(card.turn_id, f"{i + 1:064x}", text)


def timed(fn: Callable[..., object]) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000


def scan(texts: list[str], query: str, limit: int = 10) -> list[tuple[int, int]]:
    terms = query.lower().split()
    hits = []
    for i, text in enumerate(texts):
        words = text.lower().split()
        score = sum(words.count(t) for t in terms)
        if score:
            hits.append((score, i))
    hits.sort(reverse=True)
    return [(i, s) for s, i in hits[:limit]]


def measure(root: Path, size: int, rng: random.Random, words: list[str]) -> tuple[str, ...]:
    index = CardIndex(root)
    cards = [synthetic_card(rng, words, i) for i in range(size + SAMPLES)]
    docs = [doc for _, doc in cards]
    for start in range(0, size, 500):  # the existing turns, indexed in bulk
        index.add("s", docs[start : min(start + 500, size)])
    index.search("s", words[0], 10)  # open the searcher once, as a running actor has it open
    writes = [timed(partial(write, index, doc)) for doc in docs[size:]]  # one append per closed turn
    with LedgerStore(root) as store:
        appends = [timed(partial(store.append, "s", [card])) for card, _ in cards[size:]]
    texts = [d.text for d in docs]
    queries = [" ".join(rng.sample(words[:200], 3)) for _ in range(SAMPLES)]
    commit = timed(index.flush)
    lookups = [timed(partial(index.search, "s", q, 10)) for q in queries]
    scans = [timed(partial(scan, texts, q)) for q in queries]
    index.close()
    first = timed(partial(CardIndex(root).search, "s", queries[0], 10))
    w, a = statistics.median(writes), statistics.median(appends)
    q, s = statistics.median(lookups), statistics.median(scans)
    return (f"{size:,}", f"{w:.2f}", f"{a:.2f}", f"{w / a:.1f}", f"{commit:.1f}", f"{q:.2f}", f"{s:.2f}", f"{q / s:.2f}",
            f"{first:.1f}", f"{first / s:.1f}")


def write(index: CardIndex, doc: CardDoc) -> None:
    """One closed turn into the index's buffer, then a count over segments and buffer."""
    index.add("s", [doc])
    index.count("s")


def card_index_rows(sizes: tuple[int, ...]) -> list[tuple[str, ...]]:
    rng = random.Random(7)
    words = vocabulary(rng)
    with tempfile.TemporaryDirectory(prefix="vakbench") as tmp:
        return [measure(Path(tmp) / f"n{size}", size, rng, words) for size in sizes]


HEADER = (
    "turns",
    "index write ms",
    "ledger append ms",
    "write/append",
    "commit 20 ms",
    "BM25 query ms",
    "scan ms",
    "query/scan",
    "first query ms",
    "first/scan",
)


def card_index_benchmark(
    *, quick: bool, print_table: Callable[[str, tuple[str, ...], list[tuple[str, ...]]], None]
) -> None:
    sizes = SIZES[:2] if quick else SIZES
    rows = card_index_rows(sizes)
    print_table(f"Card index: write and query latency (median of {SAMPLES})", HEADER, rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="100 and 1,000 turns only")
    args = parser.parse_args(argv)
    card_index_benchmark(quick=args.quick, print_table=_print_table)


def _print_table(title: str, header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    print(f"\n{title}")
    for line in (header, tuple("-" * w for w in widths), *rows):
        print("  ".join(c.rjust(w) for c, w in zip(line, widths, strict=True)))


if __name__ == "__main__":
    main()
