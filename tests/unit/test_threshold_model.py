"""The scripted threshold model's own answers (tests/fakes/threshold.py), in this process."""

from __future__ import annotations

import json

from tests.fakes.threshold import CONTROL_MARK, ThresholdModel


def _chat(text: str) -> bytes:
    return json.dumps({"messages": [{"role": "user", "content": text}], "max_tokens": 32}).encode()


def test_follows_iff_under_the_threshold() -> None:
    model = ThresholdModel(100, tokens_per_char=1.0, overhead=0)
    short, long = _chat("call probe_ack"), _chat("call probe_ack " + "x" * 200)
    assert model.respond("/v1/chat/completions", short)[1]["choices"][0]["message"]["tool_calls"]
    assert "tool_calls" not in model.respond("/v1/chat/completions", long)[1]["choices"][0]["message"]
    control = _chat(CONTROL_MARK + " now.")
    assert "tool_calls" not in model.respond("/v1/chat/completions", control)[1]["choices"][0]["message"]


def test_identical_repeat_reports_cache_and_overlong_is_llamacpp_400() -> None:
    model = ThresholdModel(100, n_ctx=100, tokens_per_char=1.0, overhead=0)
    first = model.respond("/v1/chat/completions", _chat("hi"))[1]
    second = model.respond("/v1/chat/completions", _chat("hi"))[1]
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] == second["usage"]["prompt_tokens"] - 1
    status, body = model.respond("/v1/chat/completions", _chat("y" * 200))
    assert status == 400 and body["error"]["type"] == "exceed_context_size_error"
