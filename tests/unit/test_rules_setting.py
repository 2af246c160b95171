"""Rules as a session setting (issue 33): the setting's forms and its typed error; the turn rules under
``enforce``, ``observe`` and ``off`` (what the model sees, what the ledger records); an undeclared
``observes`` flag counting as an observation; the freshness rule never saying nothing was observed after a
tool succeeded; a short reply repeated across unrelated turns never being drift. Then the defaults through
the public API: ``Session.run`` enforces, ``Session.begin`` observes; and the engine's own loop accepting
"Done." after a successful tool call, turn after turn."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

import vak_context
from tests.fakes.weather import ScriptedChat, chat_completion, content_text
from vak_context.agent.turnrules import TurnRules
from vak_context.context.rules import drift
from vak_context.context.rules.drift import PriorTurn
from vak_context.context.rules.setting import MODES, RULES, RuleSetting, rule_setting
from vak_context.events.envelope import Mapper
from vak_context.events.payloads import Activity, Nudge

LIVE = "What is the copper price today?"


class Recorded:
    """The rules' services as plain lists: what they append, and the error results they store."""

    def __init__(self) -> None:
        self.payloads: list[Any] = []
        self.results: list[tuple[str, str, bool]] = []

    async def append(self, payloads: Sequence[Any]) -> list[str]:
        self.payloads += payloads
        return [f"e{len(self.payloads)}"]

    async def store_result(self, tool_use_id: str, tool_name: str, body: str, is_error: bool) -> dict[str, Any]:
        self.results.append((tool_use_id, body, is_error))
        return {"tool_use_id": tool_use_id, "content": body, "is_error": is_error}

    def activities(self, name: str) -> list[dict[str, Any]]:
        return [dict(p.detail) for p in self.payloads if isinstance(p, Activity) and p.activity == name]


# ------------------------------------------------------------------ the setting's forms


def test_the_forms_of_a_setting() -> None:
    assert rule_setting(None, "observe") == RuleSetting("observe")
    assert rule_setting("off", "enforce") == RuleSetting("off")
    both = rule_setting("observe, freshness-check=enforce", "enforce")
    assert both.mode("freshness-check") == "enforce" and both.mode("steering-drift") == "observe"
    assert str(both) == "observe,freshness-check=enforce"
    over = rule_setting("steering-drift=off", "observe")  # only overrides: over the driver's default
    assert over.mode("steering-drift") == "off" and over.mode("empty-step") == "observe"
    mapped = rule_setting({"freshness-check": "off"}, "enforce")
    assert mapped.mode("freshness-check") == "off" and mapped.mode("repeated-call") == "enforce"


@pytest.mark.parametrize("bad", ["strict", "", "observe,bogus=off", "freshness-check=loud", "off,observe",
                                 {"drift": "off"}, 3])
def test_a_bad_setting_is_a_typed_error_naming_what_is_allowed(bad: Any) -> None:
    with pytest.raises(vak_context.InvalidRules) as got:
        rule_setting(bad, "enforce")
    assert isinstance(got.value, vak_context.InvalidInput)
    message = str(got.value)
    assert all(m in message for m in MODES) and all(r in message for r in RULES) and "docs/DRIFT.md" in message


# ------------------------------------------------------------------ the rules under each mode


@pytest.mark.parametrize("mode", MODES)
async def test_a_freshness_redo_under_each_mode(mode: str) -> None:
    services = Recorded()
    rules = TurnRules(services, setting=RuleSetting(mode))  # type: ignore[arg-type]
    rules.begin(LIVE)
    verdict = await rules.on_reply("Copper is at 9,400 dollars.")
    nudges = [p for p in services.payloads if isinstance(p, Nudge)]
    if mode == "enforce":
        assert verdict.action == "redo" and verdict.tag == "freshness-check" and len(nudges) == 1
        assert services.activities("rule.freshness")[0]["acted"] is True
        return
    # Nothing the model sees changes: the reply is the answer, no nudge.
    assert verdict == drift.Verdict("answer", text="Copper is at 9,400 dollars.") and nudges == []
    if mode == "off":
        assert services.payloads == []
        return
    assert services.activities("rule.observed") == [
        {"rule": "freshness-check", "would": "redo", "text": drift.FRESHNESS_NUDGE}]
    assert services.activities("rule.freshness")[0] == {
        "verdict": "nothing observed", "acted": False, "mode": "observe", "observed_by": [], "undeclared": [],
        "succeeded": []}


@pytest.mark.parametrize("mode", MODES)
async def test_a_repeated_call_under_each_mode(mode: str) -> None:
    services = Recorded()
    rules = TurnRules(services, setting=RuleSetting(mode))  # type: ignore[arg-type]
    rules.begin("list the notes folder")
    rules.ran([("list_dir", {"path": "notes"}, "t1", "a.md")])
    skipped, verdict = await rules.gate_repeats("s2", [(0, "t2", "list_dir", {"path": "notes"})])
    assert verdict.action == "continue"
    if mode == "enforce":
        assert skipped == {0} and services.results[0][2] is True
        return
    assert skipped == set() and services.results == []  # the call runs again, as the model asked
    observed = services.activities("rule.observed")
    assert [(d["rule"], d["would"], d["calls"]) for d in observed] == (
        [("repeated-call", "skip", ["t2"])] if mode == "observe" else [])


async def test_a_per_rule_override() -> None:
    services = Recorded()
    rules = TurnRules(services, setting=rule_setting("off,freshness-check=enforce", "observe"))
    rules.begin(LIVE)
    assert (await rules.on_reply("Copper is at 9,400 dollars.")).action == "redo"
    rules = TurnRules(services, setting=rule_setting("enforce,freshness-check=off", "observe"))
    rules.begin(LIVE)
    assert (await rules.on_reply("Copper is at 9,400 dollars.")).action == "answer"


# ------------------------------------------------------------------ undeclared observers


def test_an_undeclared_tool_counts_as_an_observation() -> None:
    state = drift.note_results(drift.start(LIVE), [(None, False, "copper 9400 USD/t")], ["quote"])
    assert state.observed and state.undeclared == ("quote",)
    assert drift.after_reply(state, "Copper is at 9,400 USD/t.", [])[1].action == "answer"
    failed = drift.note_results(drift.start(LIVE), [(None, True, "quote: timeout")], ["quote"])
    assert not failed.observed and failed.succeeded == ()


def test_the_freshness_rule_never_says_nothing_was_observed_after_a_tool_succeeded() -> None:
    """Only a tool that declared ``observes=False`` can succeed without counting; the rule then names it."""
    state = drift.note_results(drift.start(LIVE), [(False, False, "2 + 2 = 4")], ["calculator"])
    assert not state.observed and state.succeeded == ("calculator",)
    state, redo = drift.after_reply(state, "Copper is at 9,400 dollars.", [])
    _, close = drift.after_reply(state, "Copper is at 9,400 dollars.", [])
    _, errors, gated = drift.gate_cards(state, [(0, {"label": "Copper", "value": 9400})], [])
    for text in (redo.text, close.text, errors[0], gated.text):
        assert "calculator" in text or "still no tool" in text
        assert "no tool that reads the world as it is now succeeded" not in text
        assert "has succeeded in this turn" not in text
    assert close.action == "close" and "declared as not reading" in close.text


# ------------------------------------------------------------------ short replies are not drift


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("after_call", [False, True])
async def test_a_short_reply_repeated_across_unrelated_turns_is_not_drift(mode: str, after_call: bool) -> None:
    prior = [PriorTurn("Summarise the quarterly invoices", "OK."), PriorTurn("Book a meeting room", "Done.")]
    for reply in ("OK.", "Done.", "Yes, it is done."):
        services = Recorded()
        rules = TurnRules(services, prior, setting=RuleSetting(mode))  # type: ignore[arg-type]
        rules.begin("Translate this greeting into French")
        if after_call:
            await rules.after_calls([(None, False, "Bonjour")], [], only_cards=False, names=["translate"])
        verdict = await rules.on_reply(reply)
        assert verdict == drift.Verdict("answer", text=reply)
        assert services.activities("rule.observed") == []
    # A longer reply repeated word for word on another subject is still drift.
    long = [PriorTurn("Summarise the quarterly invoices", "The invoices total 4,200 euros this quarter.")]
    state = drift.start("Book a meeting room")
    assert drift.after_reply(state, "The invoices total 4,200 euros this quarter.", long)[1].tag == "steering-drift"


# ------------------------------------------------------------------ the defaults through the public API


def live_answer(body: dict[str, Any]) -> dict[str, Any]:
    """A model that answers a live question from nothing, then honestly once nudged."""
    nudged = any("[freshness-check]" in content_text(m) for m in body["messages"])
    return chat_completion("I have no live data for copper." if nudged else "Copper is at 9,400 dollars.")


def activities_of(engine: vak_context.Engine, session: str, name: str) -> list[dict[str, Any]]:
    mapper = Mapper()
    return [dict(p.detail) for e in engine.ledger().entries(session) if e.kind == "activity"
            and (p := mapper.payload_of(e)).activity == name]


async def test_run_enforces_and_begin_observes_by_default(tmp_path: Path) -> None:
    model = ScriptedChat(live_answer)
    async with httpx.AsyncClient(transport=httpx.MockTransport(model.handle)) as client:
        with vak_context.Engine.open(tmp_path / "ledger") as engine:
            options: dict[str, Any] = {"model": "openai-compat:scripted", "base_url": "http://127.0.0.1:9/v1",
                                       "http_client": client, "window": 8_000}
            async with engine.session("own", **options) as session:
                assert session.rules is None
                ran = await session.run(LIVE)  # the engine is the agent: enforce
            assert ran.answer == "I have no live data for copper." and len(model.requests) == 2
            async with engine.session("callers", **options) as session:
                turn = await session.begin(LIVE)  # the caller's loop: observe
                request = await turn.request()
                assert request is not None
                action = await turn.reply(model.answer(request.body))
                assert action.done and action.answer == "Copper is at 9,400 dollars."
                assert turn.result.outcome == "completed"
            observed = activities_of(engine, "callers", "rule.observed")
            assert [(d["rule"], d["would"]) for d in observed] == [("freshness-check", "redo")]
            async with engine.session("own-observe", rules="observe", **options) as session:
                calls = len(model.requests)
                assert (await session.run(LIVE)).answer == "Copper is at 9,400 dollars."
                assert len(model.requests) == calls + 1
            async with engine.session("own-off", rules={"freshness-check": "off"}, **options) as session:
                assert session.rules == "freshness-check=off"
                assert (await session.run(LIVE)).answer == "Copper is at 9,400 dollars."
                session.rules = "enforce"
                assert (await session.run(LIVE)).answer == "I have no live data for copper."
            assert activities_of(engine, "own-off", "rule.observed") == []
            with pytest.raises(vak_context.InvalidRules):
                engine.session("bad", rules="loose", **options)


async def test_the_engines_loop_accepts_done_after_a_successful_tool_call(tmp_path: Path) -> None:
    """Three turns on unrelated subjects, each a call of the embedder's tool then "Done.": each completes
    with "Done." in two model calls (no redo, no degraded close)."""
    ran: list[str] = []

    def archive(name: str) -> str:
        """Archive a document by name.

        Args:
            name: the document
        """
        ran.append(name)
        return f"archived {name}"

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        if body["messages"][-1]["role"] == "tool":
            return chat_completion("Done.")
        return chat_completion(calls=[(f"call-{len(ran)}", "archive", {"name": f"doc-{len(ran)}"})])

    model = ScriptedChat(answer)
    directives = ["Archive the quarterly invoices", "File the meeting notes", "Store yesterday's photos"]
    async with httpx.AsyncClient(transport=httpx.MockTransport(model.handle)) as client:
        with vak_context.Engine.open(tmp_path / "ledger") as engine:
            async with engine.session("done-1", model="openai-compat:scripted", base_url="http://127.0.0.1:9/v1",
                                      http_client=client, tools=[archive], window=8_000) as session:
                results = [await session.run(d) for d in directives]
            assert activities_of(engine, "done-1", "rule.close") == []
    assert [(r.outcome, r.answer) for r in results] == [("completed", "Done.")] * 3
    assert len(model.requests) == 6 and ran == ["doc-0", "doc-1", "doc-2"]
