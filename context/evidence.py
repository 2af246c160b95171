"""Evidence as the model sees it: windows, shape-aware digests, and the pure half of recall (spec §3).

Pure: no I/O, no clock. State goes in, text comes out.

Lines. A body's lines are split on ``"\\n"`` only; a line keeps its terminator (``"\\n"`` or
``"\\r\\n"``), so joining lines gives the body back byte for byte. A body ending in ``"\\n"`` has no
empty last line; an empty body has no lines. Line numbers are 1-based and ranges inclusive.

* ``window``: a current-turn result verbatim up to ``WINDOW_CHARS``; a longer one keeps whole lines
  from its start and end, and one line naming the omitted range, its size, and the recall call.
  Inside a window a line over ``LINE_CHARS`` shows its start, says how many characters it continues
  for, and names the recall call (line and character range) that returns exactly those characters.
* ``digest``: a closed turn's result, by shape (``detect_shape``), ending with ``evidence_tag``;
  never longer than ``DIGEST_CHARS``, whatever the body.
* ``parse_recall_args`` / ``select`` / ``recall_slice``: the recall tool's arguments, the exact text
  they name, and that text windowed. A bad argument comes back as a ``RecallError`` value (a tool
  error the model reads), never raised.
* ``body_text``: how a stored body's bytes are shown; bytes that are not UTF-8 never raise.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from context.messages import ToolSpec
from vak.errors import InvalidInput

WINDOW_CHARS = 30_000
LINE_CHARS = 2_000
# A digest, evidence tag included, is never longer than this: about 400 tokens at 4 chars a token.
# Each shape stays under it by construction, and ``digest`` enforces it once more for all of them.
DIGEST_CHARS = 1_600

Shape = Literal["json", "search", "text", "command", "error", "binary"]
SHAPES: tuple[Shape, ...] = ("json", "search", "text", "command", "error", "binary")

# The first line body_text writes for bytes that are not text; detect_shape keys "binary" on it.
BINARY_HEADER = "[binary: "


@dataclass(frozen=True)
class Window:
    """What the request carries for one result.

    ``windowed`` is False exactly when ``text`` is the body verbatim. ``omitted`` is the 1-based
    inclusive line range left out, or None when every line is shown (possibly with long lines
    clipped).
    """

    text: str
    windowed: bool
    omitted: tuple[int, int] | None


@dataclass(frozen=True)
class RecallError:
    """A recall call the engine cannot answer: ``message`` is the tool result, marked as an error.

    A value, not an exception: a bad id or range must never end the turn.
    """

    message: str

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class RecallRequest:
    """One parsed recall call: exactly one of ``id``, ``turn`` or ``presentation`` is set.

    ``range`` (1-based, inclusive lines) and ``chars`` (1-based, inclusive character positions within
    the text the range selects, or within the whole body) only come with ``id``. ``turn`` is a turn
    number as the cards show it (1-based) or a turn's entry id.
    """

    id: str | None
    range: tuple[int, int] | None
    turn: int | str | None
    presentation: str | None
    chars: tuple[int, int] | None = None


# ------------------------------------------------------------------ lines


def line_count(body: str) -> int:
    """How many lines ``body`` has (see the module docstring for what a line is)."""
    if not body:
        return 0
    n = body.count("\n")
    return n if body.endswith("\n") else n + 1


def recall_call(
    evidence_id: str, line_range: tuple[int, int] | None = None, chars: tuple[int, int] | None = None
) -> str:
    """The exact recall call a model can copy: ``recall({"id": "<id>", "range": [a, b]})``, with
    ``"chars": [c, d]`` when it names characters within those lines."""
    args: dict[str, Any] = {"id": evidence_id}
    if line_range is not None:
        args["range"] = [line_range[0], line_range[1]]
    if chars is not None:
        args["chars"] = [chars[0], chars[1]]
    return f"recall({json.dumps(args, ensure_ascii=False)})"


def omission_line(evidence_id: str, first: int, last: int, chars: int) -> str:
    """The one line that stands for lines ``first..last`` (``chars`` characters) left out."""
    what = f"line {first}" if first == last else f"lines {first}-{last}"
    return f"[… {what} omitted ({chars} chars); {recall_call(evidence_id, (first, last))} returns them …]\n"


def continues_note(evidence_id: str, number: int, shown: int, rest: int) -> str:
    """What follows the first ``shown`` characters of line ``number`` when ``rest`` more are left out:
    their count and the recall call that returns exactly them (line ``number``, characters
    ``shown + 1`` to ``shown + rest``)."""
    call = recall_call(evidence_id, (number, number), (shown + 1, shown + rest))
    return f" … [line {number} continues for {rest} more chars; {call} returns them]"


def clip_line(
    line: str, number: int | None = None, *, line_limit: int = LINE_CHARS, evidence_id: str | None = None
) -> str:
    """A line as a window shows it: whole up to ``line_limit`` characters, else its start and a note.

    With ``evidence_id`` and ``number`` the note is ``continues_note``: it names the recall call that
    returns exactly the characters left out. The terminator (``\\n`` or ``\\r\\n``) is kept; a
    clipped line always ends with one.
    """
    content, term = _split_terminator(line)
    if len(content) <= line_limit:
        return line
    rest = len(content) - line_limit
    if evidence_id is not None and number is not None:
        return (
            f"{content[:line_limit]}{continues_note(evidence_id, number, line_limit, rest)}{term or chr(10)}"
        )
    where = f"line {number} " if number is not None else ""
    return f"{content[:line_limit]} … [{where}continues for {rest} more chars]{term or chr(10)}"


def _split_terminator(line: str) -> tuple[str, str]:
    if line.endswith("\r\n"):
        return line[:-2], "\r\n"
    if line.endswith("\n"):
        return line[:-1], "\n"
    return line, ""


def _clipped_span(body: str, start: int, end: int, number: int, line_limit: int, evidence_id: str) -> str:
    """``clip_line`` of ``body[start:end]`` without copying a huge line first."""
    if end - start <= line_limit + 2:
        return clip_line(body[start:end], number, line_limit=line_limit, evidence_id=evidence_id)
    term = "\r\n" if body.startswith("\r\n", end - 2) else "\n" if body[end - 1] == "\n" else ""
    content_len = end - start - len(term)
    rest = content_len - line_limit
    if rest <= 0:
        return body[start:end]
    note = continues_note(evidence_id, number, line_limit, rest)
    return f"{body[start : start + line_limit]}{note}{term or chr(10)}"


def line_offsets(body: str, first: int, last: int) -> tuple[int, int]:
    """Character offsets ``[start, end)`` of lines ``first..last`` (1-based, inclusive, in range)."""
    start = 0
    for _ in range(first - 1):
        start = body.index("\n", start) + 1
    end = start
    for _ in range(last - first + 1):
        nl = body.find("\n", end)
        end = len(body) if nl < 0 else nl + 1
    return start, end


# ------------------------------------------------------------------ windows


def window(body: str, evidence_id: str, *, limit: int = WINDOW_CHARS, line_limit: int = LINE_CHARS) -> Window:
    """The body verbatim when it fits in ``limit`` characters, else a window of it.

    The window keeps whole lines from the start (up to half the budget) and from the end (the
    rest), clips any kept line over ``line_limit`` (its ``continues_note`` names the recall call for
    the characters it leaves out), and puts one ``omission_line`` between them. So every character
    left out is one shown recall call away. ``len(window(...).text) <= limit`` always. Raises ``InvalidInput`` only for a ``limit`` too small
    to hold a line from each end and the omission line.
    """
    if len(body) <= limit:
        return Window(body, False, None)
    total_lines = line_count(body)
    # the longest omission line this body can need: "lines a-b" adds "s", "-" and b's digits to "line a"
    marker_room = (
        len(omission_line(evidence_id, total_lines, total_lines, len(body))) + len(str(total_lines)) + 2
    )
    note_room = len(continues_note(evidence_id, total_lines, len(body), len(body))) + 2
    budget = limit - marker_room
    if line_limit < 1 or budget < 2 * (line_limit + note_room):
        raise InvalidInput(
            f"window limit {limit} is too small for line_limit {line_limit}: it must hold one clipped line "
            f"from each end plus the omission line ({2 * (line_limit + note_room) + marker_room} chars). "
            "Raise limit or lower line_limit."
        )
    head: list[str] = []
    head_used, head_end, number = 0, 0, 0
    while head_end < len(body):
        nl = body.find("\n", head_end)
        end = len(body) if nl < 0 else nl + 1
        shown = _clipped_span(body, head_end, end, number + 1, line_limit, evidence_id)
        if head_used + len(shown) > budget // 2:
            break
        head.append(shown)
        head_used += len(shown)
        head_end, number = end, number + 1
    head_lines = number

    tail: list[str] = []
    tail_used, tail_start, number = 0, len(body), total_lines
    while tail_start > head_end:
        start = body.rfind("\n", head_end, tail_start - 1) + 1
        start = max(start, head_end)
        shown = _clipped_span(body, start, tail_start, number, line_limit, evidence_id)
        if head_used + tail_used + len(shown) > budget:
            break
        tail.append(shown)
        tail_used += len(shown)
        tail_start, number = start, number - 1
    tail.reverse()

    if tail_start <= head_end:  # every line fits once long lines are clipped
        return Window("".join(head) + "".join(tail), True, None)
    first, last = head_lines + 1, number
    marker = omission_line(evidence_id, first, last, tail_start - head_end)
    return Window("".join(head) + marker + "".join(tail), True, (first, last))


# ------------------------------------------------------------------ shapes and digests


def evidence_tag(evidence_id: str, chars: int) -> str:
    """``[evidence:<id> — <n> chars; call recall to expand]``."""
    return f"[evidence:{evidence_id} — {chars} chars; call recall to expand]"


def detect_shape(
    body: str, *, tool_name: str = "", is_error: bool = False, tool_input: dict[str, Any] | None = None
) -> Shape:
    """The shape of a tool result, from its content, the tool's name, its input and its error flag.

    In order: ``binary`` (NUL characters, or ``body_text``'s hex dump); ``command`` when the body
    reports an exit code (a failed shell command is command output, even when flagged as an error);
    ``error`` when flagged, or when a short body starts with ``Error:``; ``search`` for title + URL
    results (JSON or text); ``json`` for a JSON object or array; ``command`` for a shell-like tool;
    else ``text``.
    """
    from context import digests  # digests builds on this module's line helpers

    return digests.detect(body, tool_name=tool_name, is_error=is_error, tool_input=tool_input or {})


def shaped_digest(
    body: str,
    evidence_id: str,
    *,
    tool_name: str = "",
    is_error: bool = False,
    tool_input: dict[str, Any] | None = None,
) -> tuple[Shape, str]:
    """``detect_shape`` and ``digest`` together, reading the body once: a JSON body is parsed once,
    not once to detect its shape and again to digest it."""
    from context import digests  # digests builds on this module's line helpers

    inputs = tool_input or {}
    shape, seen = digests.classify(body, tool_name=tool_name, is_error=is_error, tool_input=inputs)
    return shape, _digest(body, evidence_id, shape, inputs, seen)


def digest(
    body: str,
    evidence_id: str,
    *,
    tool_name: str = "",
    is_error: bool = False,
    tool_input: dict[str, Any] | None = None,
    shape: Shape | None = None,
) -> str:
    """A closed turn's view of a result, by shape, never by character count.

    json: top-level keys, array lengths, each array's first element in full. search: every title
    and URL. text: headings, the first paragraph, line and byte counts. command: the exit code and
    the first and last 10 lines. error: verbatim. binary: size and kind. Each shape shows what fits
    in ``DIGEST_CHARS`` and says what it leaves out (fewer keys or results, narrower quoted lines,
    fewer edge lines). Always ends with ``evidence_tag(evidence_id, len(body))``, and is never longer
    than ``DIGEST_CHARS`` (for an id shorter than a few hundred characters).
    """
    from context import digests  # digests builds on this module's line helpers

    inputs = tool_input or {}
    seen = None
    if shape is None:
        shape, seen = digests.classify(body, tool_name=tool_name, is_error=is_error, tool_input=inputs)
    return _digest(body, evidence_id, shape, inputs, seen)


def _digest(body: str, evidence_id: str, shape: Shape, inputs: dict[str, Any], seen: Any) -> str:
    from context import digests

    tag = evidence_tag(evidence_id, len(body))
    room = max(DIGEST_CHARS - len(tag) - 1, 0)
    content = digests.render(shape, body, evidence_id, tool_input=inputs, seen=seen, budget=room)
    content = digests.capped(content, room)  # the one place every shape's digest passes through
    if content and not content.endswith("\n"):
        content += "\n"
    return content + tag


# ------------------------------------------------------------------ bytes to text

_SURROGATE = re.compile("[\udc80-\udcff]")
_CONTROL_BYTES = re.compile(rb"[\x01-\x08\x0e-\x1a\x1c-\x1f\x7f]")
_PRINTABLE = bytes(b if 0x20 <= b < 0x7F else 0x2E for b in range(256))


def body_text(blob: bytes, encoding: str) -> str:
    """The text a model sees for a stored body. Never raises.

    UTF-8 bytes (whatever ``encoding`` says) are returned as they decode, byte for byte. Text with a
    few bytes that are not UTF-8 (no NUL, few control bytes, at most a quarter bad) shows each bad
    byte as ``\\xNN`` and keeps its lines. Anything else is binary: a ``[binary: …]`` header line,
    then a hex dump of every byte, 16 a line, with offsets and the printable characters.
    """
    data = bytes(blob)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    if encoding.lower().replace("_", "-") not in ("utf-8", "utf8", "binary", ""):
        try:
            return data.decode(encoding, errors="backslashreplace")
        except (LookupError, UnicodeError, ValueError, TypeError):
            pass  # an encoding Python does not know, or a codec that is not text: show the bytes as below
    if b"\x00" not in data:
        loose = data.decode("utf-8", errors="surrogateescape")
        bad = len(_SURROGATE.findall(loose))
        if bad * 4 <= len(data) and len(_CONTROL_BYTES.findall(data)) * 100 <= len(data):
            return _SURROGATE.sub(lambda m: f"\\x{ord(m.group()) - 0xDC00:02x}", loose)
    return hex_dump(data)


def hex_dump(data: bytes) -> str:
    """``body_text``'s view of binary bytes: a header line, then 16 bytes a line."""
    kind = guess_binary_kind(data)
    lines = [
        f"{BINARY_HEADER}{len(data)} bytes, not UTF-8 text{'; looks like ' + kind if kind else ''}; "
        "hex dump below, 16 bytes a line]\n"
    ]
    for offset in range(0, len(data), 16):
        chunk = data[offset : offset + 16]
        lines.append(f"{offset:08x}  {chunk.hex(' '):<47}  |{chunk.translate(_PRINTABLE).decode('ascii')}|\n")
    return "".join(lines)


_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF87a", "a GIF image"),
    (b"GIF89a", "a GIF image"),
    (b"%PDF-", "a PDF document"),
    (b"PK\x03\x04", "a ZIP archive"),
    (b"\x1f\x8b", "gzip data"),
    (b"BZh", "bzip2 data"),
    (b"\xfd7zXZ\x00", "xz data"),
    (b"(\xb5/\xfd", "zstd data"),
    (b"\x7fELF", "an ELF executable"),
    (b"MZ", "a Windows executable"),
    (b"SQLite format 3\x00", "an SQLite database"),
    (b"\x00asm", "a WebAssembly module"),
    (b"ARROW1", "an Arrow file"),
    (b"PAR1", "a Parquet file"),
)


def guess_binary_kind(data: bytes) -> str:
    """What binary bytes look like, from their leading magic number; "" when unknown."""
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "a WebP image"
    for magic, kind in _MAGIC:
        if data.startswith(magic):
            return kind
    return ""


# ------------------------------------------------------------------ recall

RECALL_TOOL = ToolSpec(
    name="recall",
    description=(
        "Return stored evidence in full. Tool results from earlier turns are shown as digests ending in "
        "[evidence:<id> — <n> chars; call recall to expand]. "
        'recall({"id": "<id>"}) returns that whole result; recall({"id": "<id>", "range": [a, b]}) returns '
        "lines a to b (1-based, inclusive). "
        'Add "chars": [c, d] to get characters c to d (1-based, inclusive) of those lines, as a clipped '
        "long line's note names them. "
        'recall({"turn": N}) returns the full record of turn N; recall({"presentation": "<id>"}) returns a '
        "card's full payload. A result over 30,000 characters comes back as a window that names the recall "
        "call for what it leaves out."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "id": {"type": "string", "description": "An evidence id, as in [evidence:<id> …]."},
            "range": {
                "type": "array",
                "items": {"type": "integer", "minimum": 1},
                "minItems": 2,
                "maxItems": 2,
                "description": "Optional, with id: [first_line, last_line], 1-based and inclusive.",
            },
            "chars": {
                "type": "array",
                "items": {"type": "integer", "minimum": 1},
                "minItems": 2,
                "maxItems": 2,
                "description": (
                    "Optional, with id: [first_char, last_char] within the lines range selects (or the "
                    "whole result), 1-based and inclusive."
                ),
            },
            "turn": {"type": "integer", "minimum": 1, "description": "A turn number, as the cards show it."},
            "presentation": {"type": "string", "description": "A presentation (card) id."},
        },
        "additionalProperties": False,
    },
)

_RECALL_KEYS = ("id", "range", "chars", "turn", "presentation")
_USAGE = (
    'Call recall({"id": "<evidence id>"}), recall({"id": "<evidence id>", "range": [first_line, last_line]}), '
    'recall({"id": "<evidence id>", "range": [line, line], "chars": [first_char, last_char]}), '
    'recall({"turn": <turn number>}) or recall({"presentation": "<presentation id>"}).'
)


def parse_recall_args(args: dict[str, Any]) -> RecallRequest | RecallError:
    """Parse the recall tool's arguments into a request, or a ``RecallError`` that says how to call it.

    Lenient where a model's intent is plain: ``null`` values count as absent, an id may keep the
    ``evidence:`` prefix of its tag, a range may be ``"a-b"`` or a single line number, a turn may be
    a numeric string.
    """
    if not isinstance(args, dict):
        return RecallError(f"recall takes a JSON object of arguments, not {type(args).__name__}. {_USAGE}")
    given = {k: v for k, v in args.items() if v is not None}
    unknown = sorted(str(k) for k in given if k not in _RECALL_KEYS)
    if unknown:
        return RecallError(f"recall does not take {', '.join(repr(k) for k in unknown)}. {_USAGE}")
    targets = [k for k in ("id", "turn", "presentation") if k in given]
    if len(targets) != 1:
        which = "none of" if not targets else f"{' and '.join(targets)} together, not one of"
        return RecallError(
            f"recall needs exactly one of id, turn or presentation; got {which} them. {_USAGE}"
        )
    target = targets[0]
    for extra in ("range", "chars"):
        if extra in given and target != "id":
            return RecallError(f"{extra} goes with id, not with {target}. {_USAGE}")
    if target == "id":
        ident = _parse_id(given["id"], "id")
        if isinstance(ident, RecallError):
            return ident
        line_range = chars = None
        if "range" in given:
            parsed = _parse_range(given["range"])
            if isinstance(parsed, RecallError):
                return parsed
            line_range = parsed
        if "chars" in given:
            parsed = _parse_range(given["chars"], "chars")
            if isinstance(parsed, RecallError):
                return parsed
            chars = parsed
        return RecallRequest(id=ident, range=line_range, turn=None, presentation=None, chars=chars)
    if target == "turn":
        turn = _parse_turn(given["turn"])
        if isinstance(turn, RecallError):
            return turn
        return RecallRequest(id=None, range=None, turn=turn, presentation=None)
    pres = _parse_id(given["presentation"], "presentation")
    if isinstance(pres, RecallError):
        return pres
    return RecallRequest(id=None, range=None, turn=None, presentation=pres)


def _parse_id(value: Any, what: str) -> str | RecallError:
    if not isinstance(value, str) or not value.strip():
        return RecallError(
            f"{what} must be a non-empty string, got {json.dumps(value, default=repr)}. {_USAGE}"
        )
    text = value.strip()
    if what == "id" and text.startswith("evidence:"):
        text = text[len("evidence:") :].strip()
    return text or RecallError(f"{what} must name something, got {value!r}. {_USAGE}")


_RANGE_TEXT = re.compile(r"^\s*\[?\s*(-?\d+)\s*(?:[-:,–]|\.\.)\s*(-?\d+)\s*\]?\s*$")


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
        return int(value)
    return None


def _parse_range(value: Any, what: str = "range") -> tuple[int, int] | RecallError:
    pair: tuple[int | None, int | None] | None = None
    if isinstance(value, list | tuple) and len(value) == 2:
        pair = (_as_int(value[0]), _as_int(value[1]))
    elif isinstance(value, list | tuple) and len(value) == 1:
        pair = (_as_int(value[0]), _as_int(value[0]))
    elif _as_int(value) is not None:
        pair = (_as_int(value), _as_int(value))
    elif isinstance(value, str) and (m := _RANGE_TEXT.match(value)):
        pair = (int(m.group(1)), int(m.group(2)))
    unit = _UNITS[what]
    if pair is None or pair[0] is None or pair[1] is None:
        return RecallError(
            f"{what} must be two {unit} numbers [first_{unit}, last_{unit}], got "
            f"{json.dumps(value, default=repr)}. They are 1-based and the range is inclusive."
        )
    return _check_range(pair[0], pair[1], what)


_UNITS = {"range": "line", "chars": "char"}


def _check_range(first: int, last: int, what: str = "range") -> tuple[int, int] | RecallError:
    unit = _UNITS[what]
    if first < 1:
        return RecallError(f"{what} [{first}, {last}] starts before {unit} 1. They are numbered from 1.")
    if last < first:
        return RecallError(
            f"{what} [{first}, {last}] ends before it starts. Give [first_{unit}, last_{unit}]."
        )
    return first, last


def _parse_turn(value: Any) -> int | str | RecallError:
    number = _as_int(value)
    if number is not None:
        if number < 1:
            return RecallError(f"turn {number} does not exist: turns are numbered from 1. {_USAGE}")
        return number
    if isinstance(value, str) and value.strip():
        return value.strip()
    return RecallError(f"turn must be a turn number, got {json.dumps(value, default=repr)}. {_USAGE}")


def unknown_target(request: RecallRequest) -> RecallError:
    """The tool error for a recall whose id, turn or presentation the session does not have."""
    if request.id is not None:
        return RecallError(
            f"no evidence {request.id!r} in this session. Evidence ids are the <id> in "
            "[evidence:<id> — <n> chars; call recall to expand] tags; copy one exactly."
        )
    if request.turn is not None:
        return RecallError(
            f"no turn {request.turn!r} in this session. Use a turn number the cards show, or a turn's entry id."
        )
    return RecallError(
        f"no presentation {request.presentation!r} in this session. Use the id from a card's "
        '{"presentation": "<id>", "ok": true} acknowledgement.'
    )


def select(
    body: str, evidence_id: str, line_range: tuple[int, int] | None, chars: tuple[int, int] | None = None
) -> str | RecallError:
    """Exactly the text a recall names: the whole body, lines ``a..b`` of it byte for byte (CRLF
    kept), and of that, characters ``c..d`` when ``chars`` is given. Not windowed: the caller stores
    it as a tool result, which windows it under the result's own id when it is over the limit.

    A range outside the body is a ``RecallError`` naming what exists (``evidence_id`` is the id
    the error's example call uses).
    """
    text = body
    if line_range is not None:
        checked = _check_range(int(line_range[0]), int(line_range[1]))
        if isinstance(checked, RecallError):
            return checked
        first, last = checked
        total = line_count(body)
        if total == 0:
            return RecallError(f"evidence {evidence_id} is empty (0 lines): there are no lines to recall.")
        if last > total:
            return RecallError(
                f"evidence {evidence_id} has {total} lines; range [{first}, {last}] goes past the end. "
                f"Ask for lines within 1-{total}, e.g. {recall_call(evidence_id, (min(first, total), total))}."
            )
        start, end = line_offsets(body, first, last)
        text = body[start:end]
    if chars is not None:
        checked = _check_range(int(chars[0]), int(chars[1]), "chars")
        if isinstance(checked, RecallError):
            return checked
        first, last = checked
        what = "lines" if line_range is not None else "evidence"
        if last > len(text):
            example = recall_call(evidence_id, line_range, (min(first, max(len(text), 1)), max(len(text), 1)))
            return RecallError(
                f"those {what} of {evidence_id} have {len(text)} chars; chars [{first}, {last}] go past the "
                f"end. Ask for chars within 1-{len(text)}, e.g. {example}."
            )
        text = text[first - 1 : last]
    return text


def recall_slice(
    body: str, evidence_id: str, line_range: tuple[int, int] | None, chars: tuple[int, int] | None = None
) -> str | RecallError:
    """``select``'s text, windowed under ``evidence_id`` when it is over ``WINDOW_CHARS``.

    ``evidence_id`` is the id the caller stores this recall result under (its own evidence id, so
    the window's line numbers are the slice's).
    """
    text = select(body, evidence_id, line_range, chars)
    if isinstance(text, RecallError):
        return text
    return window(text, evidence_id).text
