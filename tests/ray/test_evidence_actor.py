"""EvidenceActor on the shared local Ray: bodies, recall, digests, windows, presentations, turn close."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from vak_context.context.evidence.digest import WINDOW_CHARS
from vak_context.context.history.cards import card_ack
from vak_context.context.history.render import SHORT_ID
from vak_context.context.history.turncard import card_evidence_ids
from vak_context.events.payloads import AssistantStep, Directive, TextBlock, ToolUseBlock

pytestmark = pytest.mark.ray

BIG = "".join(f"line {i:05d}: {'x' * 30}\n" for i in range(1, 2001))  # 2,000 lines, 86,000 chars


@pytest.fixture()
def actors(ray_cluster: Any, tmp_path: Path) -> Iterator[tuple[Any, Any]]:
    import ray

    from vak_context.actors.factory import evidence_actor, ledger_actor

    root = tmp_path / "ledger"
    root.mkdir()
    ledger = ledger_actor(root)
    evidence = evidence_actor(root, ledger=ledger)
    yield ledger, evidence
    ray.kill(evidence)
    ray.kill(ledger)


def _append(ray: Any, ledger: Any, payload: Any) -> str:
    return str(ray.get(ledger.append.remote("s", [payload]))[0])


def test_store_recall_close_and_search(actors: tuple[Any, Any]) -> None:
    import ray

    ledger, ev = actors
    _append(ray, ledger, Directive(text="Read the big log and tell me what line 1500 says."))
    _append(
        ray,
        ledger,
        AssistantStep(
            blocks=(
                ToolUseBlock(id="r1", name="read_file", input={"path": "big.log"}),
                ToolUseBlock(id="r2", name="read_file", input={"path": "small.txt"}),
            )
        ),
    )
    big = ray.get(ev.store_result.remote("s", "r1", "read_file", BIG))
    small = ray.get(ev.store_result.remote("s", "r2", "read_file", "tiny file\r\nno newline at end"))
    assert big["windowed"] and len(big["content"]) <= WINDOW_CHARS
    assert f'recall({{"id": "{big["evidence_id"]}", "range": [' in big["content"]
    assert not small["windowed"] and small["content"] == "tiny file\r\nno newline at end"

    # recall: the whole body byte for byte (by id or by the 12-digit prefix cards show), or a line range
    whole = ray.get(ev.recall.remote("s", {"id": big["evidence_id"]}))
    assert whole == {"content": BIG, "is_error": False}
    short = ray.get(ev.recall.remote("s", {"id": big["evidence_id"][:SHORT_ID]}))
    assert short["content"] == BIG
    line = ray.get(ev.recall.remote("s", {"id": big["evidence_id"], "range": [1500, 1500]}))
    assert line["content"] == f"line 01500: {'x' * 30}\n"
    crlf = ray.get(ev.recall.remote("s", {"id": small["evidence_id"], "range": [1, 1]}))
    assert crlf["content"] == "tiny file\r\n"
    # bad calls are tool errors the model reads, never exceptions
    for args in (
        {"id": "f" * 64},
        {"id": big["evidence_id"], "range": [2001, 2002]},
        {"turn": 9},
        {"nope": 1},
        {"presentation": "abc123"},
    ):
        answer = ray.get(ev.recall.remote("s", args))
        assert answer["is_error"] and answer["content"], args
    # a whole body recalled inside a turn is answered under that body's own id, never stored again (a
    # fresh id made a model recall the same text again and again): over the limit, windowed under it
    _append(
        ray,
        ledger,
        AssistantStep(blocks=(ToolUseBlock(id="r3", name="recall", input={"id": big["evidence_id"]}),)),
    )
    stored = ray.get(ev.recall.remote("s", {"id": big["evidence_id"]}, "r3"))
    assert stored["windowed"] and stored["evidence_id"] == big["evidence_id"]
    assert f'"id": "{big["evidence_id"]}"' in stored["content"]

    assert ray.get(ev.window.remote("s", big["evidence_id"])) == big["content"]
    digest = ray.get(ev.digest.remote("s", small["evidence_id"]))
    assert digest.endswith(
        f"[evidence:{small['evidence_id'][:SHORT_ID]} — {len('tiny file') + 19} chars; call recall to expand]"
    )

    _append(ray, ledger, AssistantStep(blocks=(TextBlock(text="Line 1500 is all x."),)))
    card_id = ray.get(ev.close_turn.remote("s"))
    assert ray.get(ev.close_turn.remote("s")) == card_id  # written once, never rewritten
    card = ray.get(ev.card_text.remote("s", 1))
    named = card_evidence_ids(card)  # one tag per tool line, its calls' ids in order
    for eid in (big["evidence_id"], small["evidence_id"], stored["evidence_id"]):
        assert eid[:SHORT_ID] in named
    [(turn, score)] = ray.get(ev.search_turns.remote("s", "big log line 1500", 5))
    assert turn == 1 and score > 0
    record = ray.get(ev.recall.remote("s", {"turn": 1}))
    assert not record["is_error"] and "Read the big log" in record["content"]
    assert (
        f"[evidence:{big['evidence_id'][:SHORT_ID]} — {len(BIG)} chars; call recall to expand]"
        in record["content"]
    )
    before = ray.get(ev.search.remote("s", "line 1500", 5))
    assert ray.get(ev.rebuild_index.remote("s")) == 1
    assert ray.get(ev.search.remote("s", "line 1500", 5)) == before


def test_presentations_ack_dedupe_and_errors(actors: tuple[Any, Any]) -> None:
    import ray

    ledger, ev = actors
    _append(ray, ledger, Directive(text="Copper price?"))
    _append(
        ray,
        ledger,
        AssistantStep(blocks=(ToolUseBlock(id="s1", name="web_search", input={"query": "copper"}),)),
    )
    found = ray.get(ev.store_result.remote("s", "s1", "web_search", "Copper: $9,100 per tonne"))
    metric = {"label": "Copper", "value": 9100, "unit": "USD/t"}
    step = _append(
        ray,
        ledger,
        AssistantStep(
            blocks=(
                ToolUseBlock(id="c1", name="emit_metric_card", input=metric),
                ToolUseBlock(
                    id="c2", name="emit_metric_card", input=dict(reversed(list(metric.items())))
                ),  # same card
                ToolUseBlock(id="c3", name="emit_metric_card", input={"value": 1}),  # no label: invalid
            )
        ),
    )
    results = ray.get(ev.present.remote("s", step))
    assert [r["tool_use_id"] for r in results] == ["c1", "c2", "c3"]
    pid = json.loads(results[0]["content"])["presentation"]
    assert results[0]["content"] == results[1]["content"] == card_ack(pid)  # the repeat is a no-op ack
    assert results[2]["is_error"] and "label" in results[2]["content"]
    kinds = [e.kind for e in ray.get(ledger.entries.remote("s"))]
    assert kinds.count("presentation") == 1
    pres = ray.get(ledger.payload.remote(pid))
    assert pres.derived_from == (found["evidence_id"],) and pres.title == "Copper"
    recalled = ray.get(ev.recall.remote("s", {"presentation": pid[:SHORT_ID]}))
    assert json.loads(recalled["content"].split("\n", 1)[1]) == metric
    _append(ray, ledger, AssistantStep(blocks=(TextBlock(text="Copper is $9,100 a tonne."),)))
    ray.get(ev.close_turn.remote("s"))
    card = ray.get(ev.card_text.remote("s", 1))
    assert f"[presentation:{pid[:SHORT_ID]}]" in card and "emit_metric_card" not in card
    [(turn, _)] = ray.get(ev.search_turns.remote("s", "USD/t", 5))  # card values are indexed
    assert turn == 1
