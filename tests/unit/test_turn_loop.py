"""The turn loop against a scripted OpenAI-compatible model (httpx.MockTransport, llama.cpp's documented
bodies): what each step writes, calls in call order, inline fences, the frozen plan, over-length retry,
failing tools and find_tools promotion."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.scripted import (
    PROFILE,
    Reply,
    Scripted,
    completion,
    fence,
    fixed,
    notes_workspace,
    payloads_of,
    tool_surface,
)
from vak_context.actors.local_services import InProcessServices
from vak_context.agent.loop import TurnConfig, TurnLoop
from vak_context.agent.workspace import Workspace
from vak_context.context.capacity.profile import CapacityProfile, Ewma, Horizon, ProfileKey
from vak_context.context.request.assemble import system_prompt
from vak_context.context.request.messages import ToolSpec
from vak_context.context.request.surface import Surface, ToolDecl
from vak_context.providers.base import RetryPolicy
from vak_context.providers.openai_compat import OpenAICompatProvider
from vak_context.storage.ledger import LedgerStore


@pytest.fixture()
def workspace(tmp_path: Path) -> Workspace:
    return notes_workspace(tmp_path)


def _loop(store: LedgerStore, script: Scripted, workspace: Workspace, surface: Surface | None = None,
          profile: CapacityProfile = PROFILE, *, provider_name: str = "openai-compat",
          repeat_rule: str = "close", text_calls: bool = True) -> TurnLoop:
    """The scripted model writes its calls as text where a test scripts fences (as the bundled Qwen does)."""
    client = httpx.AsyncClient(transport=httpx.MockTransport(script.handle))
    provider = OpenAICompatProvider(client, base_url="http://127.0.0.1:9/v1", retry=RetryPolicy(attempts=1))
    surface = surface or tool_surface()
    config = TurnConfig(model="scripted", provider=provider_name, system=system_prompt(surface.catalogue()),
                        surface=surface, max_steps=6, max_tokens=128,
                        repeat_rule="redo" if repeat_rule == "redo" else "close", text_calls=text_calls)
    return TurnLoop(InProcessServices(store, "s1"), provider, profile, config, workspace=workspace,
                    clock=lambda: 1_764_504_000.0)


def _kinds(store: LedgerStore) -> list[str]:
    return [e.kind for e in store.entries("s1")]


async def test_a_turn_writes_every_step_receipt_profile_result_and_card(tmp_path: Path, workspace: Workspace) -> None:
    """Two parallel calls run and their results are stored in call order; each step gets one receipt and
    one profile update; the turn closes with a TurnCard; step 2's request extends step 1's byte for byte."""
    script = Scripted([
        fixed(completion(calls=[("read_file", {"path": "notes.txt"}), ("list_dir", {"path": "."})])),
        fixed(completion("The notes list alpha, beta and gamma.", prompt=300, cached=99)),
    ])
    with LedgerStore(tmp_path / "ledger") as store:
        report = await _loop(store, script, workspace).run("What do the notes say?")
        kinds = _kinds(store)
        results = payloads_of(store, "tool_result")
        receipts = payloads_of(store, "receipt")
        cards = payloads_of(store, "turn_card")
    assert report.outcome == "completed" and report.answer == "The notes list alpha, beta and gamma."
    assert [r.tool_name for r in results] == ["read_file", "list_dir"]
    assert "1\talpha" in results[0].content and results[0].evidence_id
    assert len(receipts) == 2 and kinds.count("capacity_profile") == 2 and kinds.count("plan") == 1
    assert len(cards) == 1 and cards[0].outcome == "completed"
    first, second = script.bodies
    assert second["messages"][: len(first["messages"])] == first["messages"]
    assert json.dumps(first["tools"]) == json.dumps(second["tools"])
    assert receipts[0].prefix_digest == receipts[1].prefix_digest != ""
    assert report.steps[1].cached_tokens == 99 and not report.steps[1].replanned


async def test_inline_fence_calls_are_run_and_the_raw_text_kept(tmp_path: Path, workspace: Workspace) -> None:
    """A ```json fence call (as Qwen2.5-Coder writes them) is parsed by the shared parser and run; the
    completion's own text is kept in an activity."""
    fence = '```json\n{"name": "read_file", "arguments": {"path": "notes.txt"}}\n```'
    script = Scripted([fixed(completion(fence)), fixed(completion("alpha, beta, gamma"))])
    with LedgerStore(tmp_path / "ledger") as store:
        report = await _loop(store, script, workspace).run("read the notes")
        results = payloads_of(store, "tool_result")
        inline = [a for a in payloads_of(store, "activity") if a.activity == "step.inline_calls"]
    assert report.outcome == "completed"
    assert results[0].tool_name == "read_file" and "alpha" in results[0].content
    assert inline and inline[0].detail["text"] == fence


@pytest.mark.parametrize("text", [
    'The key is read with read_file({"path": "notes.txt"}); I did not need to call it.',
    'Call it as:\n```json\n{"name": "read_file", "arguments": {"path": "notes.txt"}}\n```',
])
async def test_a_model_that_calls_natively_has_its_text_answer_whole(tmp_path: Path, workspace: Workspace,
                                                                   text: str) -> None:
    """A model whose calls are native (not declared or measured as writing them in text): a reply that
    names a call in its text, even in a fence, is the answer, whole; nothing runs, nothing more is asked."""
    script = Scripted([fixed(completion(text))])
    with LedgerStore(tmp_path / "ledger") as store:
        report = await _loop(store, script, workspace, text_calls=False).run("how is a note read?")
        assert payloads_of(store, "tool_result") == []
        assert not any(a.activity == "step.inline_calls" for a in payloads_of(store, "activity"))
    assert (report.outcome, report.answer, len(script.bodies)) == ("completed", text, 1)


def test_calls_are_read_from_text_only_where_declared_or_measured() -> None:
    """The operator's declaration decides; else the probe's measured protocol; else the bundled model's; else
    native. The bundled Qwen models are declared text (they write ```json fences)."""
    from vak_context.context.request.toolcalls import calls_in_text
    from vak_context.providers.local.catalogue import QWEN15_NAME, QWEN_NAME, local_protocol

    assert calls_in_text(None, None, None) is False
    assert calls_in_text(None, "inline_fence", None) is True and calls_in_text(None, "native", "inline_fence") is False
    assert calls_in_text("native", "inline_fence", "inline_fence") is False
    assert calls_in_text("text", "native", None) is True
    for qwen in (QWEN_NAME, QWEN15_NAME, "qwen", "qwen1.5b"):
        assert calls_in_text(None, None, local_protocol(qwen)) is True


async def test_failing_tool_and_unknown_tool_are_error_results(tmp_path: Path, workspace: Workspace) -> None:
    """A path outside the workspace and an unknown tool come back to the model as error results."""
    script = Scripted([
        fixed(completion(calls=[("read_file", {"path": "../../etc/passwd"}), ("launch_rockets", {})])),
        fixed(completion("I could not read that.")),
    ])
    with LedgerStore(tmp_path / "ledger") as store:
        await _loop(store, script, workspace).run("read /etc/passwd")
        results = payloads_of(store, "tool_result")
    assert [r.is_error for r in results] == [True, True]
    assert "outside the workspace" in results[0].content and "no tool named" in results[1].content
    second = script.bodies[1]["messages"]
    assert any(m.get("role") == "tool" and "outside the workspace" in str(m.get("content")) for m in second)


async def test_over_length_replans_and_retries_once(tmp_path: Path, workspace: Workspace) -> None:
    """llama.cpp's exceed_context_size_error on a step that carries a large result: verified_window drops to
    the server's n_ctx, the turn is planned again (its older step compacted) and sent once more, smaller."""

    def overflow(body: dict[str, Any], _n: int) -> tuple[int, dict[str, Any]]:
        sent = int(len(json.dumps(body["messages"])) * 0.25)
        return 400, {"error": {"code": 400, "type": "exceed_context_size_error", "n_prompt_tokens": sent,
                               "n_ctx": sent // 2, "message": "the request exceeds the available context size"}}

    script = Scripted([fixed(completion(calls=[("read_file", {"path": "big.log"})])), overflow,
                       fixed(completion("done"))])
    with LedgerStore(tmp_path / "ledger") as store:
        report = await _loop(store, script, workspace).run("what is in big.log?")
        profiles = payloads_of(store, "capacity_profile")
    assert report.outcome == "completed" and report.steps[1].overflows == 1
    rejected = int(len(json.dumps(script.bodies[1]["messages"])) * 0.25)
    assert any(p.verified_window is not None and p.verified_window <= rejected // 2 for p in profiles)
    assert len(script.bodies) == 3
    assert len(json.dumps(script.bodies[2]["messages"])) < len(json.dumps(script.bodies[1]["messages"])) / 2


async def test_find_tools_returns_schemas_without_changing_the_prefix(tmp_path: Path, workspace: Workspace) -> None:
    """find_tools puts the found schema in its result; the request's tools stay byte-identical."""
    deferred = ToolDecl(ToolSpec(name="web_search", description="Search the web for pages. Returns titles."),
                        observes=True)
    script = Scripted([
        fixed(completion(calls=[("find_tools", {"query": "search the web"})])),
        fixed(completion("found it")),
    ])
    with LedgerStore(tmp_path / "ledger") as store:
        await _loop(store, script, workspace, tool_surface([deferred])).run("find a web tool")
        results = payloads_of(store, "tool_result")
    assert '"name": "web_search"' in results[0].content
    assert script.bodies[0]["tools"] == script.bodies[1]["tools"]
    assert "web_search" not in json.dumps(script.bodies[0]["tools"])
    assert "- web_search — Search the web for pages." in script.bodies[0]["messages"][0]["content"]


async def test_second_turn_keeps_the_prefix_and_sees_the_first(tmp_path: Path, workspace: Workspace) -> None:
    """A follow-up turn carries the same system+tools bytes and shows the previous turn."""
    script = Scripted([fixed(completion("alpha is first")), fixed(completion("beta is second"))])
    with LedgerStore(tmp_path / "ledger") as store:
        loop = _loop(store, script, workspace)
        await loop.run("which is first?")
        await loop.run("and second?")
        receipts = payloads_of(store, "receipt")
        breaks = [a for a in payloads_of(store, "activity") if a.activity == "cache.break"]
    assert receipts[0].prefix_digest == receipts[1].prefix_digest and not breaks
    second = json.dumps(script.bodies[1]["messages"])
    assert "which is first?" in second and "alpha is first" in second


async def test_a_deferred_tool_used_without_find_tools_is_a_measured_misread(tmp_path: Path,
                                                                             workspace: Workspace) -> None:
    """Calling a deferred tool directly is allowed, and recorded as a surface.misread activity; after
    find_tools returned it, the same call is not a misread."""
    deferred = ToolDecl(ToolSpec(name="web_search", description="Search the web for pages."), observes=True)
    script = Scripted([
        fixed(completion(calls=[("web_search", {"q": "x"})])),
        fixed(completion(calls=[("find_tools", {"query": "search the web"})])),
        fixed(completion(calls=[("web_search", {"q": "y"})])),
        fixed(completion("done")),
    ])
    with LedgerStore(tmp_path / "ledger") as store:
        await _loop(store, script, workspace, tool_surface([deferred])).run("search")
        misreads = [a for a in payloads_of(store, "activity") if a.activity == "surface.misread"]
        results = payloads_of(store, "tool_result")
    assert len(misreads) == 1 and misreads[0].detail["tools"] == ["web_search"]
    assert [r.tool_name for r in results] == ["web_search", "find_tools", "web_search"]
    assert "no executor" in results[0].content


async def test_a_turn_that_cannot_fit_fails_closed_without_sending(tmp_path: Path, workspace: Workspace) -> None:
    """A profile whose horizon cannot hold even the prefix: nothing is sent, the turn closes as failed with
    the reason, and the card records it."""
    tiny = CapacityProfile(ProfileKey("openai-compat", "scripted"), 32_768, Horizon(300, 0.9, 0.0), Ewma(0.25, 3), 64)
    script = Scripted([])
    with LedgerStore(tmp_path / "ledger") as store:
        report = await _loop(store, script, workspace, profile=tiny).run("hello")
        cards = payloads_of(store, "turn_card")
        notes = [a for a in payloads_of(store, "activity") if a.activity == "turn.request_too_large"]
    assert script.bodies == [] and report.outcome == "failed" and "cannot fit" in report.answer
    assert cards[0].outcome == "failed" and len(notes) == 1


async def test_a_call_cut_by_max_tokens_is_continued_not_failed(tmp_path: Path, workspace: Workspace) -> None:
    """An inline call cut by max_tokens is continued with the reply so far as the assistant's start; the
    joined call runs. llama.cpp answers a continuation with the prefilled start included."""
    start = '```json\n{"name": "read_file", "arguments": {"pa'
    whole = start + 'th": "notes.txt"}}\n```'
    cut = completion(start)
    cut["choices"][0]["finish_reason"] = "length"
    script = Scripted([fixed(cut), fixed(completion(whole, prompt=999)), fixed(completion("alpha"))])
    with LedgerStore(tmp_path / "ledger") as store:
        report = await _loop(store, script, workspace).run("read the notes")
        results = payloads_of(store, "tool_result")
    assert script.bodies[1]["messages"][-1] == {"role": "assistant", "content": start}
    assert script.bodies[1]["max_tokens"] == 2 * script.bodies[0]["max_tokens"]
    assert results[0].tool_name == "read_file" and "alpha" in results[0].content
    assert report.outcome == "completed"
    # the step's receipt keeps its own request's prompt size, not the continuation's
    assert report.steps[0].prompt_tokens == 100


async def test_calls_past_the_per_step_limit_get_an_error_result_not_a_run(tmp_path: Path,
                                                                           workspace: Workspace) -> None:
    """A step with more calls than MAX_CALLS_PER_STEP runs the first ones; every other call still gets its
    (short, error) result, so each tool_use keeps its tool_result."""
    from vak_context.agent.loop import MAX_CALLS_PER_STEP

    n = MAX_CALLS_PER_STEP + 3
    calls = [("read_file", {"path": "notes.txt", "offset": i}) for i in range(n)]
    script = Scripted([fixed(completion(calls=calls)), fixed(completion("ok"))])
    with LedgerStore(tmp_path / "ledger") as store:
        await _loop(store, script, workspace).run("read the notes many times")
        results = payloads_of(store, "tool_result")
    assert len(results) == n
    assert [r.is_error for r in results] == [False] * MAX_CALLS_PER_STEP + [True] * 3
    assert all("not run" in r.content for r in results[MAX_CALLS_PER_STEP:])


@pytest.mark.parametrize("native", [True, False])
async def test_a_call_repeated_in_one_step_runs_once(tmp_path: Path, workspace: Workspace, native: bool) -> None:
    """A step that repeats one call (the main job saw Qwen write ``list_dir(".")`` 85 times) runs it once and
    stores one result; a different call in the same step still runs; the ledger keeps the text as written."""
    same, other = ("list_dir", {"path": "."}), ("read_file", {"path": "notes.txt"})
    calls = [same] * 20 + [other, same]
    fence = "".join(f'```json\n{{"name": "{n}", "arguments": {json.dumps(a)}}}\n```\n' for n, a in calls)
    first = completion(calls=calls) if native else completion(fence)
    script = Scripted([fixed(first), fixed(completion("done"))])
    with LedgerStore(tmp_path / "ledger") as store:
        report = await _loop(store, script, workspace).run("list the files")
        results = payloads_of(store, "tool_result")
        kept = [a.detail["text"] for a in payloads_of(store, "activity") if a.activity == "step.inline_calls"]
    assert [r.tool_name for r in results] == ["list_dir", "read_file"]
    assert report.steps[0].calls == ["list_dir", "read_file"] and report.outcome == "completed"
    assert kept == ([] if native else [fence])


async def test_a_reply_cut_after_whole_calls_is_not_continued(tmp_path: Path, workspace: Workspace) -> None:
    """A reply cut by max_tokens inside a call, after whole calls, runs the whole ones and is not continued:
    only a reply with no whole call yet is worth a continuation."""
    whole = '```json\n{"name": "read_file", "arguments": {"path": "notes.txt"}}\n```\n'
    cut = completion(whole + '```json\n{"name": "read_file", "argu')
    cut["choices"][0]["finish_reason"] = "length"
    script = Scripted([fixed(cut), fixed(completion("alpha"))])
    with LedgerStore(tmp_path / "ledger") as store:
        report = await _loop(store, script, workspace).run("read the notes")
        results = payloads_of(store, "tool_result")
    assert len(script.bodies) == 2 and script.bodies[1]["messages"][-1]["role"] != "assistant"
    assert [r.tool_name for r in results] == ["read_file"] and report.outcome == "completed"


def test_a_typed_error_survives_pickling_as_ray_ships_it() -> None:
    """Errors with keyword-only fields cross process boundaries (Ray actors) as themselves."""
    import pickle

    from vak_context.errors import RequestTooLarge

    error = pickle.loads(pickle.dumps(RequestTooLarge("does not fit", needed=9, available=4)))
    assert isinstance(error, RequestTooLarge) and str(error) == "does not fit"
    assert (error.needed, error.available) == (9, 4)


async def test_on_anthropic_find_tools_loads_deferred_tools_by_reference(tmp_path: Path,
                                                                        workspace: Workspace) -> None:
    """On Anthropic the deferred tool is declared with defer_loading from the first step; find_tools' result
    goes back as a tool_reference to it; the tools array is byte-identical on both steps (the cache holds)."""
    from vak_context.providers.anthropic import AnthropicProvider

    def message(content: list[dict[str, Any]], stop: str) -> dict[str, Any]:
        return {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude", "content": content,
                "stop_reason": stop, "usage": {"input_tokens": 100, "output_tokens": 9}}

    bodies: list[dict[str, Any]] = []
    replies = [message([{"type": "tool_use", "id": "tu1", "name": "find_tools",
                         "input": {"query": "search the web"}}], "tool_use"),
               message([{"type": "text", "text": "web_search is loaded"}], "end_turn")]

    def handle(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(200, json=replies[len(bodies) - 1])

    deferred = ToolDecl(ToolSpec(name="web_search", description="Search the web for pages. Returns titles."))
    surface = tool_surface([deferred])
    config = TurnConfig(model="claude", provider="anthropic", system=system_prompt(surface.catalogue()),
                        surface=surface, max_steps=4, max_tokens=128)
    with LedgerStore(tmp_path / "ledger") as store:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handle)) as client:
            provider = AnthropicProvider(client, api_key="sk-ant-test-0123456789", retry=RetryPolicy(attempts=1))
            report = await TurnLoop(InProcessServices(store, "s1"), provider, PROFILE, config,
                                    workspace=workspace).run("find a web tool")
    assert report.outcome == "completed"
    assert bodies[0]["tools"] == bodies[1]["tools"]
    assert {"name": "web_search", "defer_loading": True}.items() <= bodies[0]["tools"][-1].items()
    result = next(b for m in bodies[1]["messages"] for b in m["content"] if b.get("type") == "tool_result")
    assert result["content"] == [{"type": "tool_reference", "tool_name": "web_search"}]


async def test_a_read_only_call_repeated_across_steps_is_not_run_and_a_second_repeat_closes(
        tmp_path: Path, workspace: Workspace) -> None:
    """The live demo's loop (list_dir(".") at every step): step 2's repeat is not run, its error result names
    the tool and says the result is above (the earlier call's id is in the activity, not the text); a ``rule.repeated_call`` activity is written; step 3's repeat
    closes the turn "degraded" with an answer quoting the listing; every tool_use keeps one tool_result."""
    from vak_context.context.history.render import api_problems, render_turn
    from vak_context.context.history.turns import TurnIndex
    from vak_context.engine.session_summary import evidence_infos

    same = fence(("list_dir", {"path": "."}))
    script = Scripted([fixed(completion(same)), fixed(completion(same)), fixed(completion(same))])
    with LedgerStore(tmp_path / "ledger") as store:
        report = await _loop(store, script, workspace).run("List the files in the workspace.")
        results = payloads_of(store, "tool_result")
        rules = [a for a in payloads_of(store, "activity") if a.activity.startswith("rule.")]
        turn = TurnIndex.build(store.chain_to_root(store.head("s1") or "")).turn(1)
        messages = render_turn(turn, evidence_infos(store, turn))
    first = f"call_{report.directive_id[:8]}_0_0"
    assert len(script.bodies) == 3 and [r.is_error for r in results] == [False, True, True]
    assert "notes.txt" in results[0].content
    assert "already called list_dir" in results[1].content and "above, unchanged" in results[1].content
    assert first not in results[1].content
    assert any(m["role"] == "tool" and "[repeated-call]" in str(m["content"]) for m in script.bodies[2]["messages"])
    assert [(a.activity, a.detail.get("strike")) for a in rules] == [
        ("rule.repeated_call", 1), ("rule.repeated_call", 2), ("rule.close", None)]
    assert rules[0].detail["calls"][0]["earlier"] == first
    assert report.outcome == "degraded" and f'What list_dir({{"path": "."}}) returned ({first}):' in report.answer
    assert "\n> notes.txt\t" in report.answer
    assert api_problems(messages) == []


@pytest.mark.parametrize("provider_name", ["openai-compat", "local"])
async def test_the_redo_rule_asks_for_the_answer_with_calls_masked_before_it_closes(
        tmp_path: Path, workspace: Workspace, provider_name: str) -> None:
    """``repeat_rule="redo"``: the second repeating step is not closed; its results are followed by the
    ``repeated-call`` nudge (a user message after the tool messages, so the history stays valid), and the next
    request masks calls: ``tool_choice: none``, plus a grammar without call openers on the bundled llama.cpp
    (``local``; another server would refuse the unknown field), with the messages before it unchanged (the
    cache). The model's answer then completes the turn."""
    from vak_context.context.rules.drift import ANSWER_NOW
    from vak_context.providers.local.catalogue import ANSWER_MASK

    same = fence(("list_dir", {"path": "."}))
    script = Scripted([fixed(completion(same)), fixed(completion(same)), fixed(completion(same)),
                       fixed(completion("The workspace holds notes.txt and big.log."))])
    with LedgerStore(tmp_path / "ledger") as store:
        report = await _loop(store, script, workspace, provider_name=provider_name, repeat_rule="redo").run(
            "List the files in the workspace.")
        nudges = payloads_of(store, "nudge")
        rules = [a.activity for a in payloads_of(store, "activity") if a.activity.startswith("rule.")]
    assert report.outcome == "completed" and report.answer == "The workspace holds notes.txt and big.log."
    assert len(script.bodies) == 4 and [n.tag for n in nudges] == ["repeated-call"] and nudges[0].text == ANSWER_NOW
    assert rules == ["rule.repeated_call", "rule.repeated_call"]
    masked, earlier = script.bodies[3], script.bodies[2]
    assert masked["tool_choice"] == "none" and "tool_choice" not in earlier
    assert masked.get("grammar") == (ANSWER_MASK["grammar"] if provider_name == "local" else None)
    assert masked["tools"] == earlier["tools"]
    assert masked["messages"][: len(earlier["messages"])] == earlier["messages"]
    roles = [m["role"] for m in masked["messages"][len(earlier["messages"]):]]
    assert roles == ["assistant", "tool", "user"] and ANSWER_NOW in str(masked["messages"][-1]["content"])


async def test_under_the_redo_rule_a_call_after_the_answer_step_closes_the_turn(
        tmp_path: Path, workspace: Workspace) -> None:
    """The redo is asked once a turn: a model that repeats the call again (calls are masked only on the
    bundled server) is closed "degraded" quoting the listing, as under the close rule."""
    same = fence(("list_dir", {"path": "."}))
    script = Scripted([fixed(completion(same)) for _ in range(4)])
    with LedgerStore(tmp_path / "ledger") as store:
        report = await _loop(store, script, workspace, repeat_rule="redo").run("List the files in the workspace.")
        rules = [a.activity for a in payloads_of(store, "activity") if a.activity.startswith("rule.")]
    assert len(script.bodies) == 4 and report.outcome == "degraded" and "\n> notes.txt\t" in report.answer
    assert rules == ["rule.repeated_call"] * 3 + ["rule.close"]
    assert "tool_choice" not in script.bodies[3] or script.bodies[3]["tool_choice"] == "none"


async def test_a_repeat_after_a_world_changing_call_runs_again(tmp_path: Path, workspace: Workspace) -> None:
    """A call with side effects (any tool outside the read-only set) makes earlier results stale: a repeat in
    the same step or a later one runs again, and no repeated-call rule fires."""
    writer = ToolDecl(ToolSpec(name="write_note", description="Write a note."), always_loaded=True)
    listing = ("list_dir", {"path": "."})
    script = Scripted([fixed(completion(fence(listing))),
                       fixed(completion(fence(("write_note", {"text": "x"}), listing))),
                       fixed(completion(fence(listing))), fixed(completion("done"))])
    with LedgerStore(tmp_path / "ledger") as store:
        report = await _loop(store, script, workspace, tool_surface([writer])).run("Note it, then list the files.")
        listed = [r.is_error for r in payloads_of(store, "tool_result") if r.tool_name == "list_dir"]
        rules = [a.activity for a in payloads_of(store, "activity") if a.activity.startswith("rule.")]
    assert listed == [False, False, False] and rules == [] and report.outcome == "completed"


def _timeout(_body: dict[str, Any], _n: int) -> tuple[int, dict[str, Any]]:
    raise httpx.ReadTimeout("timed out")


@pytest.mark.parametrize(("failure", "error"), [
    (lambda _b, _n: (500, {"error": {"message": "upstream exploded", "type": "server_error"}}), "RetryableProviderError"),
    (lambda _b, _n: (429, {"error": {"message": "slow down", "type": "rate_limit_error"}}), "RetryableProviderError"),
    (lambda _b, _n: (400, {"error": {"message": "bad field", "type": "invalid_request_error"}}), "ProviderRequestError"),
    (_timeout, "RetryableProviderError"),
])
async def test_a_provider_failure_mid_turn_is_raised_typed_and_the_turn_closes_failed(
        tmp_path: Path, workspace: Workspace, failure: Reply, error: str) -> None:
    """A provider error at step 2 (500, 429, 400 after the adapter's retries, or a timeout) propagates as the
    typed error; the ledger keeps step 1, its call and result, and closes the turn with a ``turn.failed``
    activity naming the error and a TurnCard "failed". The next turn on the same loop runs normally and its
    request carries the failed turn, every tool_use with its result."""
    import vak_context.errors as errors
    from vak_context.context.history.render import api_problems, render_turn
    from vak_context.context.history.turns import TurnIndex
    from vak_context.engine.session_summary import evidence_infos

    script = Scripted([fixed(completion(calls=[("read_file", {"path": "notes.txt"})])), failure,
                       fixed(completion("The notes list alpha, beta and gamma."))])
    with LedgerStore(tmp_path / "ledger") as store:
        loop = _loop(store, script, workspace)
        with pytest.raises(getattr(errors, error)):
            await loop.run("What do the notes say?")
        failed = [a for a in payloads_of(store, "activity") if a.activity == "turn.failed"]
        results = payloads_of(store, "tool_result")
        report = await loop.run("Say it again.")
        cards = payloads_of(store, "turn_card")
        turn = TurnIndex.build(store.chain_to_root(store.head("s1") or "")).turn(1)
        messages = render_turn(turn, evidence_infos(store, turn))
    assert [f.detail["error"] for f in failed] == [error] and failed[0].detail["why"]
    assert len(results) == 1 and "alpha" in results[0].content
    assert [c.outcome for c in cards] == ["failed", "completed"]
    assert report.outcome == "completed" and len(script.bodies) == 3
    assert any("What do the notes say?" in json.dumps(m) for m in script.bodies[2]["messages"])
    assert api_problems(messages) == []


async def test_arguments_nested_too_deep_get_a_schema_error_and_the_turn_goes_on(
        tmp_path: Path, workspace: Workspace) -> None:
    """A native call whose arguments nest 300 levels (decodable, but past what any tool takes and what pydantic
    serialises) is stored with empty input and answered with the schema error; the next step answers."""
    deep: Any = "x"
    for _ in range(300):
        deep = {"d": deep}
    script = Scripted([fixed(completion(calls=[("read_file", {"path": deep})])),
                       fixed(completion("I could not read it."))])
    with LedgerStore(tmp_path / "ledger") as store:
        report = await _loop(store, script, workspace).run("Read the notes.")
        steps = payloads_of(store, "assistant_step")
        results = payloads_of(store, "tool_result")
    assert report.outcome == "completed" and report.answer == "I could not read it."
    assert steps[0].blocks[0].type == "tool_use" and steps[0].blocks[0].input == {}
    assert len(results) == 1 and results[0].is_error and "must be a JSON object" in results[0].content
