"""One tokeniser and one BM25 (``vak_context.bm25``): the card index, ``find_tools`` and the planner's relevance
rank one shared fixture the same way.

The fixture is a tool catalogue. Each tool's ``find_tools`` document (``vak_context.context.request.surface.tool_document``)
is also one turn of a session written to a real on-disk ledger: the turn's directive and its card's
``asked`` are that document, so its index text is too. The card index is rebuilt from that ledger
(``vak_context.agent.carddocs.docs_from_ledger``), the planner reads it through ``SessionView`` (its list path and
its numpy path), and ``find_tools`` ranks the catalogue. Tool names are sorted, so tool i is turn i.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from vak_context.agent.carddocs import docs_from_ledger
from vak_context.bm25 import Bm25Index, best_first, terms
from vak_context.context.planner.view import SessionView
from vak_context.context.request.messages import ToolSpec
from vak_context.context.request.surface import Surface, ToolDecl, tool_document
from vak_context.events.payloads import AssistantStep, Directive, TextBlock, TurnCard
from vak_context.storage.cardindex import CardDoc, CardIndex
from vak_context.storage.ledger import LedgerStore

CATALOGUE = [  # names sorted: the catalogue's order is the turns' order
    ("cache_stats", "Report the prompt cache's hit rate: cached_tokens / prompt_tokens, per slot; data per request."),
    ("convert_currency", "Convert an amount between currencies (EUR → USD, ¥ → €) at today's rate."),
    ("geo_lookup", "Look up a place: Zürich, São Paulo, Kraków, 東京 (Tokyo); returns lat/lon data."),
    ("git_blame", "Show who last changed each line of a file (git blame -L 10,20 src/main.rs)."),
    ("http_get", "Fetch a URL with GET; follows redirects; returns status, headers and the body data."),
    ("json_query", "Run a jq-style path ($.items[0].price) over a JSON document's data."),
    ("parse_args", "Parse argv into flags: --verbose, -n 5, --out=path; like argparse.ArgumentParser.parse_args()."),
    ("regex_search", r"Search files for a regular expression, e.g. r'def\s+\w+\(' or TODO|FIXME; data too."),
    ("run_sql", "Run a SQL query (SELECT … FROM orders WHERE total > 100) against the warehouse data."),
    ("send_email", "Send an e-mail to a recipient; subject and body as plain text or Markdown."),
    ("translate_text", "Translate text between languages: naïve café → cafe naif; keeps ß and emoji 🎉; data."),
    ("weather_forecast", "The weather forecast for Zürich or any city, today and the next 7 days (°C, mm of rain)."),
]

QUERIES = [
    "Zürich weather",  # a non-ASCII letter splits a word: zürich gives "rich" in the documents and the query
    "São Paulo café prices",
    "parse_args ArgumentParser",  # code identifiers stay one term each
    "argparse.ArgumentParser.parse_args()",
    "$.items[0].price",  # punctuation separates terms
    "cached_tokens/prompt_tokens hit-rate",
    "git blame -L 10,20 src/main.rs",
    "EUR → USD ¥ €",
    "SELECT total FROM orders",
    "run a query",
    "data weather",  # "data" is in more than half the documents: every ranker skips it here
]


@dataclass
class Rankers:
    surface: Surface
    cards: CardIndex
    views: list[SessionView]  # the planner's view: its list path, then its numpy path
    turn_ids: list[str]


def _write_session(store: LedgerStore) -> list[str]:
    """One closed turn per tool: directive, answer, and a card whose index text is the tool's document."""
    turn_ids = []
    for name, description in CATALOGUE:
        document = tool_document(_tool(name, description))
        turn_id, _ = store.append("s", [Directive(text=document), _answer()])
        store.append("s", [TurnCard(turn_id=turn_id, asked=document)])
        turn_ids.append(turn_id)
    return turn_ids


def _tool(name: str, description: str) -> ToolDecl:
    return ToolDecl(ToolSpec(name=name, description=description, input_schema={"type": "object"}))


def _answer() -> AssistantStep:
    return AssistantStep(blocks=(TextBlock(text="Done."),), stop_reason="end_turn")


@pytest.fixture(scope="module")
def rankers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rankers]:
    root = tmp_path_factory.mktemp("ranking") / "ledger"
    with LedgerStore(root) as store:
        turn_ids = _write_session(store)
        cards = CardIndex(root)
        docs = docs_from_ledger(store, "s")
        assert cards.rebuild("s", docs) == len(CATALOGUE)
        entries = store.chain_to_root(store.head("s") or "")
    views = [SessionView(), SessionView()]
    views[1].bm25.VECTOR_POSTINGS = 0  # every query through the numpy columns
    for view in views:
        view.add_all(entries)
    surface = Surface.build(_tool(name, description) for name, description in CATALOGUE)
    assert [t.name for t in surface.deferred] == [name for name, _ in CATALOGUE]
    # the three index the same strings
    assert [d.text for d in docs] == [tool_document(t) for t in surface.deferred]
    yield Rankers(surface, cards, views, turn_ids)
    cards.close()


def _card_ranking(r: Rankers, query: str) -> list[tuple[int, float]]:
    return [(r.turn_ids.index(tid), score) for tid, score in r.cards.search("s", query, len(CATALOGUE))]


def _planner_ranking(view: SessionView, turn_ids: list[str], query: str) -> list[tuple[int, float]]:
    return [(turn_ids.index(tid), score) for tid, score in best_first(view.relevance(query))]


def _tool_ranking(r: Rankers, query: str) -> list[int]:
    names = [t.name for t in r.surface.deferred]
    return [names.index(t.name) for t in r.surface.find(query, limit=len(CATALOGUE))]


@pytest.mark.parametrize("query", QUERIES)
def test_card_index_find_tools_and_planner_rank_the_same(rankers: Rankers, query: str) -> None:
    """For each query (Unicode, punctuation, code identifiers, a common term): the card index's ranking
    and scores equal the planner's relevance, float for float, on both of its paths; find_tools returns
    the same tools in the same order; the ranking is not empty and has no ties, so the order is the
    scores' order and not a tie-break's."""
    cards = _card_ranking(rankers, query)
    assert cards, query
    assert len({score for _, score in cards}) == len(cards), f"{query!r}: tied scores"
    for view in rankers.views:
        assert _planner_ranking(view, rankers.turn_ids, query) == cards
    assert _tool_ranking(rankers, query) == [turn for turn, _ in cards]


def test_a_query_of_common_terms_only_is_searched_but_not_planned_on(rankers: Rankers) -> None:
    """"data" is in more than half the documents: the planner's relevance skips it (no turn scores), while
    the card index and find_tools score it (``Bm25Index.search``): the same tools, best first. Documents of
    one length tie here; ties go by document key (a turn id for the card index, the catalogue position
    for find_tools), so within a tie the two orders may differ: the test compares scores in order."""
    assert sum("data" in terms(tool_document(t)) for t in rankers.surface.deferred) * 2 > len(CATALOGUE)
    for view in rankers.views:
        assert view.relevance("data") == {}
    cards = _card_ranking(rankers, "data")
    assert len(cards) > len(CATALOGUE) // 2
    card_score = dict(cards)
    tools = _tool_ranking(rankers, "data")
    assert sorted(tools) == sorted(card_score)
    assert [card_score[turn] for turn in tools] == [score for _, score in cards]


def test_text_with_no_ascii_term_ranks_nothing_anywhere(rankers: Rankers) -> None:
    """A query with no ASCII letter or digit ("東京", an emoji) has no terms: nothing is found by any ranker."""
    for query in ("東京", "🎉 €"):
        assert terms(query) == []
        assert rankers.cards.search("s", query, 5) == []
        assert rankers.surface.find(query, limit=len(CATALOGUE)) == ()
        assert all(view.relevance(query) == {} for view in rankers.views)


def test_the_tokeniser_keeps_identifiers_and_splits_on_punctuation_and_non_ascii() -> None:
    """``terms``: lowercase; identifiers with underscores and digits stay whole; punctuation and non-ASCII
    letters separate; stop words go; a one-character run is a term (a digit, a one-letter name)."""
    assert terms("parse_args(argv) x86_64 ExitPlanMode") == ["parse_args", "argv", "x86_64", "exitplanmode"]
    assert terms("foo.bar()/baz-qux, $.items[0]") == ["foo", "bar", "baz", "qux", "items", "0"]
    assert terms("Zürich São Paulo naïve") == ["z", "rich", "o", "paulo", "na", "ve"]
    assert terms("What is the price of a car?") == ["price", "car"]
    assert terms("topic 1 vector databases, x = 2") == ["topic", "1", "vector", "databases", "x", "2"]
    assert terms("the user's file doesn't open") == ["user", "file", "doesn", "open"]


def test_card_index_on_disk_gives_the_in_memory_scores_and_picks_up_commits(tmp_path: Path) -> None:
    """The card index's scores equal a ``Bm25Index`` over the same documents, float for float; documents
    committed by another CardIndex on the same folder (another process's writer) and a re-indexed turn
    are seen by the next search; a delete and rebuild by the other writer is seen too."""
    reader, writer = CardIndex(tmp_path), CardIndex(tmp_path)
    docs = [CardDoc(f"t{i}", f"c{i}", tool_document(_tool(n, d))) for i, (n, d) in enumerate(CATALOGUE)]
    writer.add("s", docs[:6])
    reference: Bm25Index[str] = Bm25Index()
    for d in docs[:6]:
        reference.add(d.turn_id, d.text)
    assert reader.search("s", "query data", 10) == best_first(reference.search("query data"))
    writer.add("s", docs[6:])
    writer.add("s", [CardDoc("t0", "c0", "weather forecast for Lisbon")])  # re-indexes turn t0
    writer.flush()  # what another process sees is what was committed
    for d in docs[6:]:
        reference.add(d.turn_id, d.text)
    reference.add("t0", "weather forecast for Lisbon")
    for query in QUERIES:
        assert _close(reader.search("s", query, 20), best_first(reference.search(query))), query
    assert reader.count("s") == len(CATALOGUE)
    writer.rebuild("s", docs[:2])
    assert reader.count("s") == 2 and reader.search("s", "Lisbon", 5) == []
    writer.close()
    reader.close()


def _close(got: list[tuple[str, float]], want: list[tuple[str, float]]) -> bool:
    """Same turns in the same order, scores within 1e-9 (whoosh sums a document's terms in its own order)."""
    return [t for t, _ in got] == [t for t, _ in want] and all(
        abs(a - b) <= 1e-9 for (_, a), (_, b) in zip(got, want, strict=True))


def test_a_buffered_turn_is_found_by_its_writer_and_by_others_once_committed(tmp_path: Path) -> None:
    """A process that dies before committing loses only its buffer: until the commit, another CardIndex
    (another process) finds the committed turns only; the writer finds the buffered one too."""
    index = CardIndex(tmp_path, commit_s=None)
    index.add("s", [CardDoc("t1", "c1", "copper price trend")])  # a session's first documents commit at once
    index.add("s", [CardDoc("t3", "c3", "copper mine output")])  # buffered
    assert [t for t, _ in CardIndex(tmp_path).search("s", "copper", 5)] == ["t1"]
    assert sorted(t for t, _ in index.search("s", "copper", 5)) == ["t1", "t3"]
    index.close()
    fresh = CardIndex(tmp_path)
    assert sorted(t for t, _ in fresh.search("s", "copper", 5)) == ["t1", "t3"]
    assert fresh.count("s") == 2 and [t for t, _ in fresh.search("s", "mine", 5)] == ["t3"]
