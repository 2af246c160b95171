"""The engine's extract of a packet's turns (spec §4): what a packet carries where no model summary was
written (the summariser failed, was turned off or answered nothing): the stated items those turns said,
verbatim, then each turn's directive, outcome and evidence ids, by whole turns within the room, the turns
left out named with the recall that returns each. Pure: the same turns, items and room give the same bytes.

Split from :mod:`vak_context.context.history.packets` (which re-exports ``extract_summary`` and
``extract_line``), where the packet renders it under its own heading.
"""

from __future__ import annotations

from vak_context.context.history.turncard import short_id
from vak_context.context.history.turns import TurnIndex
from vak_context.context.stated.render import said_block, said_in
from vak_context.errors import InvalidInput

EXTRACT_ASKED_CHARS = 100  # a directive's words in the extract, at most (cut at a word, marked with …)
# Where not even one turn's line fits at that length, its directive is cut shorter, down to the last of
# these, so that an extract always lists at least its first turn (never only the range it leaves out).
EXTRACT_TIGHTER_CHARS = (60, 32)


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[: limit - 1].rsplit(" ", 1)[0] or text[: limit - 1]
    return cut + "…"


def extract_line(index: TurnIndex, ordinal: int, asked_chars: int = EXTRACT_ASKED_CHARS) -> str:
    """One turn in the extract: its directive, its outcome (when not ``completed``) and the evidence ids it got."""
    turn = index.turn(ordinal)
    asked = turn.card.asked if turn.card is not None else turn.directive.text
    outcome = turn.card.outcome if turn.card is not None else ("closed" if turn.closed else "open")
    ids = ", ".join(short_id(e) for e in turn.evidence)
    got = f"; evidence {ids}" if ids else ""
    how = "" if outcome == "completed" else f" ({outcome})"
    return f"- Turn {ordinal}{how}: {_cut(asked, asked_chars)}{got}"


def extract_summary(index: TurnIndex, first_ordinal: int, last_ordinal: int, max_chars: int) -> str:
    """The deterministic extract that stands in for a missing summary (spec §4): first the stated items in force
    that these turns said, verbatim (``said_block``: whole items in budget order, each left out named with its
    ``recall``), then one line per turn (``extract_line``), oldest first, by whole lines within what is left of
    ``max_chars``; the turns left out are named with the recall that returns each. At least the first turn is
    listed (its directive cut shorter where its line would not fit, ``EXTRACT_TIGHTER_CHARS``): the items get
    the room beside that. The same turns, items and room give the same bytes."""
    if last_ordinal < first_ordinal:
        raise InvalidInput(f"an extract covers turns first..=last, not {first_ordinal}..{last_ordinal}")
    said = said_in(index.stated.current(), first_ordinal, last_ordinal)
    block = said_block(said, max_chars - _least_lines(index, first_ordinal, last_ordinal) - 2) if said else ""
    if block:  # the stated items first, verbatim: they bind later turns; the turns' lines in what is left
        max_chars -= len(block) + 2
    for asked_chars in (EXTRACT_ASKED_CHARS, *EXTRACT_TIGHTER_CHARS):
        lines = _whole_lines(index, first_ordinal, last_ordinal, max_chars, asked_chars)
        if lines[0].startswith("- Turn "):
            break
    return "\n".join([block, "", *lines] if block else lines)


def _least_lines(index: TurnIndex, first_ordinal: int, last_ordinal: int) -> int:
    """The characters of the shortest listing an extract keeps: its first turn's line at the tightest cut, and
    the line naming the turns after it."""
    after = len(_left_out(first_ordinal + 1, last_ordinal)) + 1 if first_ordinal < last_ordinal else 0
    return len(extract_line(index, first_ordinal, EXTRACT_TIGHTER_CHARS[-1])) + 1 + after


def _whole_lines(index: TurnIndex, first_ordinal: int, last_ordinal: int, max_chars: int, asked_chars: int
                 ) -> list[str]:
    lines: list[str] = []
    used = 0
    for ordinal in range(first_ordinal, last_ordinal + 1):
        line = extract_line(index, ordinal, asked_chars)
        # Room for this line and, unless it is the last, for the line naming the turns after it.
        after = len(_left_out(ordinal + 1, last_ordinal)) + 1 if ordinal < last_ordinal else 0
        if used + len(line) + 1 + after > max_chars:
            lines.append(_left_out(ordinal, last_ordinal))
            break
        lines.append(line)
        used += len(line) + 1
    return lines


def _left_out(first: int, last: int) -> str:
    turns = f"Turn {first}" if first == last else f"Turns {first}–{last}"
    return f'{turns} not listed here: recall({{"turn": N}}) returns each ({first}..{last}).'

