"""The scripted BFCL upstream that degrades past T (farm/bfcl/scripted.py): it plays the ground truth one call
per step while a request is at most T tokens, sends an argument only when its value is in the request (where
the whole history shows it), alternates no call and a malformed call above T, and the engine's own probe
measures T on it with a clean negative control."""

from __future__ import annotations

import json
from typing import Any

import httpx

from vak_context.agent.probe import ProbeRunner
from vak_context.context.capacity.profile import ProfileKey
from vak_context.farm.bfcl.multiturn import load_entries
from vak_context.farm.bfcl.scripted import DECLARED_WINDOW, DegradingModel, packet_calls, request_tokens
from vak_context.providers.base import RetryPolicy
from vak_context.providers.openai_compat import OpenAICompatProvider


def ask(model: DegradingModel, body: dict[str, Any]) -> dict[str, Any]:
    reply = model.handle(httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions", json=body))
    assert reply.status_code == 200
    data: dict[str, Any] = reply.json()
    assert data["usage"]["prompt_tokens"] == request_tokens(body)
    return data["choices"][0]["message"]


def test_it_plays_the_ground_truth_under_t_and_degrades_above() -> None:
    entry = load_entries("multi_turn_base", 1)[0]
    first = entry.ground_truth[0][0]  # "cd(folder='document')"
    body = {"model": "m", "messages": [dict(m) for m in entry.turns[0]], "tools": list(entry.tools)}
    big = DegradingModel([entry], threshold=None)
    big.focus(entry.id)
    call = ask(big, body)["tool_calls"][0]["function"]
    assert (call["name"], json.loads(call["arguments"])) == ("cd", {"folder": "document"}), first
    small = DegradingModel([entry], threshold=request_tokens(body) - 1)
    small.focus(entry.id)
    lost = ask(small, body)  # over T, no assistant message yet (even): a text reply, no call
    assert "tool_calls" not in lost and lost["content"]
    answered = {**body, "messages": [*body["messages"], {"role": "assistant", "content": "Working on it."}]}
    bad = ask(small, answered)["tool_calls"][0]["function"]  # one more assistant message: a malformed call
    assert bad["name"] == "cd" and not bad["arguments"].rstrip().endswith("}")


def test_an_argument_whose_value_the_request_lost_is_not_sent() -> None:
    entry = load_entries("multi_turn_base", 1)[0]
    model = DegradingModel([entry], threshold=None)
    model.focus(entry.id)
    user = dict(entry.turns[0][-1])
    assert "document" in user["content"]
    hidden = {**user, "content": user["content"].replace("document", "the folder")}
    tools = [t for t in entry.tools if "document" not in json.dumps(t)]
    model.script = {hidden["content"]: model.script[user["content"]]}  # the same turn, its value gone
    call = ask(model, {"model": "m", "messages": [hidden], "tools": tools})["tool_calls"][0]["function"]
    assert (call["name"], json.loads(call["arguments"])) == ("cd", {})


async def test_the_engines_probe_measures_t_with_a_clean_control() -> None:
    model = DegradingModel([], threshold=6_000)
    async with httpx.AsyncClient(transport=httpx.MockTransport(model.handle)) as client:
        provider = OpenAICompatProvider(client, base_url="http://127.0.0.1:9/v1", retry=RetryPolicy(attempts=1))
        report = await ProbeRunner(provider, ProfileKey("openai-compat", "m"), clock=lambda: 1_800_000_000.0).run()
    assert report.metadata.declared_window == DECLARED_WINDOW
    assert 5_000 < report.profile.instruction_horizon.tokens <= 6_000
    for rung in report.ladder.outcomes:
        assert rung.control_calls == 0 or (rung.prompt_tokens or 0) > 6_000
        assert rung.passed == ((rung.prompt_tokens or 0) <= 6_000)


def test_a_call_the_engine_did_not_run_is_made_again() -> None:
    entry = load_entries("multi_turn_base", 1)[0]
    model = DegradingModel([entry], threshold=None)
    model.focus(entry.id)
    made = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "cd", "arguments": '{"folder": "document"}'}}]}
    body = {"model": "m", "tools": list(entry.tools), "messages": [*[dict(m) for m in entry.turns[0]], made]}
    refused = {"role": "tool", "tool_call_id": "c1",
               "content": "cd: not run: at most 8 calls run in one step; make the calls you still need in the next step"}
    again = ask(model, {**body, "messages": [*body["messages"], refused]})["tool_calls"][0]["function"]
    assert again["name"] == "cd"
    ran = {**refused, "content": '{"current_working_directory": "document"}'}
    following = ask(model, {**body, "messages": [*body["messages"], ran]})
    assert [c["function"]["name"] for c in following.get("tool_calls") or []] != ["cd"]


def test_the_calls_a_step_packet_names_count_as_made_and_its_recalls_as_asked() -> None:
    """The engine's step packet stands for the turn's earlier steps (both levels name each call): the model
    counts them as made, so it goes on to the next call rather than starting the turn again."""
    entry = load_entries("multi_turn_base", 1)[0]
    model = DegradingModel([entry], threshold=None)
    model.focus(entry.id)
    first = ask(model, {"model": "m", "tools": list(entry.tools), "messages": [dict(m) for m in entry.turns[0]]})
    names = [c["function"]["name"] for c in first["tool_calls"]]
    for level_line in ("- step 1 {name}({{}}): 0123456789ab, 10 chars", "- step 1 {name}: 0123456789ab"):
        packet = ('<context_summary turn="1" steps="1-1">\nSteps 1–1 of this turn are not shown here.\n'
                  + "\n".join(level_line.format(name=n) for n in names) + "\n</context_summary>")
        assert packet_calls(packet) == names
        *before, last = [dict(m) for m in entry.turns[0]]
        folded = {**last, "content": f"{last['content']}\n{packet}"}
        after = ask(model, {"model": "m", "tools": list(entry.tools), "messages": [*before, folded]})
        assert [c["function"]["name"] for c in after.get("tool_calls") or []] != names
