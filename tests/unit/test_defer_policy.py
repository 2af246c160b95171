"""``should_defer``: tools handed over in bulk go behind find_tools when their schemas exceed a share of the
horizon, judged around the limit (pure)."""

from __future__ import annotations

from vak_context.context.request.messages import ToolSpec
from vak_context.context.request.surface import DEFER_SHARE, schema_chars, should_defer


def _tools(n: int, width: int) -> list[ToolSpec]:
    return [ToolSpec(name=f"t{i}", description="d" * width, input_schema={"type": "object", "properties": {}})
            for i in range(n)]


def test_the_limit_is_a_share_of_the_horizon_in_tokens() -> None:
    tools = _tools(4, 100)
    chars = schema_chars(tools)
    assert chars == sum(len(t.name) + 100 + len('{"type":"object","properties":{}}') for t in tools)
    limit = chars * 0.25 / DEFER_SHARE  # the horizon at which the schemas are exactly the share
    assert not should_defer(tools, int(limit) + 1, 0.25)
    assert not should_defer(tools, int(limit), 0.25)  # at the share: kept (over, not at)
    assert should_defer(tools, int(limit) - 1, 0.25)
    assert not should_defer([], 1, 1.0)  # nothing to defer


def test_bfcl_sized_tools_are_deferred_on_a_small_model_not_on_a_frontier_one() -> None:
    bfcl = _tools(28, 800)  # ~23k characters, as BFCL's entries offer
    assert should_defer(bfcl, 10_940, 0.274)  # the bundled 0.5B's measured horizon and tokens per char
    assert not should_defer(bfcl, 200_000, 0.25)
