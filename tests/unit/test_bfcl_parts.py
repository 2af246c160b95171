"""farm/bfcl/parts.py: the variants of the engine's request that bench/bfcl_parts.py sends, each with one part
taken out or changed, the body itself never changed."""

from __future__ import annotations

import copy

import pytest

from vak_context.farm.bfcl.parts import VARIANTS, variants

TAIL = ("<turn_context>UTC 2026-12-06T05:51:37Z</turn_context>\n<stance>Answer directly.</stance>\n"
        "<thread>\n- (earlier, now paused) Hi!\n</thread>\n")
BODY = {"model": "m", "tools": [{"type": "function", "function": {"name": "solve"}}],
        "messages": [{"role": "system", "content": "You are careful."},
                     {"role": "user", "content": "Hi! I'm booking a flight."},
                     {"role": "assistant", "content": "Your user id, please?"},
                     {"role": "user", "content": [{"type": "text", "text": TAIL},
                                                  {"type": "text", "text": "Solve 2x^2 + 6x + 5 = 0"}]}]}


def test_each_variant_changes_one_part_and_the_body_stays() -> None:
    before = copy.deepcopy(BODY)
    out = variants(BODY, ["Turn 1 (completed). Asked: Hi! I'm booking a flight."])
    assert BODY == before and list(out) == list(VARIANTS)
    assert out["as sent"] == BODY
    tail = out["no thread"]["messages"][-1]["content"][0]["text"]
    assert "<thread>" not in tail and "<stance>" in tail and len(out["no thread"]["messages"]) == 4
    tail = out["no thread or stance"]["messages"][-1]["content"][0]["text"]
    assert tail == "<turn_context>UTC 2026-12-06T05:51:37Z</turn_context>\n"
    assert [m["role"] for m in out["no earlier turns"]["messages"]] == ["system", "user"]
    assert out["no earlier turns"]["messages"][-1] == BODY["messages"][-1]
    carded = out["earlier turns as cards"]["messages"]
    assert [m["role"] for m in carded] == ["system", "user"]
    assert carded[-1]["content"][0]["text"] == "Turn 1 (completed). Asked: Hi! I'm booking a flight.\n"
    assert carded[-1]["content"][1:] == BODY["messages"][-1]["content"]
    assert all(v["tools"] == BODY["tools"] for v in out.values())


def test_a_plain_text_user_turn_and_no_cards() -> None:
    body = {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": TAIL + "Q"}]}
    out = variants(body, [])
    assert out["no thread or stance"]["messages"][-1]["content"] == [
        {"type": "text", "text": "<turn_context>UTC 2026-12-06T05:51:37Z</turn_context>\nQ"}]
    assert out["earlier turns as cards"]["messages"][-1]["content"] == [{"type": "text", "text": TAIL + "Q"}]


def test_a_body_that_is_not_the_engines_request_is_refused() -> None:
    with pytest.raises(ValueError, match="system prompt first"):
        variants({"messages": [{"role": "user", "content": "q"}]}, [])
