"""The card index on whoosh (issue 25 item 3): whoosh ranks as ``vak_context.bm25.Bm25Index`` does, its
buffer is searchable before it commits, and it is a cache of the ledger (deleted, torn, tampered or of the
older format: rebuilt with the same hits; ``vak verify`` reports it, ``vak reindex`` rebuilds it)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from tests.fakes.imported import Imported
from vak_context.agent.carddocs import card_index_findings, docs_from_ledger
from vak_context.bm25 import Bm25Index, best_first, is_common, terms
from vak_context.cli.main import main
from vak_context.events.payloads import AssistantStep, Directive, TextBlock, TurnCard
from vak_context.storage import cardwhoosh
from vak_context.storage.cardindex import CardDoc, CardIndex, CardSource
from vak_context.storage.ledger import LedgerStore

Ranking = list[tuple[str, float]]


def _corpus(n: int = 200, seed: int = 25) -> list[CardDoc]:
    """Card-like texts from a seeded generator: Zipf-like words (a few in most cards, most rare), code
    identifiers and punctuation, lengths from 3 to 120 terms, and some cards of equal length and words
    (ties, broken by turn id)."""
    rng = random.Random(seed)
    words = [f"{a}{b}" for a in ("ka", "lo", "mi", "nu", "pe", "ro", "su", "ti") for b in ("ba", "de", "fi", "go", "hu")]
    words += ["parse_args", "x86_64", "exitplanmode", "read_file", "copper", "lisbon"]
    docs = []
    for i in range(n):
        length = rng.randint(3, 120)
        body = " ".join(words[min(int(rng.paretovariate(1.1)) - 1, len(words) - 1)] if rng.random() < 0.6
                        else rng.choice(words) for _ in range(length))
        docs.append(CardDoc(f"{rng.getrandbits(64):016x}", f"c{i}", f"Asked: {body}. read_file(path='a/b.py')"))
    for i in range(5):  # identical texts: equal scores, ordered by turn id
        docs.append(CardDoc(f"{i:016x}", f"tie{i}", "copper lisbon copper"))
    return docs


def _queries(docs: list[CardDoc], n: int = 30, seed: int = 3) -> list[str]:
    """One to four terms each, drawn from the corpus's terms: frequent, rare, common-only, unknown."""
    rng = random.Random(seed)
    vocab = sorted({t for d in docs for t in terms(d.text)})
    out = [" ".join(rng.sample(vocab, rng.randint(1, 4))) for _ in range(n - 4)]
    return [*out, "read_file", "asked read_file", "copper lisbon", "zzz_not_there copper"]


def _reference(docs: list[CardDoc]) -> Bm25Index[str]:
    ref: Bm25Index[str] = Bm25Index()
    for d in docs:
        ref.add(d.turn_id, d.text)
    return ref


def _agree(got: Ranking, want: Ranking) -> None:
    assert [t for t, _ in got] == [t for t, _ in want]
    assert all(abs(a - b) <= 1e-9 for (_, a), (_, b) in zip(got, want, strict=True))


def _ledger_of(root: Path, docs: list[CardDoc]) -> list[CardDoc]:
    """A session whose turns' cards have ``docs``'s texts as their ``asked``; returns the ledger's documents."""
    with LedgerStore(root) as store:
        for d in docs:
            turn_id, _ = store.append("s", [Directive(text=d.text), AssistantStep(
                blocks=(TextBlock(text="Done."),), stop_reason="end_turn")])
            store.append("s", [TurnCard(turn_id=turn_id, asked=d.text)])
        return docs_from_ledger(store, "s")


def _source(root: Path) -> CardSource:
    def read(session: str) -> list[CardDoc]:
        with LedgerStore(root, readonly=True) as store:
            return docs_from_ledger(store, session)
    return read


QUERY_LIMITS = (1, 3, 10, 300)


def test_whoosh_ranks_as_the_in_memory_bm25(tmp_path: Path) -> None:
    """(a) 205 generated cards, 30 queries, four limits: the same turns in the same order and the same
    scores (to 1e-9), whether the cards sit in whoosh's segments, in the buffer, or both, and after a turn
    is re-indexed (a deleted document whoosh still counts until a merge)."""
    docs = _corpus()
    queries = _queries(docs)
    ref = _reference(docs)
    assert any(is_common(len(docs), len(ref.postings[t])) for q in queries for t in terms(q) if t in ref.postings)
    index = CardIndex(tmp_path, commit_s=None, commit_docs=10_000)
    index.add("s", docs[:120])  # committed (the first documents)
    index.add("s", docs[120:])  # buffered
    for buffered in (len(docs) - 120, 0):
        assert index.count("s") == len(docs) and cardwhoosh.read_state(index.path("s"))["docs"] == len(docs) - buffered  # type: ignore[index]
        for q in queries:
            for limit in QUERY_LIMITS:
                _agree(index.search("s", q, limit), best_first(ref.search(q))[:limit])
        index.flush()
    tie = index.search("s", "copper lisbon", 3)
    assert len({s for _, s in tie}) == 1 and [t for t, _ in tie] == sorted(t for t, _ in tie)
    index.add("s", [CardDoc(docs[0].turn_id, "again", "copper copper parse_args")])  # re-indexed
    ref.add(docs[0].turn_id, "copper copper parse_args")
    for q in queries:
        _agree(index.search("s", q, 10), best_first(ref.search(q))[:10])
    assert index.count("s") == len(docs)
    index.close()


def test_recorded_sessions_rank_as_the_in_memory_bm25(imported: Imported) -> None:
    """(a) the recorded sessions' own cards, as `vak import` indexed them: whoosh's ranking is the reference's."""
    sessions = [*imported.sessions("tau")[::50], *imported.sessions("spotter"), *imported.sessions("openhands")]
    rng = random.Random(9)
    for s in sessions:
        docs = docs_from_ledger(imported.store, s)
        ref = _reference(docs)
        vocab = sorted(ref.postings)
        for q in [" ".join(rng.sample(vocab, min(len(vocab), rng.randint(1, 3)))) for _ in range(10)]:
            _agree(imported.cards.search(s, q, 5), best_first(ref.search(q))[:5])


def test_a_buffered_card_is_searchable_before_its_commit(tmp_path: Path) -> None:
    """(b) the writer finds a buffered card at once; whoosh's files and the state still hold the committed
    ones, so another process finds it after the commit (``flush``) and not before."""
    docs = _corpus(20)
    index = CardIndex(tmp_path, commit_s=None)
    index.add("s", docs[:10])
    index.add("s", [CardDoc("f" * 16, "new", "molybdenum price")])
    assert [t for t, _ in index.search("s", "molybdenum", 5)] == ["f" * 16]
    assert cardwhoosh.read_state(index.path("s"))["docs"] == 10  # type: ignore[index]
    other = CardIndex(tmp_path)
    assert other.search("s", "molybdenum", 5) == [] and other.count("s") == 10
    index.flush()
    assert [t for t, _ in other.search("s", "molybdenum", 5)] == ["f" * 16] and other.count("s") == 11
    index.close()
    other.close()


def _damage_delete(folder: Path) -> None:
    for f in folder.iterdir():
        f.unlink()
    folder.rmdir()


def _damage_truncate(folder: Path) -> None:
    seg = max((f for f in folder.iterdir() if f.suffix == ".seg"), key=lambda f: f.stat().st_size)
    seg.write_bytes(seg.read_bytes()[: seg.stat().st_size // 3])


def _damage_state(folder: Path) -> None:
    state = json.loads((folder / cardwhoosh.STATE_FILE).read_text())
    (folder / cardwhoosh.STATE_FILE).write_text(json.dumps({**state, "docs": state["docs"] - 1}))


def _damage_old_format(folder: Path) -> None:
    (folder / cardwhoosh.OLD_CARDS_FILE).write_text('{"format": "vak-cards/1", "id": "x"}\n')


def _damage_previous_format(folder: Path) -> None:
    """The state of format 2, whose terms dropped one-character runs (vak_context.bm25)."""
    state = json.loads((folder / cardwhoosh.STATE_FILE).read_text())
    (folder / cardwhoosh.STATE_FILE).write_text(json.dumps({**state, "format": "vak-cards/2"}))


@pytest.mark.parametrize("damage", [_damage_delete, _damage_truncate, _damage_state, _damage_old_format,
                                    _damage_previous_format])
def test_a_damaged_index_is_rebuilt_from_the_ledger_with_the_same_hits(tmp_path: Path, damage: object) -> None:
    """(c) and (d): deleted, a segment truncated, the state tampered, a ``cards.jsonl`` of the oldest format
    beside it, or the state of the previous format (its terms dropped one-character runs): a new CardIndex with the ledger as its source rebuilds it, with the same hits as before; a
    reopened sound index gives the same hits without rebuilding; `vak verify` reports the damage first."""
    root = tmp_path / "ledger"
    docs = _ledger_of(root, _corpus(60))
    queries = _queries(docs, 12)
    with CardIndex(root, source=_source(root)) as index:
        assert index.rebuild("s", docs) == len(docs)
        before = {q: index.search("s", q, 8) for q in queries}
    assert any(before.values())
    with CardIndex(root, source=_source(root)) as reopened:  # (d)
        assert {q: reopened.search("s", q, 8) for q in queries} == before and reopened.rebuilt == {}
    with LedgerStore(root, readonly=True) as store:
        assert card_index_findings(store, "s") is None
    assert callable(damage)
    damage(root / "sessions" / "s" / "_cards")
    if damage is not _damage_delete:
        with LedgerStore(root, readonly=True) as store:
            assert "run `vak reindex`" in (card_index_findings(store, "s") or "")
    with CardIndex(root, source=_source(root)) as fresh:
        after = {q: fresh.search("s", q, 8) for q in queries}
        assert after == before
        assert "s" in fresh.rebuilt
        if damage is _damage_previous_format:
            assert fresh.rebuilt["s"] == "it is of the older format vak-cards/2"
    with LedgerStore(root, readonly=True) as store:
        assert card_index_findings(store, "s") is None


def test_verify_reports_and_reindex_rebuilds_the_card_index(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`vak verify` stays read-only and names a card index that lacks a turn; `vak reindex` rebuilds it."""
    root = tmp_path / "ledger"
    docs = _ledger_of(root, _corpus(12))
    with CardIndex(root) as index:
        index.rebuild("s", docs[:-1])  # one turn short: what a crash that lost the buffer leaves
    files = sorted((p.name, p.stat().st_mtime_ns) for p in (root / "sessions" / "s" / "_cards").iterdir())
    assert main(["verify", str(root)]) == 0
    out = capsys.readouterr().out
    assert "the card index holds 0 turn(s) the ledger's cards do not make and lacks 1" in out
    assert sorted((p.name, p.stat().st_mtime_ns) for p in (root / "sessions" / "s" / "_cards").iterdir()) == files
    assert main(["reindex", str(root)]) == 0
    assert f"{len(docs)} turns in the card index" in capsys.readouterr().out
    with LedgerStore(root, readonly=True) as store:
        assert card_index_findings(store, "s") is None
