"""bench/cache.py: its pure computations (P4 pairs and ratio, the harness assertions, the P5 baseline and
ratios, the promotion variants), and one tiny live run against SmolLM2 that must print the P4/P5 lines.

The live run asserts only that the bench runs and reports; no figure is asserted (performance is the
bench's job, and the 135M model decides its own calls)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

from vak_context.context.request.messages import ChatRequest, Message, ToolSpec
from vak_context.events.blocks import TextBlock, ToolResultBlock, ToolUseBlock
from vak_context.providers.local.server import LocalModelServer

BENCH = Path(__file__).resolve().parents[2] / "bench" / "cache.py"


def _load() -> Any:
    spec = importlib.util.spec_from_file_location("bench_cache", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


cache = _load()
TAIL = "<turn_context>UTC 2026-11-30T12:00:00Z; local 2026-11-30 12:00 UTC (UTC+0000)</turn_context>\n"
TOOL = ToolSpec(name="read_file", description="Read a file.")


def _sent(turn: int, step: int, prompt: int, cached: int, ms: float = 0.0, n: int = 0) -> Any:
    request = ChatRequest(model="m")
    return cache.Sent(turn, step, request, prompt, cached, ms, n)


def _request() -> ChatRequest:
    return ChatRequest(model="m", system="static layers", tools=(TOOL,), messages=(
        Message.user("an older directive"),
        Message.assistant("an older answer"),
        Message(role="user", content=(TextBlock(text=TAIL), TextBlock(text="Read a.py"))),
        Message(role="assistant", content=(ToolUseBlock(id="c1", name="read_file", input={"path": "a.py"}),)),
        Message(role="user", content=(ToolResultBlock(tool_use_id="c1", content="1\tx = 1\n"),)),
    ))


def test_pairs_stay_within_a_turn_and_cached_past_the_previous_prompt_counts_as_all_of_it() -> None:
    """Pairs are formed only between steps of one turn; a step that found more cached than the previous
    prompt (its own generation) counts as 100% of it, and the ratio is pooled over prompt tokens."""
    sent = [_sent(1, 0, 1000, 0), _sent(1, 1, 1200, 1010), _sent(2, 0, 1500, 900), _sent(2, 1, 1600, 1490)]
    pairs = cache.step_pairs(sent)
    assert [(p.turn, p.step, p.prompt_k, p.cached_next) for p in pairs] == [(1, 0, 1000, 1010), (2, 0, 1500, 1490)]
    assert cache.p4_ratio(pairs) == pytest.approx((1000 + 1490) / (1000 + 1500))
    assert cache.p4_ratio([]) is None


def test_a_pair_whose_next_step_was_compacted_is_flagged_and_left_out_of_p4() -> None:
    """A step the assembler planned again mid-turn (the turn outgrew its budget) marks its pair as
    compacted; P4 pools the other pairs only."""
    sent = [_sent(1, 0, 1000, 0), _sent(1, 1, 1100, 999), _sent(1, 2, 5000, 300)]
    sent[2] = cache.replace(sent[2], replanned=True)
    pairs = cache.step_pairs(sent)
    assert [p.compacted for p in pairs] == [False, True]
    assert cache.p4_ratio([p for p in pairs if not p.compacted]) == pytest.approx(0.999)
    assert cache.harness_violations(sent, 20, 0) == [
        "turn 1 step 3: cached 300 < prompt(k) 1100 - tail 20 (the turn outgrew its budget: compacted at this step)"]


def test_harness_assertions_flag_a_short_step_and_a_turn_start_below_the_prefix() -> None:
    """Within a turn cached(k+1) >= prompt(k) - tail; each turn's first step has cached >= prefix."""
    sent = [_sent(1, 0, 1000, 500), _sent(1, 1, 1100, 990), _sent(1, 2, 1200, 1000), _sent(2, 0, 1300, 400)]
    violations = cache.harness_violations(sent, tail_tokens=20, prefix_tokens=450)
    assert violations == [
        "turn 1 step 3: cached 1000 < prompt(k) 1100 - tail 20",
        "turn 2 step 1: cached 400 < prefix 450",
    ]


def test_the_baseline_moves_only_the_tail_into_the_system_prompt() -> None:
    """The baseline request is the same request with the tail block removed from the directive message
    and appended to the system prompt; every other message and the tools are unchanged."""
    request = _request()
    moved = cache.baseline(request)
    assert moved.system == "static layers\n\n" + TAIL.rstrip()
    assert moved.messages[2].content == (TextBlock(text="Read a.py"),)
    assert moved.messages[:2] == request.messages[:2] and moved.messages[3:] == request.messages[3:]
    assert moved.tools == request.tools
    assert cache.tail_of(request) == TAIL and cache.tail_of(moved) == ""
    untouched = ChatRequest(model="m", system="s", messages=(Message.user("hi"),))
    assert cache.baseline(untouched) == untouched


def test_promotion_variants_differ_only_in_the_request_tools() -> None:
    """Both variants append the same find_tools call and a result carrying the schema; only the
    'in tools' variant appends the schema to the request's tools."""
    request = _request()
    chosen = cache.promoted(request, cache.PROMOTED, in_tools=False)
    into = cache.promoted(request, cache.PROMOTED, in_tools=True)
    assert chosen.messages == into.messages and chosen.messages[: len(request.messages)] == request.messages
    assert chosen.tools == request.tools and into.tools == (*request.tools, cache.PROMOTED)
    result = chosen.messages[-1].content[0]
    assert isinstance(result, ToolResultBlock) and '"name": "git_log"' in result.content


def test_first_difference_names_where_a_prompt_stops_being_a_prefix() -> None:
    """None when the first string is a prefix of the second, else the first differing index."""
    assert cache.first_difference("abc", "abcdef") is None
    assert cache.first_difference("abXdef", "abcdef") == 2
    assert cache.first_difference("abcdef", "abc") == 3


def test_p5_compares_the_turns_after_the_first() -> None:
    """P5 is the baseline's prefill over the stable prefix's, summed over the steps of every turn after
    the first, by server milliseconds and by tokens prefilled."""
    stable = [_sent(1, 0, 0, 0, 9000.0, 3000), _sent(2, 0, 0, 0, 100.0, 40), _sent(2, 1, 0, 0, 50.0, 20),
              _sent(3, 0, 0, 0, 150.0, 60)]
    base = [_sent(2, 0, 0, 0, 3000.0, 3000), _sent(2, 1, 0, 0, 50.0, 20), _sent(3, 0, 0, 0, 3000.0, 3100)]
    by_ms, by_tokens = cache.p5_ratios(stable, base)
    assert by_ms == pytest.approx(6050.0 / 300.0)
    assert by_tokens == pytest.approx(6120 / 120)


@pytest.mark.live
@pytest.mark.slow
def test_the_bench_runs_a_tiny_session_and_prints_p4_and_p5(local_model: LocalModelServer,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """A tiny configuration on the shared SmolLM2 server: the bench drives real turns and prints the P4,
    P5 and promotion lines with their goals."""
    out = cache.main(["--quick"], server=local_model)
    printed = capsys.readouterr().out
    assert "P4 within a turn:" in printed and "goal >= 99.5%" in printed
    assert "P5 across turns:" in printed and "goal >= 10x" in printed
    assert "schema in the result (chosen)" in printed and "schema in tools" in printed
    assert set(out["promotion"]) == {"before", "in the result", "in tools"}


def test_the_baseline_takes_the_current_turns_tail_and_drops_the_closed_turns_tails() -> None:
    """With a closed turn carrying the tail it was sent with, the current tail is the last one: the
    baseline's system prompt ends with it, and no directive message keeps a tail."""
    old = TAIL.replace("<turn_context>", "<turn_context>earlier ", 1)
    request = ChatRequest(model="m", system="static layers", messages=(
        Message(role="user", content=(TextBlock(text=old), TextBlock(text="First."))),
        Message.assistant("Done."),
        Message(role="user", content=(TextBlock(text=TAIL), TextBlock(text="Second."))),
    ))
    assert cache.tail_of(request) == TAIL
    moved = cache.baseline(request)
    assert moved.system == "static layers\n\n" + TAIL.rstrip()
    assert [[p.text for p in m.content if isinstance(p, TextBlock)] for m in moved.messages] == [
        ["First."], ["Done."], ["Second."]]
