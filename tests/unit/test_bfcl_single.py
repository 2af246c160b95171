"""BFCL's single-turn AST checker imported without ``constants.model_config`` (which imports every vendor
SDK): the stand-in maps the checker's model to ``underscore_to_dot`` as BFCL maps its OpenAI FC models, so a
function offered as ``triangle_properties_get`` (BFCL's ``convert_to_tool`` made the dot an underscore) is
judged against the answer's ``triangle_properties.get``; and the history cut the item-2 harness asks after."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from vak_context.farm.bfcl.history import cut, read_history, reply_calls, to_messages, wilson
from vak_context.farm.bfcl.scripted import request_tokens
from vak_context.farm.bfcl.single import (
    CATEGORIES,
    CHECKER_MODEL,
    DECODER_FAILED,
    MODEL_CONFIG,
    ast_checker,
    check,
    load_single,
    truth_calls,
)


def test_the_checker_imports_without_the_vendor_model_config() -> None:
    module = ast_checker()
    assert MODEL_CONFIG not in sys.modules  # the stand-in was taken out again; the real one never ran
    assert module.MODEL_CONFIG_MAPPING[CHECKER_MODEL].underscore_to_dot is True
    assert module.convert_func_name("triangle_properties.get", CHECKER_MODEL) == "triangle_properties_get"


def test_dotted_names_are_offered_and_judged_as_bfcl_does() -> None:
    entry = load_single("multiple", 1)[0]
    names = [t["function"]["name"] for t in entry.tools]
    assert "triangle_properties_get" in names and all("." not in n for n in names)
    args = json.dumps({"side1": 5, "side2": 4, "side3": 3})
    assert check(entry, [("triangle_properties_get", args)]).valid
    assert check(entry, [("triangle_properties.get", args)]).error_type == "simple_function_checker:wrong_func_name"
    assert check(entry, [("triangle_properties_get", json.dumps({"side1": 6, "side2": 4, "side3": 3}))]).valid is False
    assert check(entry, []).error_type == DECODER_FAILED  # a text reply
    assert check(entry, [("triangle_properties_get", '{"side1": ')]).error_type == DECODER_FAILED


def test_the_perfect_reply_passes_the_first_entries_of_each_category() -> None:
    for category in CATEGORIES:
        entries = load_single(category, 5)
        assert [e.id for e in entries] == [f"{category}_{i}" for i in range(5)]
        assert all(check(e, truth_calls(e)).valid for e in entries), category
    parallel = load_single("parallel", 1)[0]
    assert len(truth_calls(parallel)) == 2
    assert not check(parallel, truth_calls(parallel)[:1]).valid  # one of two parallel calls


def test_the_history_is_cut_at_a_closed_point_under_k() -> None:
    recording = read_history()
    assert cut(recording, 0).messages == ()
    previous = 0
    for k in (2_000, 4_000, 6_000, 7_500):
        history = cut(recording, k)
        assert previous < history.tokens <= k
        assert history.tokens == request_tokens({"messages": list(history.messages)})
        assert list(history.messages) == to_messages(history.events)
        assert history.messages[0]["role"] == "system" and history.messages[-1]["role"] in ("assistant", "tool")
        called = {c["id"] for m in history.messages for c in m.get("tool_calls") or []}
        answered = {m["tool_call_id"] for m in history.messages if m["role"] == "tool"}
        assert called == answered  # no call left without its result
        previous = history.tokens


def test_wilson_interval() -> None:
    assert wilson(0, 0) == (0.0, 1.0)
    lo, hi = wilson(10, 20)
    assert round(lo, 3) == 0.299 and round(hi, 3) == 0.701
    assert wilson(20, 20)[1] == 1.0 and wilson(0, 20)[0] == 0.0


def test_a_reply_s_calls_are_read_as_the_engine_reads_them() -> None:
    entry = load_single("simple_python", 1)[0]
    names = [t["function"]["name"] for t in entry.tools]
    fenced = {"role": "assistant", "content": 'Sure.\n```json\n{"name": "calculate_triangle_area", '
              '"arguments": {"base": 10, "height": 5}}\n```'}
    assert reply_calls(fenced, names) == []  # a model that makes native calls: its text is its answer
    calls = reply_calls(fenced, names, text_calls=True)
    assert calls == [("calculate_triangle_area", {"base": 10, "height": 5})] and check(entry, calls).valid
    native = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "calculate_triangle_area", "arguments": '{"base": 10, "height": 5}'}}]}
    assert check(entry, reply_calls(native, names, text_calls=True)).valid
    cut_off = {"role": "assistant", "content": '```json\n{"name": "calculate_triangle_area", "arguments": {"base": 1'}
    assert check(entry, reply_calls(cut_off, names, text_calls=True)).error_type == DECODER_FAILED


def test_a_request_the_server_refused_is_counted_apart_from_the_size_bands(tmp_path: Path) -> None:
    """A direct request over the server's context comes back 400 with no count (size 0): the table counts it
    on a line of its own (not in the 0-1,999 band, not in the mean size, not in the ratio to the horizon), the
    goal counts its K as one where direct's requests exceed the horizon, and the plot leaves it out."""
    from vak_context.farm.bfcl.history import Asked, table
    from vak_context.farm.bfcl.modes import Sent
    from vak_context.farm.bfcl.multiturn import Verdict
    from vak_context.farm.bfcl.plot import plot

    runs = [Asked("simple_python_0", "simple_python", 3500, "direct", Verdict(False, "http 400"), [Sent(400, 0, 0, True)]),
            Asked("simple_python_1", "simple_python", 3500, "direct", Verdict(True), [Sent(200, 3000, 0, False)]),
            Asked("simple_python_0", "simple_python", 3500, "engine", Verdict(True), [Sent(200, 2800, 0, False)]),
            Asked("simple_python_1", "simple_python", 3500, "engine", Verdict(True), [Sent(200, 2900, 0, False)])]
    text = table(runs, 2_950, 4_096)
    row = next(line for line in text.splitlines() if line.startswith(" 3,500"))
    assert "1/2 50%" in row and "3,000" in row  # direct: the mean of the one counted request
    assert "0-1,999" not in text
    refused = next(line for line in text.splitlines() if line.strip().startswith("refused"))
    assert "direct: 0/1" in refused and "http 400" in refused and "engine: -" in refused
    over = text.split("over the measured horizon")[1]
    assert "0.00-0.50" not in over and "1.00-1.25      direct: 1/1" in over
    assert "K=3,500: direct's requests exceed the horizon; engine above direct: met (100% vs 50%)" in text
    assert plot(runs, 2_950, tmp_path / "acc.png").stat().st_size > 0
