"""The turn rules on the live loop, each against a scripted OpenAI-compatible model (httpx.MockTransport,
llama.cpp bodies) playing the failure the spec measured, and each leaving its ledger entry: a card
repeated nineteen times, a thinking-only completion, a stale card, a verbatim narration repeat, a card
copied from an older turn; and the thread's paused directives after a change of subject."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from vak_context.actors.local_services import InProcessServices
from vak_context.agent.loop import TurnConfig, TurnLoop, TurnReport
from vak_context.agent.workspace import TOOLS as WORKSPACE_TOOLS
from vak_context.agent.workspace import Workspace
from vak_context.context.capacity.profile import CapacityProfile, Ewma, Horizon, ProfileKey
from vak_context.context.evidence.digest import RECALL_TOOL
from vak_context.context.request.assemble import system_prompt
from vak_context.context.request.surface import Surface, ToolDecl
from vak_context.events.envelope import Mapper
from vak_context.providers.base import RetryPolicy
from vak_context.providers.openai_compat import OpenAICompatProvider
from vak_context.storage.ledger import LedgerStore

PROFILE = CapacityProfile(ProfileKey("openai-compat", "scripted"), 32_768, Horizon(16_000, 0.9, 0.0), Ewma(0.25, 3), 256)
NOIDA = {"label": "Temperature in Noida", "value": 28, "unit": "°C"}
NEWS = "1. OpenAI announces GPT-6 with longer context\n2. Anthropic publishes interpretability research\n"

Reply = Callable[[dict[str, Any], int], tuple[int, dict[str, Any]]]


def completion(text: str = "", calls: list[tuple[str, dict[str, Any]]] = (), *, prompt: int = 100,  # type: ignore[assignment]
               thinking: str = "") -> dict[str, Any]:
    """A llama.cpp /v1/chat/completions body (OpenAI shape, with llama.cpp's usage and timings)."""
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if thinking:
        message["reasoning_content"] = thinking
    if calls:
        message["tool_calls"] = [
            {"id": f"c{i}-{name}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
            for i, (name, args) in enumerate(calls)
        ]
    return {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "scripted",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": 12, "total_tokens": prompt + 12,
                  "prompt_tokens_details": {"cached_tokens": 0}},
        "timings": {"prompt_n": prompt, "prompt_ms": 50.0, "cache_n": 0},
    }


class Scripted:
    """Answers each chat call with the next scripted body; keeps every request body it got."""

    def __init__(self, replies: list[dict[str, Any]]) -> None:
        self.replies, self.bodies = replies, []  # type: list[dict[str, Any]], list[dict[str, Any]]

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(json.loads(request.content))
        return httpx.Response(200, json=self.replies[len(self.bodies) - 1])


def card(payload: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return ("emit_metric_card", payload)


@pytest.fixture()
def workspace(tmp_path: Path) -> Workspace:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "notes.txt").write_text("alpha\nbeta\ngamma\n")
    (root / "weather.txt").write_text("Noida: 31 °C, humid\n")
    (root / "news.txt").write_text(NEWS)
    return Workspace(root)


def _loop(store: LedgerStore, script: Scripted, workspace: Workspace, profile: CapacityProfile = PROFILE,
          max_steps: int = 24) -> TurnLoop:
    client = httpx.AsyncClient(transport=httpx.MockTransport(script.handle))
    provider = OpenAICompatProvider(client, base_url="http://127.0.0.1:9/v1", retry=RetryPolicy(attempts=1))
    core = [ToolDecl(RECALL_TOOL, always_loaded=True)]
    core += [ToolDecl(t.spec, always_loaded=True, observes=t.observes) for t in WORKSPACE_TOOLS]
    surface = Surface.build(core)
    config = TurnConfig(model="scripted", provider="openai-compat", system=system_prompt(surface.catalogue()),
                        surface=surface, max_steps=max_steps, max_tokens=128)
    return TurnLoop(InProcessServices(store, "s1"), provider, profile, config, workspace=workspace,
                    clock=lambda: 1_764_504_000.0)


def _payloads(store: LedgerStore, kind: str) -> list[Any]:
    mapper = Mapper()
    return [mapper.payload_of(e) for e in store.entries("s1") if e.kind == kind]


def _activities(store: LedgerStore, name: str) -> list[dict[str, Any]]:
    return [a.detail for a in _payloads(store, "activity") if a.activity == name]


def _last_user_text(body: dict[str, Any]) -> str:
    content = body["messages"][-1]["content"]
    return content if isinstance(content, str) else " ".join(p.get("text", "") for p in content)


async def _weather_turn(loop: TurnLoop) -> TurnReport:
    """An earlier turn that recorded a figure: read weather.txt, emit a 28 °C card, say so."""
    return await loop.run("Read weather.txt and show the Noida temperature as a card")


WEATHER_REPLIES = [completion(calls=[("read_file", {"path": "weather.txt"})]), completion(calls=[card(NOIDA)]),
                   completion("It is 28 °C in Noida.")]


# ------------------------------------------------------------------ repeated cards


async def test_a_card_repeated_nineteen_times_closes_on_the_card_after_three_repeat_batches(
        tmp_path: Path, workspace: Workspace) -> None:
    """A model that would emit the same card 19 times is stopped after the first card and three
    all-repeat batches: one presentation, four model calls, three rule.repeated_cards activities, a
    rule.close naming the rule, and a completed TurnCard answered by that card."""
    script = Scripted([completion(calls=[card({"label": "Team size", "value": 7})])] * 19)
    with LedgerStore(tmp_path / "ledger") as store:
        report = await _loop(store, script, workspace).run("Show our team size as a metric card")
        presentations = _payloads(store, "presentation")
        repeats = _activities(store, "rule.repeated_cards")
        closes = _activities(store, "rule.close")
        cards = _payloads(store, "turn_card")
    assert len(script.bodies) == 4 and len(presentations) == 1
    assert [r["consecutive"] for r in repeats] == [1, 2, 3]
    assert closes == [{"rule": "repeated-card", "outcome": "completed", "statement": report.answer}]
    assert report.outcome == "completed" and cards[0].outcome == "completed"
    assert [p.semantic_type for p in cards[0].answered.presentations] == ["metric"]


# ------------------------------------------------------------------ empty steps


async def test_a_thinking_only_completion_gets_one_empty_step_redo(tmp_path: Path, workspace: Workspace) -> None:
    """A step with neither text nor a call (the plan left in the reasoning channel) is not the answer: an
    [empty-step] nudge is written and reaches the model as the last user message; the redo's text answers."""
    script = Scripted([completion(thinking="Final Plan: 1. Use read_file on notes.txt"),
                       completion("The notes list alpha, beta and gamma.")])
    with LedgerStore(tmp_path / "ledger") as store:
        report = await _loop(store, script, workspace).run("What do the notes say?")
        nudges = _payloads(store, "nudge")
    assert [n.tag for n in nudges] == ["empty-step"]
    assert _last_user_text(script.bodies[1]).endswith(nudges[0].text) and "[empty-step]" in nudges[0].text
    assert report.outcome == "completed" and report.answer == "The notes list alpha, beta and gamma."


async def test_a_second_empty_step_ends_the_turn_degraded(tmp_path: Path, workspace: Workspace) -> None:
    """The redo is given once: a second thinking-only step ends the turn degraded with a rule.close whose
    statement (the turn's answer) says there is no answer, since no call found anything."""
    script = Scripted([completion(thinking="plan"), completion(thinking="plan again")])
    with LedgerStore(tmp_path / "ledger") as store:
        report = await _loop(store, script, workspace).run("What do the notes say?")
        closes = _activities(store, "rule.close")
    assert len(script.bodies) == 2 and report.outcome == "degraded"
    assert [c["rule"] for c in closes] == ["empty-step"]
    assert report.answer == closes[0]["statement"] and report.answer.endswith("the turn ends without an answer.")


async def test_a_reply_that_only_echoes_the_directive_is_redone_once_then_closed(
        tmp_path: Path, workspace: Workspace) -> None:
    """Qwen2.5-Coder-1.5B, live, answered with the request itself: a [directive-echo] nudge (not quoting the
    request) reaches the model as the last user message; a second echo ends the turn degraded on a statement."""
    script = Scripted([completion("What do the notes say?"), completion('Answer: "what do the notes say"')])
    with LedgerStore(tmp_path / "ledger") as store:
        report = await _loop(store, script, workspace).run("What do the notes say?")
        nudges = _payloads(store, "nudge")
        closes = _activities(store, "rule.close")
    assert [n.tag for n in nudges] == ["directive-echo"] and "notes" not in nudges[0].text
    assert _last_user_text(script.bodies[1]).endswith(nudges[0].text)
    assert report.outcome == "degraded" and [c["rule"] for c in closes] == ["directive-echo"]
    assert report.answer == closes[0]["statement"] and report.answer.endswith("the turn ends without an answer.")


async def test_an_empty_step_after_a_card_takes_the_card_as_the_answer(tmp_path: Path, workspace: Workspace) -> None:
    """When a card was already emitted this turn, an empty step ends the turn on it: no nudge, completed."""
    script = Scripted([completion(calls=[card({"label": "Team size", "value": 7})]), completion(thinking="done")])
    with LedgerStore(tmp_path / "ledger") as store:
        report = await _loop(store, script, workspace).run("Show our team size as a metric card")
        nudges = _payloads(store, "nudge")
        taken = _activities(store, "rule.card_is_answer")
    assert nudges == [] and len(taken) == 1 and report.outcome == "completed"


# ------------------------------------------------------------------ freshness


async def test_a_stale_card_is_intercepted_then_the_turn_fails_closed_naming_the_last_figure(
        tmp_path: Path, workspace: Workspace) -> None:
    """Asked for the current temperature with nothing observed, the model re-emits the 28 °C card from an
    earlier turn: it is intercepted with a [freshness-check] error (no presentation), the model's second
    stale card ends the turn degraded with a system statement naming that figure and its turn."""
    script = Scripted([*WEATHER_REPLIES, completion(calls=[card(NOIDA)]), completion(calls=[card(NOIDA)])])
    with LedgerStore(tmp_path / "ledger") as store:
        loop = _loop(store, script, workspace)
        await _weather_turn(loop)
        report = await loop.run("What is the current temperature in Noida?")
        presentations = _payloads(store, "presentation")
        errors = [r for r in _payloads(store, "tool_result") if r.is_error]
        intercepts = _activities(store, "rule.intercept")
        cards = _payloads(store, "turn_card")
    assert len(presentations) == 1  # the first turn's only
    assert "[freshness-check]" in errors[0].content and [i["rule"] for i in intercepts] == ["freshness-check"] * 2
    assert report.outcome == "degraded" and cards[-1].outcome == "degraded"
    assert report.answer.startswith("No current value was retrieved")
    assert '"Temperature in Noida: 28 °C" (turn 1, 2025-11-30 12:00 UTC)' in report.answer


async def test_a_stale_card_repaired_by_observing_first_is_shown(tmp_path: Path, workspace: Workspace) -> None:
    """After the intercept the model reads the file (a tool declared as observing) and emits the card:
    it is written, and the turn completes."""
    fresh = {**NOIDA, "value": 31}
    script = Scripted([completion(calls=[card(NOIDA)]), completion(calls=[("read_file", {"path": "weather.txt"})]),
                       completion(calls=[card(fresh)]), completion("It is 31 °C in Noida.")])
    with LedgerStore(tmp_path / "ledger") as store:
        report = await _loop(store, script, workspace).run("What is the current temperature in Noida?")
        presentations = _payloads(store, "presentation")
    assert [p.payload["value"] for p in presentations] == [31] and report.outcome == "completed"


async def test_a_stale_prose_answer_gets_one_redo_then_fails_closed(tmp_path: Path, workspace: Workspace) -> None:
    """A prose figure with nothing observed gets one [freshness-check] nudge; the same again fails closed."""
    script = Scripted([completion("It is 28 °C in Noida."), completion("It is 28 °C in Noida.")])
    with LedgerStore(tmp_path / "ledger") as store:
        report = await _loop(store, script, workspace).run("What is the temperature in Noida right now?")
        nudges = _payloads(store, "nudge")
    assert [n.tag for n in nudges] == ["freshness-check"] and _last_user_text(script.bodies[1]).endswith(nudges[0].text)
    assert report.outcome == "degraded" and report.answer.startswith("No current value was retrieved")


async def test_an_explicit_no_live_data_answer_is_accepted(tmp_path: Path, workspace: Workspace) -> None:
    """"I have no live data" answers a current-value question honestly: no nudge, completed."""
    script = Scripted([completion("I have no live data for Noida's temperature.")])
    with LedgerStore(tmp_path / "ledger") as store:
        report = await _loop(store, script, workspace).run("What is the temperature in Noida right now?")
        nudges = _payloads(store, "nudge")
    assert nudges == [] and report.outcome == "completed"


async def test_a_card_for_a_directive_without_deixis_is_not_gated(tmp_path: Path, workspace: Workspace) -> None:
    """A card with nothing observed, for a directive that does not ask for a current value, is shown."""
    script = Scripted([completion(calls=[card({"label": "Team size", "value": 7})]), completion("Seven.")])
    with LedgerStore(tmp_path / "ledger") as store:
        report = await _loop(store, script, workspace).run("Show our team size as a metric card")
        presentations = _payloads(store, "presentation")
        intercepts = _activities(store, "rule.intercept")
    assert len(presentations) == 1 and intercepts == [] and report.outcome == "completed"


# ------------------------------------------------------------------ model drift


async def test_a_verbatim_narration_repeat_is_nudged_and_three_end_the_turn_degraded(
        tmp_path: Path, workspace: Workspace) -> None:
    """A reply that repeats the previous turn's narration word for word gets a [steering-drift] nudge
    pointing at the current request (not quoting it: a small model copies a quoted directive); the third consecutive repeat ends the turn degraded. Far from the
    horizon (100 of 16,000 tokens) the horizon keeps its confidence."""
    said = "The notes list alpha, beta and gamma."
    script = Scripted([completion(said)] * 4)
    with LedgerStore(tmp_path / "ledger") as store:
        loop = _loop(store, script, workspace)
        await loop.run("What do the notes say?")
        report = await loop.run("Rename beta to delta in the plan")
        nudges = _payloads(store, "nudge")
        closes = _activities(store, "rule.close")
    assert [n.tag for n in nudges] == ["steering-drift"] * 2
    assert all("current request above" in n.text and "Rename beta" not in n.text for n in nudges)
    assert _last_user_text(script.bodies[2]).endswith(nudges[0].text)
    assert report.outcome == "degraded" and [c["rule"] for c in closes] == ["steering-drift"]
    assert report.profile.instruction_horizon.confidence == 0.9


async def test_drift_near_the_horizon_lowers_its_confidence(tmp_path: Path, workspace: Workspace) -> None:
    """A drift event on a request near the horizon (850 billed tokens of a 1,000-token horizon) is folded
    in as a failed instruction: the profile written after it has the horizon's confidence lowered to 0.6
    and asks for a re-probe. (The tightened horizon then no longer holds this tiny session's next step,
    so the turn ends there; only the profile record is checked.)"""
    said = "The notes list alpha, beta and gamma."
    near = CapacityProfile(ProfileKey("openai-compat", "scripted"), 32_768, Horizon(1_000, 0.9, 0.0), Ewma(0.25, 3), 64)
    script = Scripted([completion(said, prompt=850)] * 4)
    with LedgerStore(tmp_path / "ledger") as store:
        loop = _loop(store, script, workspace, profile=near)
        await loop.run("What do the notes say?")
        await loop.run("Rename beta to delta in the plan")
        nudges = _payloads(store, "nudge")
        profiles = _payloads(store, "capacity_profile")
    assert [n.tag for n in nudges][:1] == ["steering-drift"]
    assert profiles[0].instruction_horizon.confidence == 0.9
    assert min(p.instruction_horizon.confidence for p in profiles) == 0.6


async def test_a_different_answer_is_not_drift(tmp_path: Path, workspace: Workspace) -> None:
    """A follow-up answered in new words is the answer: no nudge, and the horizon keeps its confidence."""
    script = Scripted([completion("The notes list alpha, beta and gamma."), completion("Renamed beta to delta.")])
    with LedgerStore(tmp_path / "ledger") as store:
        loop = _loop(store, script, workspace)
        await loop.run("What do the notes say?")
        report = await loop.run("Rename beta to delta in the notes")
        nudges = _payloads(store, "nudge")
    assert nudges == [] and report.outcome == "completed"
    assert report.profile.instruction_horizon.confidence == 0.9


# ------------------------------------------------------------------ topic mismatch


async def test_a_card_copied_from_an_older_turn_is_intercepted_then_fails_closed_quoting_evidence(
        tmp_path: Path, workspace: Workspace) -> None:
    """Asked for AI news, the model reads the news (a retrieval succeeded) and emits the old Noida card:
    [topic-mismatch] intercepts it; the second copy ends the turn degraded quoting the news it read."""
    script = Scripted([*WEATHER_REPLIES, completion(calls=[("read_file", {"path": "news.txt"})]),
                       completion(calls=[card(NOIDA)]), completion(calls=[card(NOIDA)])])
    with LedgerStore(tmp_path / "ledger") as store:
        loop = _loop(store, script, workspace)
        await _weather_turn(loop)
        report = await loop.run("what is the current top news in AI")
        presentations = _payloads(store, "presentation")
        intercepts = _activities(store, "rule.intercept")
    assert len(presentations) == 1 and [i["rule"] for i in intercepts] == ["topic-mismatch"] * 2
    assert report.outcome == "degraded" and "> 1\t1. OpenAI announces GPT-6 with longer context" in report.answer


async def test_a_card_titled_from_the_evidence_passes(tmp_path: Path, workspace: Workspace) -> None:
    """A card sharing no word with the directive but built from what was read ("OpenAI announces GPT-6")
    is shown."""
    script = Scripted([completion(calls=[("read_file", {"path": "news.txt"})]),
                       completion(calls=[card({"label": "OpenAI announces GPT-6", "value": "headline"})]),
                       completion("Done.")])
    with LedgerStore(tmp_path / "ledger") as store:
        report = await _loop(store, script, workspace).run("what is the current top news in AI")
        presentations = _payloads(store, "presentation")
    assert len(presentations) == 1 and report.outcome == "completed"


# ------------------------------------------------------------------ thread drift


async def test_a_change_of_subject_lists_the_earlier_directive_as_paused(tmp_path: Path, workspace: Workspace) -> None:
    """After "What do the notes say?", a new subject's request carries the earlier directive in <thread>
    as "(earlier, now paused)"; a follow-up on the same subject carries no paused line."""
    script = Scripted([completion("alpha, beta, gamma"), completion("Paris."), completion("Still Paris.")])
    with LedgerStore(tmp_path / "ledger") as store:
        loop = _loop(store, script, workspace)
        await loop.run("What do the notes say?")
        await loop.run("What is the capital of France?")
        await loop.run("And the capital of France in 1800?")
    second, third = json.dumps(script.bodies[1]), json.dumps(script.bodies[2])
    assert "(earlier, now paused) What do the notes say?" in second
    assert "earlier, now paused" not in third.split("capital of France in 1800")[0].split("Paris.")[-1]


# ------------------------------------------------------------------ outcomes


async def test_a_cancelled_turn_closes_with_a_cancelled_card(tmp_path: Path, workspace: Workspace) -> None:
    """A turn cancelled while the model is answering still gets its TurnCard, with outcome "cancelled",
    and a turn.cancelled activity; the cancellation reaches the caller."""
    asked, never = asyncio.Event(), asyncio.Event()

    async def hang(_request: httpx.Request) -> httpx.Response:
        asked.set()
        await never.wait()
        raise AssertionError("unreachable: the turn is cancelled first")

    client = httpx.AsyncClient(transport=httpx.MockTransport(hang))
    provider = OpenAICompatProvider(client, base_url="http://127.0.0.1:9/v1", retry=RetryPolicy(attempts=1))
    with LedgerStore(tmp_path / "ledger") as store:
        loop = _loop(store, Scripted([]), workspace)
        loop.provider = provider
        task = asyncio.create_task(loop.run("What do the notes say?"))
        await asked.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        cards = _payloads(store, "turn_card")
        cancelled = _activities(store, "turn.cancelled")
    assert [c.outcome for c in cards] == ["cancelled"] and len(cancelled) == 1


async def test_a_new_loop_reads_the_earlier_turns_from_the_ledger(tmp_path: Path, workspace: Workspace) -> None:
    """A loop started over a session that already has turns (a restarted chat) compares against them: its
    stale card fails closed naming the figure the earlier loop's turn recorded, at that card's time."""
    script = Scripted([*WEATHER_REPLIES, completion(calls=[card(NOIDA)]), completion(calls=[card(NOIDA)])])
    with LedgerStore(tmp_path / "ledger") as store:
        await _weather_turn(_loop(store, script, workspace))
        report = await _loop(store, script, workspace).run("What is the current temperature in Noida?")
        first_card = next(e for e in store.entries("s1") if e.kind == "turn_card")
    when = datetime.fromtimestamp(first_card.time_us / 1e6, UTC).strftime("%Y-%m-%d %H:%M UTC")
    assert report.outcome == "degraded"
    assert f'"Temperature in Noida: 28 °C" (turn 1, {when})' in report.answer
