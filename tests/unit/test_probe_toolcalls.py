"""The one tool-call parser (context/request/toolcalls.py): content decides, not wrapping (issue 9, item 15)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vak_context.context.request.toolcalls import ParsedCall, ends_inside_call, parse_tool_calls

NAMES = st.sampled_from(["probe_ack", "search_docs", "read_file", "do_x"])
SCALARS = st.one_of(st.text(max_size=12), st.integers(-1000, 1000), st.booleans(), st.none())
ARGS = st.dictionaries(st.text(min_size=1, max_size=8), SCALARS, max_size=4)
# Prose around a call, adversarial: braces, brackets, quotes, backslashes, colons, newlines, unicode.
PROSE = st.text(alphabet=st.sampled_from(list('ab {}[]":,\\\n\tλ`<>/')) | st.characters(codec="utf-8"),
                max_size=40).filter(lambda t: "```" not in t and "<tool_call>" not in t)


def _json(name: str, args: dict[str, Any], *, pretty: bool, key: str, as_string: bool) -> str:
    arguments: Any = json.dumps(args) if as_string else args
    value = {"name": name, key: arguments}
    return json.dumps(value, indent=2 if pretty else None)


def _wrap(body: str, wrapping: str) -> str:
    return {
        "tool_call_tag": f"<tool_call>\n{body}\n</tool_call>",
        "tool_call_fence": f"```tool_call\n{body}\n```",
        "json_fence": f"```json\n{body}\n```",
        "fence": f"```\n{body}\n```",
        "bare_json": body,
    }[wrapping]


WRAPPINGS = st.sampled_from(["tool_call_tag", "tool_call_fence", "json_fence", "fence", "bare_json"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=NAMES, args=ARGS, wrapping=WRAPPINGS, before=PROSE, after=PROSE, pretty=st.booleans(),
       key=st.sampled_from(["arguments", "parameters"]), as_string=st.booleans())
def test_a_call_is_found_whatever_wraps_it_and_whatever_prose_surrounds_it(
    name: str, args: dict[str, Any], wrapping: str, before: str, after: str, pretty: bool, key: str, as_string: bool,
) -> None:
    """Any call, in any of the five wrappings, with adversarial prose before and after (no fence or
    tag markers of its own), is found with its exact name, arguments and wrapping."""
    body = _json(name, args, pretty=pretty, key=key, as_string=as_string)
    separator = "\n" if wrapping != "bare_json" else " "
    calls = parse_tool_calls(before + separator + _wrap(body, wrapping) + separator + after)
    assert ParsedCall(name, args, wrapping) in calls  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=300))
def test_arbitrary_text_never_raises_and_every_call_has_the_shape(text: str) -> None:
    """On arbitrary text the parser returns calls whose arguments, when present, are a dict."""
    for call in parse_tool_calls(text):
        assert call.arguments is None or isinstance(call.arguments, dict)
        assert call.name is None or isinstance(call.name, str)


@settings(max_examples=200, deadline=None)
@given(name=NAMES, args=ARGS.filter(bool), wrapping=st.sampled_from(["tool_call_tag", "json_fence", "bare_json"]),
       cut=st.floats(0.2, 0.95))
def test_a_call_cut_short_is_incomplete_and_names_its_tool_once_the_name_arrived(
    name: str, args: dict[str, Any], wrapping: str, cut: float,
) -> None:
    """A completion cut inside a call (as max_tokens does) yields an incomplete call; once the text
    got past the tool's name, the incomplete call carries it. It is never taken as complete."""
    body = _json(name, args, pretty=False, key="arguments", as_string=False)
    full = _wrap(body, wrapping)
    start = full.index("{")
    end = start + max(1, int(len(body) * cut))
    end = min(end, start + len(body) - 1)  # at least the final brace is missing
    calls = parse_tool_calls(full[:end])
    assert ends_inside_call(calls)
    assert not any(c.complete and c.name == name and c.arguments == args for c in calls)
    if full[:end].find(f'"name": "{name}"') >= 0:
        assert any(c.name == name and not c.complete for c in calls)


def test_what_the_issue_saw() -> None:
    """Qwen's bare object is a call with its nonce; a fence with the nonce outside arguments is a call
    without it; prose that names a tool is no call; a bare object needs arguments unless it names an
    offered tool; JSON that is data is no call."""
    bare = parse_tool_calls('{"name": "probe_ack", "arguments": {"ack": "6c98b1"}}')
    assert bare == (ParsedCall("probe_ack", {"ack": "6c98b1"}, "bare_json"),)
    assert bare[0].has_argument_value("6c98b1") and not bare[0].has_argument_value("6c98b")
    outside = parse_tool_calls('```tool_call\n{"name": "probe_ack", "ack": "6c98b1"}\n```')
    assert outside == (ParsedCall("probe_ack", None, "tool_call_fence"),)
    assert not outside[0].has_argument_value("6c98b1")
    assert parse_tool_calls("I would call probe_ack with ack=6c98b1.") == ()
    assert parse_tool_calls('{"name": "probe_ack", "ack": "6c98b1"}') == ()
    assert parse_tool_calls('{"name": "probe_ack", "ack": "6c98b1"}', ["probe_ack"]) == (
        ParsedCall("probe_ack", None, "bare_json"),)
    assert parse_tool_calls('Result: {"name": "Alice", "age": 3}') == ()
    assert parse_tool_calls('```python\nf({"name": "x", "arguments": {}})\n```') == ()


def test_lists_and_the_openai_shape_are_read() -> None:
    """A list of calls, ``{"tool_calls": [...]}`` and ``{"function": {...}}`` with string arguments."""
    text = ('[{"name": "a", "arguments": {}}, {"name": "b", "parameters": {"k": 1}}] '
            '{"tool_calls": [{"type": "function", "function": {"name": "c", "arguments": "{\\"x\\": 2}"}}]}')
    assert [(c.name, c.arguments) for c in parse_tool_calls(text)] == [("a", {}), ("b", {"k": 1}), ("c", {"x": 2})]


def test_adversarial_bodies_stay_linear() -> None:
    """Deep nesting, a hundred thousand unclosed braces and many half-strings parse without error
    (the work budget keeps them linear; timing is in no assert)."""
    for text in ("{" * 100_000, '{"a":' * 50_000, '{"a":' * 20_000 + "x" + "}" * 20_000,
                 '[{"a": "}"}' * 10_000, "\n" * 100_000, "```json\n" + "{" * 10_000):
        calls = parse_tool_calls(text)
        assert all(not c.complete for c in calls)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=NAMES, args=ARGS, before=PROSE, after=PROSE, paren=st.booleans(), gap=st.sampled_from(["", " ", "\t"]))
def test_an_offered_tools_name_before_its_arguments_object_is_a_call(
    name: str, args: dict[str, Any], before: str, after: str, paren: bool, gap: str,
) -> None:
    """``name {…}`` and ``name({…})`` are a call with exactly those arguments when the name was offered,
    whatever prose surrounds them; the same text with the name not offered, or the name glued to a
    longer word, is no named call."""
    call = f"{name}{gap}({json.dumps(args)})" if paren else f"{name}{gap}{json.dumps(args)}"
    text = before + " " + call + " " + after
    assert ParsedCall(name, args, "named_json") in parse_tool_calls(text, [name])
    assert not any(c.wrapping == "named_json" for c in parse_tool_calls(text, ["other_tool"]))
    glued = before + " x" + call + " " + after
    assert not any(c.wrapping == "named_json" and c.name == name for c in parse_tool_calls(glued, [name]))


def test_what_the_demo_saw() -> None:
    """Qwen at 1,062 tokens of a quick ladder answered ``probe_ack {"ack": "353af5"}``: the nonce is bound
    to the offered tool, so it is a followed call; a name pushed past the look-back by a long word is not."""
    (call,) = parse_tool_calls('probe_ack {"ack": "353af5"}', ["probe_ack"])
    assert call == ParsedCall("probe_ack", {"ack": "353af5"}, "named_json") and call.has_argument_value("353af5")
    assert parse_tool_calls("a" * 200 + 'probe_ack {"ack": "353af5"}', ["probe_ack"]) == ()
    assert parse_tool_calls('probe_ack {"name": "probe_ack", "arguments": {"ack": "1"}}', ["probe_ack"]) == (
        ParsedCall("probe_ack", {"ack": "1"}, "bare_json"),)  # a JSON-shaped call keeps its own reading


def _nest(depth: int) -> Any:
    value: Any = 1
    for i in range(depth):
        value = {"a": value} if i % 2 else [value]
    return value


@settings(max_examples=100, deadline=None)
@given(depth=st.integers(0, 80))
def test_nesting_depth_counts_levels_and_bounded_drops_arguments_past_the_limit(depth: int) -> None:
    """Property: ``nesting_depth`` of a value nested ``depth`` times is ``depth``; ``bounded`` keeps arguments up
    to MAX_ARGUMENT_DEPTH and turns deeper ones into None (malformed), keeping the name and wrapping."""
    from vak_context.context.request.toolcalls import MAX_ARGUMENT_DEPTH, bounded, nesting_depth

    assert nesting_depth(_nest(depth)) == depth
    args = {"x": _nest(max(depth - 1, 0))}
    call = bounded(ParsedCall("read_file", args, "native"))
    assert call.name == "read_file" and call.wrapping == "native"
    assert call.arguments == (args if nesting_depth(args) <= MAX_ARGUMENT_DEPTH else None)
