"""The one tool-call parser: what a model's completion called, judged by content, not wrapping.

A call is a JSON object naming a tool, ``{"name": <tool>, "arguments": {...}}`` (``parameters``
for ``arguments``, arguments sent as a JSON string, and the OpenAI shape
``{"function": {"name": …, "arguments": …}}`` are read the same way). It counts wherever it sits:

* native ``tool_calls`` the provider already parsed (``native_calls``);
* ``<tool_call>{…}</tool_call>`` (Hermes templates);
* a fenced block: ```` ```tool_call ````, ```` ```json ```` or a bare ```` ``` ```` fence;
* a bare JSON object in the text;
* a list of such objects, or ``{"tool_calls": [...]}``;
* an offered tool's name followed by its arguments object, ``probe_ack {"ack": "…"}`` or
  ``probe_ack({"ack": "…"})`` (``named_json``): small models write this shape, and it binds the
  arguments to the name as plainly as the JSON shape does. Only names the request offered count.

A completion that ends inside a call (an open wrapper, or an object that never closes, as when
``max_tokens`` cuts it) yields a call with ``complete=False``: the caller can continue generation
and parse the joined text again. Its name is read from the part that arrived, when it did.

Pure and linear-time: one pass finds every balanced ``{…}`` span (string-aware), outer spans are
decoded first and a decoded value's inner spans are not decoded again, and the work on text that
is not JSON is bounded by a budget proportional to its length. The probe (``vak_context.context.capacity.ladder``) and the turn loop share it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

Wrapping = Literal["native", "tool_call_tag", "tool_call_fence", "json_fence", "fence", "bare_json", "named_json"]

# Work per character of a segment (scanning and failed decodes), plus a floor for short texts:
# linear time on adversarial input (deep nesting, a thousand unclosed braces).
WORK_PER_CHAR = 3
WORK_FLOOR = 8192
MAX_WALK_DEPTH = 4  # levels of a decoded value searched for call-shaped objects
_DECODER = json.JSONDecoder()
_SPECIAL = re.compile(r'[{}\[\]"\\]')

_TAG = re.compile(r"<tool_call>(.*?)(</tool_call>|\Z)", re.DOTALL)
# A fence opens where Markdown opens one: at the start of the text or after whitespace, never inside a word
# or a JSON string (``{"```": 1}`` is an argument, not a fence); it closes at the next ``` or the end.
_FENCE = re.compile(r"(?<!\S)```[ \t]*([A-Za-z_]*)[ \t]*\n?(.*?)(```|\Z)", re.DOTALL)
_NAME = re.compile(r'"name"\s*:\s*"((?:[^"\\]|\\.)*)"')
# A tool name right before an arguments object: `name {` or `name({` (the name starts a word).
_NAMED = re.compile(r"(?<![\w.-])([A-Za-z_][\w.-]{0,63})[ \t]*\(?[ \t]*$")
NAMED_LOOKBACK = 80  # characters before an object searched for the tool name
_FENCE_WRAPPING: dict[str, Wrapping] = {"tool_call": "tool_call_fence", "json": "json_fence", "": "fence"}


@dataclass(frozen=True)
class ParsedCall:
    """What a completion called, as the one parser read it: from the provider's native ``NativeCall``s
    (``native_calls``) or from the text (``parse_tool_calls``), so the loop and the probe judge both alike.

    Unlike a ``NativeCall`` it can be malformed or cut short and has no id (the loop gives it one when it
    stores it as a ``ToolUseBlock``): ``name`` is None when none was read, ``arguments`` is None when they
    were missing or not a JSON object (or the call was cut short); ``complete`` is False when the
    completion ended inside this call. docs/TURNS.md "Tool calls" has each call type's role.
    """

    name: str | None
    arguments: dict[str, Any] | None
    wrapping: Wrapping
    complete: bool = True

    def has_argument_value(self, value: str) -> bool:
        """True when ``value`` is one of the call's top-level argument values (exactly, spaces aside)."""
        if not self.complete or self.arguments is None:
            return False
        return any(isinstance(v, str) and v.strip() == value for v in self.arguments.values())


# Arguments nested deeper than this are not arguments any tool takes: a model looping on brackets. They
# count as malformed (None), so the call gets its schema error and the step can still be stored (pydantic
# refuses to serialise past ~250 levels, and the ledger would refuse the step).
MAX_ARGUMENT_DEPTH = 32


def nesting_depth(value: Any) -> int:
    """How deep lists and dicts nest in ``value`` (a scalar is 0), without recursion."""
    depth, level = 0, [value]
    while level:
        nested = [v for item in level if isinstance(item, dict | list | tuple)
                  for v in (item.values() if isinstance(item, dict) else item)]
        if not any(isinstance(item, dict | list | tuple) for item in level):
            break
        depth += 1
        level = nested
    return depth


def bounded(call: ParsedCall, limit: int = MAX_ARGUMENT_DEPTH) -> ParsedCall:
    """``call`` with its arguments set to None (malformed) when they nest deeper than ``limit``."""
    if call.arguments is None or nesting_depth(call.arguments) <= limit:
        return call
    return ParsedCall(call.name, None, call.wrapping, call.complete)


def native_calls(calls: Iterable[tuple[str, dict[str, Any] | None]]) -> tuple[ParsedCall, ...]:
    """Calls a provider parsed itself (``(name, arguments)`` pairs) as ``ParsedCall``s."""
    return tuple(ParsedCall(name, args if isinstance(args, dict) else None, "native") for name, args in calls)


def parse_tool_calls(text: str, tool_names: Collection[str] = ()) -> tuple[ParsedCall, ...]:
    """Every tool call in ``text``, in order of appearance (see the module docstring).

    A bare JSON object needs ``arguments`` (or ``parameters``) to be a call, unless its ``name`` is
    one of ``tool_names`` (the tools the request offered): ``{"name": "probe_ack", "ack": …}`` is
    then a call whose arguments are missing. Inside a call wrapper a name alone is enough.
    """
    known = frozenset(tool_names)
    regions = _wrapped_regions(text)
    calls: list[tuple[int, ParsedCall]] = []
    covered: list[tuple[int, int]] = []
    for start, end, body_start, body, wrapping, closed in regions:
        covered.append((start, end))
        found = _calls_in(body, wrapping, known, at_end=not closed)
        if not found and not closed and not body.strip().startswith(("{", "[")) and body.strip():
            continue  # an open fence holding prose, not a call
        if not found and not closed:
            found = [ParsedCall(None, None, wrapping, complete=False)]  # cut right after the opener
        if not found and wrapping in ("tool_call_tag", "tool_call_fence") and body.strip():
            found = [ParsedCall(None, None, wrapping)]  # a call wrapper around something unreadable
        calls.extend((body_start, c) for c in found)
    # The text outside every wrapper: bare JSON objects.
    cursor = 0
    for start, end in [*covered, (len(text), len(text))]:
        segment = text[cursor:start]
        if "{" in segment or "[" in segment:
            at_end = start == len(text)
            calls.extend((cursor, c) for c in _calls_in(segment, "bare_json", known, at_end=at_end))
        cursor = max(cursor, end)
    calls.sort(key=lambda pair: pair[0])
    return tuple(c for _, c in calls)


CALLS = ("text", "native")  # how a model makes its calls, as an operator declares it (Session(calls=...))


def calls_in_text(declared: str | None, measured: str | None, bundled: str | None = None) -> bool:
    """Whether a model's calls are read from its replies' text as well as from the provider's native
    tool calls. Only a model that writes its calls as text has them parsed there: anything else a reply
    says (``lookup({"key": "k1"})`` quoted in an answer) is the answer's text, never a call.

    ``declared``: the operator's ``"text"`` or ``"native"``, which decides; else ``measured``, the protocol
    the probe saw the model follow (``ProbeProvenance.protocol``: ``"inline_fence"`` or ``"native"``); else
    ``bundled``, the local-model catalogue's protocol for a bundled model (Qwen writes ```json fences);
    else native only."""
    if declared is not None:
        return declared == "text"
    for protocol in (measured, bundled):
        if protocol is not None:
            return protocol == "inline_fence"
    return False


def ends_inside_call(calls: Sequence[ParsedCall]) -> bool:
    """True when the completion stopped inside a call: the caller should continue generating."""
    return any(not c.complete for c in calls)


# ---------------------------------------------------------------------- wrappers


def _wrapped_regions(text: str) -> list[tuple[int, int, int, str, Wrapping, bool]]:
    """(start, end, body start, body, wrapping, closed) of each tag or fence, left to right, not nested."""
    regions: list[tuple[int, int, int, str, Wrapping, bool]] = []
    pos = 0
    while pos < len(text):
        tag = _TAG.search(text, pos)
        fence = _FENCE.search(text, pos)
        found = [m for m in (tag, fence) if m is not None]
        if not found:
            break
        m = min(found, key=lambda match: match.start())
        if m is tag:
            regions.append((m.start(), m.end(), m.start(1), m.group(1), "tool_call_tag", bool(m.group(2))))
        else:
            lang = m.group(1).lower()
            wrapping = _FENCE_WRAPPING.get(lang)
            if wrapping is None:  # ```python and the like: not a call wrapper; its text is not parsed
                regions.append((m.start(), m.end(), m.start(2), "", "fence", True))
            else:
                regions.append((m.start(), m.end(), m.start(2), m.group(2), wrapping, bool(m.group(3))))
        pos = max(m.end(), pos + 1)
    return regions


# ---------------------------------------------------------------------- JSON spans


def _calls_in(segment: str, wrapping: Wrapping, known: frozenset[str], *, at_end: bool) -> list[ParsedCall]:
    """Calls in one segment: decoded spans, then (if the segment ends the text) one that was cut.

    Work is bounded by ``WORK_PER_CHAR`` x the segment's length: the characters scanned for spans
    (a rescan after an opener that never closed scans the rest again) and the characters a failed
    decode got through before it failed.
    """
    found: list[tuple[int, ParsedCall]] = []
    cut: tuple[int, ParsedCall] | None = None
    offset = 0
    budget = WORK_PER_CHAR * len(segment) + WORK_FLOOR
    while budget > 0:
        budget -= len(segment) - offset
        spans, open_at, depth_one = _spans(segment, offset)
        decoded_until = -1
        for start, end in spans:  # sorted by start, outer spans before the spans inside them
            if start < decoded_until or budget <= 0:
                continue
            try:
                value, stop = _DECODER.raw_decode(segment, start)
            except json.JSONDecodeError as exc:
                budget -= exc.pos - start
                continue
            except RecursionError:
                budget -= end - start
                continue
            if stop != end:  # the decoder and the span disagree about where it ends: not one value
                continue
            decoded_until = end  # its inner spans are part of this value
            calls = list(_calls_from_value(value, wrapping, known, 0))
            if not calls and isinstance(value, dict) and known:
                named = _named_call(segment, start, value, known)
                calls = [named] if named is not None else []
            found.extend((start, c) for c in calls)
        if open_at is None:
            break
        match = _NAME.search(depth_one)
        looks_like_call = match is not None or segment[open_at:].lstrip("[ \t\r\n{").startswith('"')
        if at_end and looks_like_call and (cut is None or (match is not None and cut[1].name is None)):
            cut = (open_at, ParsedCall(_unescape(match.group(1)) if match else None, None, wrapping, complete=False))
        # The opener never closed: scan again after it, since it may be prose ("{see below") that
        # hid a call; what this pass found after it is found again, so drop it.
        found = [(pos, c) for pos, c in found if pos < open_at]
        offset = open_at + 1
    if cut is not None and not any(pos > cut[0] for pos, _ in found):
        found.append(cut)  # the text ends inside what reads as a call: it was cut short
    return [c for _, c in found]


def _spans(s: str, offset: int = 0) -> tuple[list[tuple[int, int]], int | None, str]:
    """Balanced ``{…}`` and ``[…]`` spans (start, end), sorted by start; where the outermost
    unclosed opener is (None when all closed); and the text of that unclosed object at its depth 1.

    String-aware inside a span (a brace in a JSON string does not count); outside any span quotes
    mean nothing (prose). A closer that does not match its opener means this is not JSON: the
    scan starts over from there. Steps only over the characters that matter (a regex finds them).
    """
    spans: list[tuple[int, int]] = []
    stack: list[tuple[int, str]] = []
    in_string = False
    skip_to = -1  # the character after a backslash in a string is escaped
    tail: list[str] = []  # text at depth 1 of the outermost open object (to name a cut call)
    mark = 0  # where the current run of depth-1 text began
    for m in _SPECIAL.finditer(s, offset):
        i, ch = m.start(), m.group()
        if i < skip_to:
            continue
        if in_string:
            if ch == "\\":
                skip_to = i + 2
            elif ch == '"':
                in_string = False
            continue
        if ch in "{[":
            if not stack:
                tail, mark = [], i + 1
            elif len(stack) == 1:
                tail.append(s[mark:i])
            stack.append((i, "}" if ch == "{" else "]"))
        elif ch in "}]":
            if stack and stack[-1][1] == ch:
                start, _ = stack.pop()
                spans.append((start, i + 1))
                if len(stack) == 1:
                    mark = i + 1
            elif stack:  # a mismatched closer: this is not JSON; start over from here
                stack.clear()
        elif ch == '"' and stack:
            in_string = True
    if len(stack) == 1:
        tail.append(s[mark:])
    spans.sort(key=lambda span: (span[0], -span[1]))
    return spans, (stack[0][0] if stack else None), "".join(tail)


def _named_call(segment: str, start: int, value: dict[str, Any], known: frozenset[str]) -> ParsedCall | None:
    """``name {…}`` / ``name({…})``: an offered tool's name just before the object (bounded look-back)."""
    begin = max(0, start - NAMED_LOOKBACK)
    match = _NAMED.search(segment, begin, start)
    if match is None or match.group(1) not in known:
        return None
    at = match.start(1)
    if at > 0 and (segment[at - 1].isalnum() or segment[at - 1] in "_.-"):
        return None  # the look-back began inside a longer word
    return ParsedCall(match.group(1), value, "named_json")


def _unescape(raw: str) -> str:
    try:
        value = json.loads(f'"{raw}"')
    except json.JSONDecodeError:
        return raw
    return value if isinstance(value, str) else raw


def _calls_from_value(value: Any, wrapping: Wrapping, known: frozenset[str], depth: int) -> Iterable[ParsedCall]:
    """Call-shaped objects in a decoded value: the value itself, a list of them, ``tool_calls``."""
    if depth > MAX_WALK_DEPTH:
        return
    if isinstance(value, list):
        for item in value:
            yield from _calls_from_value(item, wrapping, known, depth + 1)
        return
    if not isinstance(value, dict):
        return
    call = _as_call(value, wrapping, known)
    if call is not None:
        yield call
        return
    if isinstance(value.get("function"), dict):
        inner = _as_call(value["function"], wrapping, known)
        if inner is not None:
            yield inner
            return
    for key in ("tool_calls", "calls"):
        if isinstance(value.get(key), list):
            yield from _calls_from_value(value[key], wrapping, known, depth + 1)


def _as_call(value: dict[str, Any], wrapping: Wrapping, known: frozenset[str]) -> ParsedCall | None:
    name = value.get("name")
    if not isinstance(name, str) or not name:
        return None
    args_key = "arguments" if "arguments" in value else ("parameters" if "parameters" in value else None)
    if args_key is None:
        # A name alone is a call inside a call wrapper, or naming an offered tool; a bare
        # {"name": "Alice"} is just data.
        return ParsedCall(name, None, wrapping) if wrapping != "bare_json" or name in known else None
    args = value[args_key]
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            args = None
    return ParsedCall(name, args if isinstance(args, dict) else None, wrapping)
