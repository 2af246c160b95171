"""The model pass at turn close (docs/STATE.md "The model pass", issue 34 item 1): the summariser's model
reads a closed turn's directive for stated items the deterministic pass missed. Its answer is read
strictly: only verbatim spans of the directive, never a duplicate of what the pass found; a malformed
answer or a failing model records nothing and the turn completes; off by default; its call is made at
turn close (after the card, before the next directive), never on a request's path; an item it found is
carried in a later request's ``<work_contract>``."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

import vak_context
from tests.fakes.stated_model import StatedModel
from vak_context.agent.stated_pass import extract_with_model
from vak_context.agent.summarise import Summariser
from vak_context.context.capacity.profile import CapacityProfile, Ewma, Horizon, ProbeProvenance, ProfileKey
from vak_context.context.planner.view import SessionView
from vak_context.context.stated.extract import extract
from vak_context.context.stated.items import StatedItem
from vak_context.context.stated.model_pass import not_allowed, read_answer, stated_prompt
from vak_context.events.envelope import Mapper
from vak_context.providers.registry import make_provider
from vak_context.storage.ledger import LedgerStore

MISSED = "Hands off the vendored folder."  # a prohibition the deterministic pass's patterns do not read
DIRECTIVE = f"Never push to main. {MISSED} Please fix the failing test in parser.py."
NEXT = "Next, rename the helper in lexer.py."
SCRIPTED = {"model": "openai-compat:scripted", "base_url": "http://127.0.0.1:9/v1", "summaries": "off"}


def found_in(directive: str) -> list[StatedItem]:
    """The deterministic pass's items of ``directive``, as the model pass is given them."""
    return [StatedItem(f"e{i}", d.category, d.text, d.key, turn_id="d1", via="directive")
            for i, d in enumerate(extract(directive))]


def answer(*items: tuple[str, str]) -> str:
    return json.dumps([{"category": c, "text": t} for c, t in items])


# ------------------------------------------------------------------ the answer, read strictly (pure)


def test_the_pass_adds_an_item_the_deterministic_pass_misses() -> None:
    found = found_in(DIRECTIVE)
    assert [it.text for it in found] == ["Never push to main."]  # the pass's patterns miss the other
    reading = read_answer(answer(("rule", "Never push to main."), ("prohibition", MISSED)), DIRECTIVE, found)
    assert [(d.category, d.text) for d in reading.drafts] == [("rule", MISSED)]
    assert reading.rejected == {"already found": 1} and not reading.malformed
    # The prompt names what was found, so the model need not list it again.
    assert "Already recorded" in stated_prompt(DIRECTIVE, [it.text for it in found])


def test_only_verbatim_spans_of_the_directive_are_kept() -> None:
    directive = "Please   keep\nthe vendored folder untouched. Run the tests."
    reading = read_answer(answer(
        ("rule", "keep the vendored folder untouched."),  # the directive's words, whitespace aside: kept
        ("rule", "Do not modify the vendored folder."),  # a rewording: invented
        ("rule", "Never push to main."),  # never said
        ("rule", "ndored folder untouched"),  # inside a word: not a span of the user's words
        ("fact", "Run"),  # one word: not a statement
    ), directive, [])
    assert [d.text for d in reading.drafts] == ["keep the vendored folder untouched."]
    assert reading.rejected == {"not in the directive": 3, "not a statement": 1}


def test_a_quoted_or_fenced_text_is_not_the_users_statement() -> None:
    directive = "Look at this config:\n```\nnever deploy on fridays\n```\n> always use tabs\nWhat does it do?"
    reading = read_answer(answer(("rule", "never deploy on fridays"), ("preference", "always use tabs")), directive, [])
    assert reading.drafts == [] and reading.rejected == {"not in the directive": 2}


@pytest.mark.parametrize("text", [
    "Sure! The rules are: never push to main.",
    '[{"category": "rule", "text": "Never push to main."},]',
    '{"category": "rule", "text": "Never push to main."}\nand that is all',
    '["Never push to main."]',
    "",
])
def test_a_malformed_answer_yields_nothing(text: str) -> None:
    reading = read_answer(text, "Never push to main.", [])
    assert reading.drafts == [] and reading.malformed


def test_fenced_json_and_json_lines_are_read_and_unknown_categories_dropped() -> None:
    directive = "Hands off the vendored folder. The office closes at 6pm. I like short answers."
    fenced = "```json\n" + answer(("rule", "Hands off the vendored folder.")) + "\n```"
    assert [d.text for d in read_answer(fenced, directive, []).drafts] == ["Hands off the vendored folder."]
    lines = "\n".join(json.dumps(o) for o in [{"category": "FACT", "text": "The office closes at 6pm.", "key": "x"},
                                              {"category": "mood", "text": "I like short answers."}])
    reading = read_answer(lines, directive, [])
    assert [(d.category, d.text) for d in reading.drafts] == [("fact", "The office closes at 6pm.")]
    assert reading.drafts[0].key != "x"  # the engine keys it; the model's key is not used
    assert reading.rejected == {"not an item": 1}


def test_duplicates_of_found_items_and_items_in_force_are_dropped() -> None:
    directive = "The budget is $100. Spend at most a hundred dollars, really. Hands off the vendored folder."
    found = found_in(directive)
    assert [it.key for it in found] == ["budget"]
    in_force = (StatedItem("c1", "rule", "Hands off the vendored folder.", "hands off the vendored folder", turn=1),)
    reading = read_answer(answer(
        ("constraint", "The budget is $100. Spend"),  # overlaps the found item's words
        ("rule", "Hands off the vendored folder."),  # in force already, in the same words
    ), directive, found, in_force)
    assert reading.drafts == [] and reading.rejected == {"already found": 2}


def test_an_item_keyed_as_one_in_force_supersedes_it() -> None:
    """Keyed as the deterministic pass keys it: a paraphrase of an item in force about the same subject with a
    new value takes its key, so it replaces it, as the pass's own item would."""
    directive = "Cheaper please. We can afford $50 of API calls this sprint, no more."
    assert extract(directive) == []  # a phrasing the pass's patterns do not read
    old = "We can afford $100 of API calls this sprint."
    in_force = (StatedItem("c1", "constraint", old, "afford 100 api calls sprint", turn=1),)
    reading = read_answer(answer(("constraint", "We can afford $50 of API calls this sprint, no more.")), directive, [],
                          in_force)
    assert [d.key for d in reading.drafts] == ["afford 100 api calls sprint"]


def profile(horizon: int, passed_any: bool | None = None) -> CapacityProfile:
    return CapacityProfile(ProfileKey("openai-compat", "scripted"), 8_000, Horizon(horizon, 0.5, 0.0), Ewma(0.25),
                           512, provenance=ProbeProvenance(passed_any=passed_any))


def test_the_profile_allows_the_pass_within_its_horizon_and_window() -> None:
    assert not_allowed(profile(6_000), 900, window_tokens=8_000, on_bound_model=True) is None
    assert "instruction horizon (600)" in str(not_allowed(profile(600), 900, window_tokens=8_000, on_bound_model=True))
    assert "following none" in str(not_allowed(profile(6_000, False), 900, window_tokens=8_000, on_bound_model=True))
    assert "window (800)" in str(not_allowed(profile(6_000), 900, window_tokens=800, on_bound_model=False))
    # Another model writes the side calls: the bound model's horizon and probe say nothing about it.
    assert not_allowed(replace(profile(600), provenance=ProbeProvenance(passed_any=False)), 900, window_tokens=8_000,
                       on_bound_model=False) is None


# ------------------------------------------------------------------ at turn close, through the engine


def ledger_rows(engine: vak_context.Engine, session: str) -> list[tuple[str, Any]]:
    mapper = Mapper()
    return [(e.kind, mapper.payload_of(e)) for e in engine.ledger().entries(session)]


def store_details(store: LedgerStore) -> list[dict[str, Any]]:
    mapper = Mapper()
    return pass_details([(e.kind, mapper.payload_of(e)) for e in store.entries("s")])


def pass_details(rows: list[tuple[str, Any]]) -> list[dict[str, Any]]:
    return [dict(p.detail) for k, p in rows if k == "activity" and p.activity == "stated.extract"]


async def run(tmp_path: Path, model: StatedModel, directives: list[str], **options: Any) -> tuple[
        list[vak_context.TurnResult], list[vak_context.Stated], list[tuple[str, Any]]]:
    async with httpx.AsyncClient(transport=httpx.MockTransport(model.handle)) as client:
        async with vak_context.Engine.open(tmp_path / "ledger") as engine:
            session = engine.session("s", **{**SCRIPTED, "window": 8_000, **options}, http_client=client)
            results = [await session.run(d) for d in directives]
            return results, list(session.state()), ledger_rows(engine, "s")


async def test_an_item_the_model_found_is_recorded_at_turn_close_and_carried(tmp_path: Path) -> None:
    pad = "Background: " + " ".join(f"context{i}" for i in range(150))
    model = StatedModel(stated_answer=lambda prompt: answer(("rule", MISSED)) if MISSED in prompt else "[]")
    results, state, rows = await run(tmp_path, model, [f"{DIRECTIVE} {pad}", *(f"Next task {i}. {pad}" for i in range(5))],
                                     stated_pass="model", window=1_900, output_reserve=200)
    assert all(r.outcome == "completed" for r in results)
    assert [(s.category, s.text, s.via, s.turn) for s in state] == [
        ("rule", "Never push to main.", "directive", 1), ("rule", MISSED, "model", 1)]
    # One side call per turn, each after its turn's requests: never on a request's path.
    assert model.order == ["turn", "stated"] * 6
    kinds = [k if k != "activity" else p.activity for k, p in rows]
    first_card, first_pass = kinds.index("turn_card"), kinds.index("stated.extract")
    assert first_card < first_pass < kinds.index("directive", first_card)
    assert kinds[first_pass + 1] == "work_contract"  # the item, right after the pass's record of its cost
    details = pass_details(rows)
    assert [d["kept"] for d in details] == [1, 0, 0, 0, 0, 0] and details[0]["found"] == 1
    assert details[0]["calls"][0]["usage"]["input_tokens"] > 0 and "failed" not in details[0]
    # Once turn 1 is no longer carried whole, the item the model found is in the contract, in the user's words.
    assert results[-1].steps[0].fidelity["full"] < 6
    assert f"rule: {MISSED} (turn 1)" in model.contracts()[-1]
    assert all(MISSED not in c for c in model.contracts()[:2])  # turn 2 carries turn 1 whole: not repeated


async def test_an_invented_item_is_not_recorded(tmp_path: Path) -> None:
    model = StatedModel(stated_answer=answer(("rule", "Never delete the vendored folder.")))
    results, state, rows = await run(tmp_path, model, [DIRECTIVE], stated_pass="model")
    assert results[0].outcome == "completed"
    assert [s.via for s in state] == ["directive"]
    assert pass_details(rows)[0]["rejected"] == {"not in the directive": 1}


@pytest.mark.parametrize("fails", [False, True], ids=["malformed", "failing"])
async def test_a_malformed_answer_or_a_failing_model_records_nothing(tmp_path: Path, fails: bool) -> None:
    model = StatedModel(stated_answer="Here they are: Hands off the vendored folder.", stated_fails=fails)
    results, state, rows = await run(tmp_path, model, [DIRECTIVE, NEXT], stated_pass="model")
    assert [r.outcome for r in results] == ["completed", "completed"]
    assert [s.text for s in state] == ["Never push to main."]
    details = pass_details(rows)
    assert len(details) == 2 and all(("side model is down" if fails else "malformed") in d["failed"] for d in details)
    assert not any(k == "work_contract" and p.via == "model" for k, p in rows)


async def test_the_pass_is_not_made_when_off(tmp_path: Path) -> None:
    model = StatedModel(stated_answer=answer(("rule", MISSED)))
    results, state, rows = await run(tmp_path, model, [DIRECTIVE, NEXT])  # the default: deterministic
    assert [r.outcome for r in results] == ["completed", "completed"]
    assert model.stated_prompts == [] and pass_details(rows) == []
    assert [s.via for s in state] == ["directive"]


async def test_a_profile_that_does_not_allow_it_records_why_and_calls_nothing(tmp_path: Path) -> None:
    """The pass over a closed turn, where the probe found the bound model following none of its rungs."""
    model = StatedModel(stated_answer=answer(("rule", MISSED)))
    await run(tmp_path, model, [DIRECTIVE])
    async with httpx.AsyncClient(transport=httpx.MockTransport(model.handle)) as client:
        provider = make_provider("openai-compat:scripted", client, base_url="http://127.0.0.1:9/v1").provider
        summariser = Summariser(provider, "scripted", window_tokens=8_000, stated_pass=True)
        with LedgerStore(tmp_path / "ledger") as store:
            head = store.head("s")
            assert head is not None
            view = SessionView.build(store.chain_to_root(head), 0.25)
            directive_id = view.index.turn(1).id
            args: dict[str, Any] = {"directive_id": directive_id, "directive": DIRECTIVE, "summariser": summariser}
            written = await extract_with_model(store, "s", view, profile(6_000, passed_any=False), **args)
            assert model.stated_prompts == [] and len(written) == 1  # the activity alone
            assert "following none" in store_details(store)[-1]["skipped"]
            # A directive of one word states nothing: no call, nothing written.
            assert await extract_with_model(store, "s", view, profile(6_000), **{**args, "directive": "ok"}) == []
            assert model.stated_prompts == []
            # Allowed, the same call writes the item, folded into the view it was given.
            written = await extract_with_model(store, "s", view, profile(6_000), **args)
            assert len(model.stated_prompts) == 1 and len(written) == 2
            assert [(it.text, it.via) for it in view.index.stated.current()][-1] == (MISSED, "model")


async def test_a_bad_setting_is_a_typed_error(tmp_path: Path) -> None:
    with vak_context.Engine.open(tmp_path / "ledger") as engine:
        with pytest.raises(vak_context.InvalidInput, match="stated_pass must be one of 'deterministic', 'model'"):
            engine.session("s", model="openai-compat:scripted", stated_pass="llm")
