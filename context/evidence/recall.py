"""The pure half of the recall tool (spec §3): its spec, its arguments, and the exact text they name.

``parse_recall_args`` / ``select`` / ``recall_slice``: the recall tool's arguments, the exact text
they name, and that text windowed. A bad argument comes back as a ``RecallError`` value (a tool
error the model reads), never raised. The actor that looks evidence up is ``actors/evidence.py``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import Any

from vak_context.coerce import int_or_none
from vak_context.context.evidence.window import line_count, line_offsets, recall_call, window
from vak_context.context.request.messages import ToolSpec


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
    session: str | None = None  # another session of the ledger (a session_search hit's), read-only


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
            "session": {"type": "string", "description": "Optional: a session_search hit's session."},
        },
        "additionalProperties": False,
    },
)

_RECALL_KEYS = ("id", "range", "chars", "turn", "presentation", "session")
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
    session = given.pop("session", None)
    if session is not None and not (isinstance(session, str) and session.strip()):
        return RecallError(f"session must be a session's name, as a session_search hit names it, got "
                           f"{json.dumps(session, default=repr)}. {_USAGE}")
    parsed = _parse_target(given)
    if isinstance(parsed, RecallError) or session is None:
        return parsed
    return replace(parsed, session=session.strip())


def _parse_target(given: dict[str, Any]) -> RecallRequest | RecallError:
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


def _parse_range(value: Any, what: str = "range") -> tuple[int, int] | RecallError:
    pair: tuple[int | None, int | None] | None = None
    if isinstance(value, list | tuple) and len(value) == 2:
        pair = (int_or_none(value[0]), int_or_none(value[1]))
    elif isinstance(value, list | tuple) and len(value) == 1:
        pair = (int_or_none(value[0]), int_or_none(value[0]))
    elif int_or_none(value) is not None:
        pair = (int_or_none(value), int_or_none(value))
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
    number = int_or_none(value)
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
