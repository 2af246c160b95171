"""Compaction packets (spec §4): range-keyed, a cache and never a boundary. Pure: no I/O, no clock.

A packet stands for an inclusive range of turns (``first_turn_id..=last_turn_id``) that a plan
left out of the working set. It is rendered inside ``<context_summary>`` at one of three levels,
the richest that fits the room the plan gave it:

* ``summary``: a summariser-written summary, then the evidence the turns hold (one line each, with
  the id ``recall({"id": ...})`` takes), then how to reach the turns themselves;
* ``brief``: the same summary with the evidence counted instead of listed (``recall({"turn": N})``
  lists a turn's ids): a summary whose size does not grow with the tool results its turns hold, so it
  still fits where their evidence lines alone would not;
* ``list``: the evidence lines and the recall line, no summary (no summariser call);
* ``pointer``: one paragraph naming the turns, how many tool results they hold and how to recall
  them: what a model with almost no room is told it is missing.

A summary is written once per range, when the packet over that range is formed, and stored (a
``compaction`` entry recording the model whose plan asked for it); every later request carrying that
range renders the stored text, byte for byte. Where the summariser failed, was turned off or answered
nothing, the stored text is the deterministic extract (``extract_summary``: each turn's directive,
outcome and evidence ids, by whole turns within the room; ``source="extract"``), rendered under its
own heading so neither the model nor a reader takes it for a model's summary. ``list`` and
``pointer`` are recomputed from the index, byte for byte. A stored packet is rendered only for a plan
whose packet range is exactly its range.

Growing a packet (same first turn, later last turn) seeds the summariser with the longest stored
packet over that first turn and gives it only the newly covered turns (``seed_packet``,
``summariser_prompt``). The summariser sees each turn as its full record with digests (never cut)
or, when the record does not fit its own window, as the turn's card.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple

from vak_context.context.capacity.tokens import estimate_tokens
from vak_context.context.history.packet_extract import (
    EXTRACT_ASKED_CHARS as EXTRACT_ASKED_CHARS,  # re-exported
)
from vak_context.context.history.packet_extract import EXTRACT_TIGHTER_CHARS as EXTRACT_TIGHTER_CHARS
from vak_context.context.history.packet_extract import extract_line as extract_line
from vak_context.context.history.packet_extract import extract_summary as extract_summary
from vak_context.context.history.turncard import args_digest, short_id
from vak_context.context.history.turns import EvidenceMeta, Summary, Turn, TurnIndex
from vak_context.errors import InvalidInput
from vak_context.events.payloads import Compaction, CoveredEvidence

# Evicted turns enter the packet in batches of this many, counted from the first planned turn, so
# the packet boundary holds steady over several turns (spec §4: a design constant).
PACKET_BATCH_TURNS = 8
# The most of the history budget a packet may take: the rest stays for turns at Full or as cards.
PACKET_SHARE = 0.25
# Below this many tokens of room a summary says too little to be worth a side call.
MIN_SUMMARY_TOKENS = 48
# A summary must compress: it gets at most this fraction of what the covered turns' cards would cost.
SUMMARY_COMPRESSION = 0.5
# The summariser is asked for this fraction of the room, because its tokenizer is not the bound
# model's and its count of tokens is only estimated here from characters.
SUMMARY_HEADROOM = 0.75

Level = Literal["summary", "brief", "list", "pointer"]
SUMMARY_LEVELS = ("summary", "brief")  # the levels that carry a stored summary (or need one written)

OPEN_TAG = "<context_summary"
CLOSE_TAG = "</context_summary>"
EVIDENCE_HEADER = 'Evidence in these turns (recall({"id": "<id>"}) returns any of it in full):'
SUMMARY_HEADER = "Summary:"
EXTRACT_HEADER = "What these turns did (the engine's extract; no model summary of them was written):"


@dataclass(frozen=True)
class CoveredItem:
    evidence_id: str
    description: str


def describe_evidence(meta: EvidenceMeta | None) -> str:
    """One line for an evidence body: the tool, the size, and whether it was an error."""
    if meta is None:
        return "tool result"
    error = ", error" if meta.is_error else ""
    unit = "bytes" if meta.encoding == "binary" else "chars"
    return f"{meta.tool_name or 'tool'} result, {meta.chars:,} {unit}{error}"


def covered_evidence(index: TurnIndex, first_ordinal: int, last_ordinal: int) -> list[CoveredItem]:
    """Every evidence body captured in turns ``first_ordinal..=last_ordinal``, in ledger order."""
    out: list[CoveredItem] = []
    for ordinal in range(first_ordinal, last_ordinal + 1):
        for eid in index.turn(ordinal).evidence:
            out.append(CoveredItem(eid, describe_evidence(index.evidence.get(eid))))
    return out


def evidence_count(index: TurnIndex, first_ordinal: int, last_ordinal: int) -> int:
    return sum(len(index.turn(o).evidence) for o in range(first_ordinal, last_ordinal + 1))


# ------------------------------------------------------------------ rendering


def _recall_line(first: int, last: int, through_step: int | None = None) -> str:
    if through_step is not None:  # a recorded mid-turn compaction: the last turn's first steps only
        turns = f"Turns {first}–{last - 1} and steps" if last > first else "Steps"
        return (
            f"{turns} 1–{through_step} of turn {last} are not shown whole here. "
            'recall({"turn": N}) returns any turn in full, with the evidence id of every tool result in it.'
        )
    return (
        f'Turns {first}–{last} of this session are not shown whole here. recall({{"turn": N}}) returns '
        "any of them in full, with the evidence id of every tool result in it."
    )


def render_packet(
    first_ordinal: int,
    last_ordinal: int,
    *,
    level: Level,
    evidence: Sequence[CoveredItem] = (),
    total_evidence: int | None = None,
    summary: str = "",
    through_step: int | None = None,
    extract: bool = False,
) -> str:
    """The packet text, wrapped in ``<context_summary>``. Deterministic: the same inputs give the same bytes.
    ``through_step``: the packet covers only the first steps of its last turn (a recorded mid-turn compaction).
    ``extract``: the summary text is the engine's deterministic extract, not a model's (its own heading)."""
    if first_ordinal < 1 or last_ordinal < first_ordinal:
        raise InvalidInput(f"a packet covers turns first..=last with 1 <= first <= last, not {first_ordinal}..{last_ordinal}")
    steps = f' through_step="{through_step}"' if through_step is not None else ""
    lines = [f'{OPEN_TAG} turns="{first_ordinal}-{last_ordinal}"{steps}>',
             _recall_line(first_ordinal, last_ordinal, through_step)]
    if level == "pointer":
        n = len(evidence) if total_evidence is None else total_evidence
        lines.append(f"They hold {n} tool result{'s' if n != 1 else ''}; no summary of them fits this request.")
    else:
        if level in SUMMARY_LEVELS:
            if not summary.strip():
                raise InvalidInput("a summary-level packet needs the summary text; use level 'list' without one")
            lines.append(EXTRACT_HEADER if extract else SUMMARY_HEADER)
            lines.append(summary.strip())
        if level == "brief":
            n = len(evidence) if total_evidence is None else total_evidence
            lines.append(_brief_line(n))
        elif evidence:
            lines.append(EVIDENCE_HEADER)
            lines.extend(item_line(item) for item in evidence)
        else:
            lines.append("These turns hold no tool results.")
    lines.append(CLOSE_TAG)
    return "\n".join(lines)


def _brief_line(n: int) -> str:
    if n == 0:
        return "These turns hold no tool results."
    return (f"They hold {n} tool result{'s' if n != 1 else ''}, each stored whole: "
            'recall({"turn": N}) lists a turn\'s evidence ids, recall({"id": "<id>"}) returns one.')


def tokens_of(text: str, tokens_per_char: float) -> int:
    """Tokens the plan charges for ``text``: characters times the bound model's measured ratio, rounded up."""
    return estimate_tokens(len(text), tokens_per_char)


def item_line(item: CoveredItem) -> str:
    return f"- {short_id(item.evidence_id)}: {item.description}"


def list_chars(first_ordinal: int, last_ordinal: int, item_chars: int, items: int) -> int:
    """``len(render_packet(..., level="list", evidence=...))`` from the summed ``item_line`` lengths,
    without building the text: the planner sizes many candidate ranges per plan."""
    if items == 0:
        return len(render_packet(first_ordinal, last_ordinal, level="list"))
    lines = [f'{OPEN_TAG} turns="{first_ordinal}-{last_ordinal}">', _recall_line(first_ordinal, last_ordinal),
             EVIDENCE_HEADER, CLOSE_TAG]
    return sum(map(len, lines)) + len(lines) - 1 + item_chars + items


@dataclass(frozen=True)
class PacketRoom:
    """What a packet over one range costs at the richest level that fits ``share`` (or the pointer).

    ``allowance`` is what the plan reserves; ``summary_tokens`` is the room left for a summary's
    own text at level ``summary`` (0 otherwise).
    """

    level: Level
    allowance: int
    summary_tokens: int
    pointer_tokens: int
    list_tokens: int


def packet_room(
    first_ordinal: int,
    last_ordinal: int,
    *,
    share: int,
    budget: int,
    tokens_per_char: float,
    card_tokens: int,
    item_chars: int,
    items: int,
) -> PacketRoom | None:
    """The level and allowance of a packet over the range, or None when not even the pointer fits ``budget``.

    The richest first: ``summary`` (a summary and every evidence line), ``brief`` (a summary, the
    evidence counted), ``list``, ``pointer``.

    ``share`` is the most the packet may take; ``card_tokens`` what the covered turns' cards would
    cost (a summary gets at most ``SUMMARY_COMPRESSION`` of that); ``item_chars`` and ``items`` the
    summed ``item_line`` lengths and the number of evidence bodies in the range."""
    pointer = tokens_of(render_packet(first_ordinal, last_ordinal, level="pointer", total_evidence=items), tokens_per_char)
    listed = estimate_tokens(list_chars(first_ordinal, last_ordinal, item_chars, items), tokens_per_char)
    # "\nSummary:\n" plus the summary's text: the summary level costs the list level plus this.
    overhead = tokens_of("\nSummary:\n", tokens_per_char) + 1
    room = min(share - listed - overhead, math.floor(card_tokens * SUMMARY_COMPRESSION))
    if room >= MIN_SUMMARY_TOKENS:
        return PacketRoom("summary", listed + overhead + room, room, pointer, listed)
    brief = tokens_of(render_packet(first_ordinal, last_ordinal, level="brief", summary="-", total_evidence=items),
                      tokens_per_char)
    room = min(share - brief - overhead, math.floor(card_tokens * SUMMARY_COMPRESSION))
    if room >= MIN_SUMMARY_TOKENS:
        return PacketRoom("brief", brief + overhead + room, room, pointer, listed)
    if listed <= share:
        return PacketRoom("list", listed, 0, pointer, listed)
    if pointer <= budget:
        return PacketRoom("pointer", pointer, 0, pointer, listed)
    return None


# ------------------------------------------------------------------ stored packets


def covers_whole(index: TurnIndex, packet: Summary) -> bool:
    """Whether a stored packet covers every step of its last turn (a mid-turn one covers the first few)."""
    if packet.through_step is None or packet.last_ordinal is None:
        return True
    return packet.through_step >= len(index.turn(packet.last_ordinal).steps)


def stored_packet(index: TurnIndex, first_turn_id: str, last_turn_id: str) -> Summary | None:
    """The latest stored packet over exactly this range, every step of it (not behind a reset), or None."""
    found = None
    for s in index.summaries:
        if not s.behind_reset and s.first_turn_id == first_turn_id and s.last_turn_id == last_turn_id and s.summary.strip():
            if covers_whole(index, s):
                found = s
    return found


def midturn_packet(index: TurnIndex, first_turn_id: str, current: int, steps: int) -> Summary | None:
    """The latest stored packet from ``first_turn_id`` through some of the first ``steps`` steps of turn
    ``current``, written while that turn was open (a recorded mid-turn compaction), or None."""
    found = None
    current_id = index.turn(current).id
    for s in index.summaries:
        if (not s.behind_reset and s.first_turn_id == first_turn_id and s.last_turn_id == current_id
                and s.summary.strip() and s.through_step is not None and 0 < s.through_step <= steps):
            found = s
    return found


def seed_packet(index: TurnIndex, first_turn_id: str, last_ordinal: int) -> Summary | None:
    """The longest stored packet over the same first turn that ends before ``last_ordinal``: what a
    growing packet starts from, so the summariser sees only the newly covered turns."""
    best: Summary | None = None
    for s in index.summaries:
        if s.behind_reset or s.first_turn_id != first_turn_id or s.last_ordinal is None or not s.summary.strip():
            continue
        if not covers_whole(index, s):  # growing from it would skip its last turn's later steps
            continue
        if s.last_ordinal >= last_ordinal:
            continue
        if best is None or best.last_ordinal is None or s.last_ordinal >= best.last_ordinal:
            best = s
    return best


def render_stored(index: TurnIndex, packet: Summary, *, brief: bool = False) -> str:
    """A stored packet as the model reads it: its own summary and the evidence it names (``brief``, or a
    packet written brief: counted)."""
    brief = brief or packet.brief
    if packet.first_ordinal is None or packet.last_ordinal is None:
        raise InvalidInput(f"stored packet {packet.id} names turns that are not in this chain")
    # brief counts the evidence: its lines are made only where they are shown (a long session's packet names
    # ~1,000 bodies, and a stored packet is rendered at each plan and projection)
    items = [] if brief else [CoveredItem(eid, describe_evidence(index.evidence.get(eid)))
                              for eid in packet.covered_evidence]
    whole = covers_whole(index, packet)
    return render_packet(
        packet.first_ordinal, packet.last_ordinal, level="brief" if brief else "summary", evidence=items,
        total_evidence=len(packet.covered_evidence) if brief else None, summary=packet.summary, through_step=None if whole else packet.through_step,
        extract=packet.source == "extract",
    )


def render_handoff(turns: int, handoff: str) -> str:
    """A reset-with-handoff as the model reads it, first in every request of the model it applies to."""
    return f'<context_reset turns="1-{turns}">\n{handoff.strip()}\n</context_reset>'


# ------------------------------------------------------------------ step packets (the current turn)

StepLevel = Literal["list", "ids"]
ARGS_CHARS = 80  # a step packet's line shows at most this much of a call's arguments


class StepItem(NamedTuple):
    """One call of a current-turn step that got an evidence id: the id, its ``list``-level line (the call
    with its arguments cut to ``ARGS_CHARS`` and what it returned) and its ``ids``-level line (the call's
    name alone). Both levels name every call, so a model reading the packet can tell which calls ran."""

    evidence: str
    line: str
    brief: str


def step_items(index: TurnIndex, turn: Turn) -> list[list[StepItem]]:
    """Per step of ``turn``: each evidence id its calls got, with its step-packet lines."""
    out: list[list[StepItem]] = []
    for k, step in enumerate(turn.steps, start=1):
        items = []
        for ex in step.exchanges:
            eid = ex.evidence_id
            if eid is None:
                continue  # a card ack, an unanswered call or a result stored without a body: nothing to recall
            args = args_digest(ex.input)
            args = args if len(args) <= ARGS_CHARS else args[: ARGS_CHARS - 1] + "…"
            error = ex.result.content if ex.result is not None and ex.result.is_error else None
            items.append(StepItem(eid, f"- step {k} {ex.tool_name}({args}): {short_id(eid)}, "
                                       f"{describe_evidence(index.evidence.get(eid))}{_error_line(error, ERROR_CHARS)}",
                                  f"- step {k} {ex.tool_name}: {short_id(eid)}{_error_line(error, BRIEF_ERROR_CHARS)}"))
        out.append(items)
    return out


# A step packet's line shows at most this much of an error result's first line (list level, ids level).
ERROR_CHARS = 80
BRIEF_ERROR_CHARS = 40


def _error_line(content: str | None, limit: int) -> str:
    """What an error result said, on its packet line: a call the engine did not run (``rm: not run: at
    most 8 calls ...``) must not read as a call that ran, or the model never makes it again."""
    if content is None:
        return ""
    first = content.strip().split("\n", 1)[0]
    first = first if len(first) <= limit else first[: limit - 1] + "…"
    return f" (error: {first})" if first else " (error)"


def _step_fixed(ordinal: int, first: int, last: int, count: int) -> list[str]:
    return [
        f'{OPEN_TAG} turn="{ordinal}" steps="{first}-{last}">',
        f"Steps {first}–{last} of this turn are not shown here. Every tool result they got is stored whole: "
        f'recall({{"id": "<id>"}}) returns it. They hold {count} stored result{"s" if count != 1 else ""}.',
        CLOSE_TAG,
    ]


def render_step_packet(
    ordinal: int, first: int, last: int, *, level: StepLevel, items: Sequence[StepItem]
) -> str:
    """The packet over steps ``first..=last`` of the current turn: one line per call that got an evidence
    id, in order, with its arguments and what it returned (``list``) or its name alone (``ids``), and the
    id. Deterministic."""
    if first < 1 or last < first:
        raise InvalidInput(f"a step packet covers steps first..=last with 1 <= first <= last, not {first}..{last}")
    head, recall, close = _step_fixed(ordinal, first, last, len(items))
    body = [item.line if level == "list" else item.brief for item in items]
    return "\n".join([head, recall, *body, close])


def step_packet_chars(ordinal: int, first: int, last: int, *, level: StepLevel, line_chars: int,
                      brief_chars: int, items: int) -> int:
    """``len(render_step_packet(...))`` from the summed ``line`` (list) or ``brief`` (ids) lengths."""
    fixed = _step_fixed(ordinal, first, last, items)
    return sum(map(len, fixed)) + 2 + (line_chars if level == "list" else brief_chars) + items


def compaction_payload(
    index: TurnIndex,
    first_ordinal: int,
    last_ordinal: int,
    summary: str,
    *,
    model: str,
    seeded_from: str | None = None,
    source: Literal["summariser", "extract"] = "summariser",
    brief: bool = False,
    listed: bool = True,
) -> Compaction:
    """The ``compaction`` entry for a summarised range: keyed by the range, naming every evidence id, or
    (``listed`` False, as the engine writes it) naming them by the range alone (``covered_evidence`` null:
    readers derive the same ids, ``TurnIndex``), so the entry does not grow with the session."""
    if not summary.strip():
        raise InvalidInput("a compaction packet needs a summary; a range with none is rendered as a list")
    first, last = index.turn(first_ordinal), index.turn(last_ordinal)
    if first.behind_reset or last.behind_reset:
        raise InvalidInput("turns behind a reset are never covered by a packet; plan the session again")
    return Compaction(
        first_turn_id=first.id,
        last_turn_id=last.id,
        summary=summary.strip(),
        covered_evidence=_covered_range(index, first_ordinal, last_ordinal) if listed else None,
        model=model,
        seeded_from=seeded_from,
        source=source,
        brief=brief,
    )


# Covered items by the evidence ids they name (content hashes: an id fixes the body, so its description): a growing
# packet names every evidence body of its range again each time it grows (at 1,000 turns ~1,700 items a packet,
# made and validated anew: ~30 ms a packet, ~12% of a step's engine time); a closed turn's bodies never change.
_TURN_COVERED: OrderedDict[tuple[str, ...], tuple[CoveredEvidence, ...]] = OrderedDict()
_TURN_COVERED_KEPT = 1 << 15
_TURN_COVERED_LOCK = threading.Lock()  # planners of several sessions may share a process


# The items of the last range made per first turn (its id): (last ordinal, that turn's id, the items, how many of them
# are that turn's). A packet grows
# from the same first turn, and a turn's id (its directive's, a hash over the chain) fixes every turn before it, so
# the items up to a turn of the same id are the same but for that turn's own bodies (compared): only the turns
# since are made (~1,000 turns a packet at 1,000 turns: ~4 ms a packet).
_GROWN: OrderedDict[str, tuple[int, str, tuple[CoveredEvidence, ...], int]] = OrderedDict()
_GROWN_KEPT = 256


def _covered_range(index: TurnIndex, first: int, last: int) -> tuple[CoveredEvidence, ...]:
    """``covered_evidence(index, first, last)`` as the entry names it."""
    key = index.turn(first).id
    start, items = first, ()  # type: int, tuple[CoveredEvidence, ...]
    hit = _GROWN.get(key)
    if hit is not None and first <= hit[0] <= last and index.turn(hit[0]).id == hit[1]:
        own = _covered_turn(index, hit[0])
        if len(own) == hit[3] and hit[2][len(hit[2]) - hit[3]:] == own:
            start, items = hit[0] + 1, hit[2]
    items += tuple(c for o in range(start, last + 1) for c in _covered_turn(index, o))
    with _TURN_COVERED_LOCK:
        _GROWN[key] = (last, index.turn(last).id, items, len(_covered_turn(index, last)))
        while len(_GROWN) > _GROWN_KEPT:
            _GROWN.popitem(last=False)
    return items


def _covered_turn(index: TurnIndex, ordinal: int) -> tuple[CoveredEvidence, ...]:
    """``covered_evidence(index, ordinal, ordinal)`` as the entry names it (kept per turn)."""
    key = tuple(index.turn(ordinal).evidence)  # not the turn's id: a forked session's turn holds other bodies
    hit = _TURN_COVERED.get(key)
    if hit is None:
        hit = tuple(CoveredEvidence(id=eid, description=describe_evidence(index.evidence.get(eid))) for eid in key)
        with _TURN_COVERED_LOCK:
            _TURN_COVERED[key] = hit
            while len(_TURN_COVERED) > _TURN_COVERED_KEPT:
                _TURN_COVERED.popitem(last=False)
    return hit


# ------------------------------------------------------------------ the summariser's packet

SUMMARISER_SYSTEM = (
    "You keep the running summary of an agent session for a model that will not see the turns it "
    "covers. Write plain prose: what the user asked, what the assistant did and found, what was "
    "decided, and what is still open. Keep names, ids, numbers, file paths and error messages exactly "
    "as written. Never invent anything. Do not call tools. Answer with the summary only."
)


def summariser_prompt(
    previous: str | None, records: Sequence[tuple[int, str]], first_ordinal: int, last_ordinal: int, words: int
) -> str:
    """The summariser's purpose-built packet: the previous summary, then the newly covered turn records."""
    if not records:
        raise InvalidInput("the summariser needs at least one turn record")
    parts = []
    if previous:
        parts.append(f"<previous_summary>\n{previous.strip()}\n</previous_summary>")
    for ordinal, text in records:
        parts.append(f'<turn n="{ordinal}">\n{text}\n</turn>')
    parts.append(
        f"Write the summary of turns {first_ordinal}–{last_ordinal}"
        + (" (the previous summary plus the turns above)" if previous else "")
        + f", in at most {words} words."
    )
    return "\n\n".join(parts)
