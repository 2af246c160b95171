"""The request's stable prefix and moving tail (spec §6, §10 "Cache mechanics"). Pure.

* :func:`system_prompt`: the static layers only (identity, contract, guardrails, the tool catalogue):
  byte-identical across turns, so nothing that changes per turn may enter it.
* :func:`prefix_digest`: blake3 of the canonical system + tool list; written with every receipt. A turn
  whose digest differs from the previous turn's is a cache break, surfaced as an activity.
* :class:`Tail` / :func:`render_tail`: the per-turn block (``<turn_context>``, ``<intent>``, ``<stance>``,
  ``<thread>``, ``<work_contract>``). It never restates the directive.
* :func:`attach_tail`: puts the tail into the turn's *directive* message (resolved from the turn
  structure, never "the last user message"), after any leading tool results and before the directive's
  own words, so the last thing the model reads there is the user's text.
* :func:`cache_breakpoints`: after the prefix, after the previous turn, on the current step.
* :func:`project`: the ChatRequest a plan asks for: stable prefix (system + tools), the reset's handoff,
  retrieved older turns whole, the packet, the working-set turns (Full or card), and the current turn
  (as its plan carries it) with the tail before the directive's own words.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import blake3

from vak_context.context.capacity.profile import CapacityProfile, request_chars
from vak_context.context.capacity.tokens import estimate_tokens
from vak_context.context.history.packets import (
    covered_evidence,
    covers_whole,
    evidence_count,
    render_handoff,
    render_packet,
    render_step_packet,
    render_stored,
    step_items,
)
from vak_context.context.history.render import EvidenceInfo, closed_record, render_turn
from vak_context.context.history.turns import Summary, Turn, TurnIndex
from vak_context.context.planner.plan import Plan
from vak_context.context.planner.records import SHOWN, Fidelity, plan_rate
from vak_context.context.planner.sizes import card_text
from vak_context.context.request.merged import Merged, Snapshot
from vak_context.context.request.messages import CacheHints, ChatRequest, Message, ToolSpec
from vak_context.context.stated.render import contract_block, render_contract
from vak_context.errors import InvalidInput
from vak_context.events.blocks import MessageBlock, TextBlock, ToolResultBlock
from vak_context.events.canonical import encode
from vak_context.events.payloads import TurnCard

DEFAULT_IDENTITY = (
    "You are a careful software agent working in the user's workspace through tools. "
    "Use the tools to look before you answer; answer from what they returned."
)
DEFAULT_CONTRACT = (
    "Tool results from earlier turns may appear as digests ending in [evidence:<id> …]; recall returns any "
    "of them in full. Earlier turns may appear as cards or a summary packet that names what it covers."
)
DEFAULT_STANCE = "Answer directly; still use a tool when the answer depends on what the workspace holds."


def system_prompt(catalogue: str = "", *, identity: str = DEFAULT_IDENTITY, contract: str = DEFAULT_CONTRACT,
                  guardrails: str = "") -> str:
    """The system prompt's static layers in a fixed order, blank layers left out."""
    return "\n\n".join(layer.strip() for layer in (identity, contract, guardrails, catalogue) if layer.strip())


def prefix_digest(system: str, tools: Sequence[ToolSpec]) -> str:
    """blake3 over the canonical JSON of the system prompt and the tool schemas, in order."""
    key = (system, tuple(map(id, tools)))  # a session's steps pass the same prompt and the same (frozen) specs
    hit = _PREFIXES.get(key)
    if hit is not None and all(a is b for a, b in zip(hit[0], tools, strict=True)):
        return hit[1]
    record = {"system": system, "tools": [t.model_dump(mode="json") for t in tools]}
    digest = blake3.blake3(encode(record)).hexdigest()
    if len(_PREFIXES) >= 256:
        _PREFIXES.clear()
    _PREFIXES[key] = (tuple(tools), digest)
    return digest


# Prefix digests by (system prompt, the tool specs' identities), each entry holding its specs so that no id is
# reused while cached: dumping and hashing the schemas cost a few ms a step, twice a step, for the same prefix.
_PREFIXES: dict[tuple[str, tuple[int, ...]], tuple[tuple[ToolSpec, ...], str]] = {}


def prefix_change(before: tuple[str, Sequence[ToolSpec]], after: tuple[str, Sequence[ToolSpec]]) -> str:
    """What changed between two prefixes, in words, for the cache-break activity."""
    (s0, t0), (s1, t1) = before, after
    parts: list[str] = []
    if s0 != s1:
        at = next((i for i, (a, b) in enumerate(zip(s0, s1, strict=False)) if a != b), min(len(s0), len(s1)))
        parts.append(f"system prompt differs from char {at} ({len(s0)} → {len(s1)} chars)")
    names0, names1 = [t.name for t in t0], [t.name for t in t1]
    if names0 != names1:
        added = [n for n in names1 if n not in names0]
        removed = [n for n in names0 if n not in names1]
        parts.append(f"tools added {added}, removed {removed}" if added or removed else "tool order changed")
    else:
        changed = [a.name for a, b in zip(t0, t1, strict=True) if a != b]
        if changed:
            parts.append(f"tool schemas changed: {changed}")
    return "; ".join(parts) or "no change"


@dataclass(frozen=True)
class Tail:
    """The moving tail of one turn. ``now`` is a UTC timestamp (seconds); the caller owns the clock."""

    now: float
    timezone: str = "UTC"
    intent: str = ""
    stance: str = DEFAULT_STANCE
    thread: tuple[str, ...] = ()  # directives NOT in the working set verbatim
    paused: tuple[str, ...] = ()  # superseded directives: "earlier, now paused"
    work_contract: str = ""


_UTC_NAMES = frozenset({"UTC", "ETC/UTC", "Z", "ZULU", "UCT", "ETC/UCT", "UNIVERSAL", "ETC/UNIVERSAL", "GMT", "ETC/GMT"})


def render_tail(tail: Tail) -> str:
    """The tail block, each part on its own tagged line(s); empty parts are left out."""
    try:
        zone = ZoneInfo(tail.timezone)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise InvalidInput(f"unknown time zone {tail.timezone!r}; use an IANA name such as 'Europe/Paris'") from exc
    instant = datetime.fromtimestamp(tail.now, UTC)
    local = instant.astimezone(zone)
    # A zone at UTC's offset says nothing the UTC time does not: the tail is re-sent with every request and
    # recorded with its turn, so the local time is shown only where it differs.
    here = "" if local.utcoffset() == instant.utcoffset() and tail.timezone.upper() in _UTC_NAMES else (
        f"; local {local.strftime('%Y-%m-%d %H:%M')} {tail.timezone} (UTC{local.strftime('%z')})")
    lines = [f"<turn_context>UTC {instant.strftime('%Y-%m-%dT%H:%M:%SZ')}{here}</turn_context>"]
    if tail.intent.strip():
        lines.append(f"<intent>{tail.intent.strip()}</intent>")
    if tail.stance.strip():
        lines.append(f"<stance>{tail.stance.strip()}</stance>")
    thread = [f"- {d}" for d in tail.thread] + [f"- (earlier, now paused) {d}" for d in tail.paused]
    if thread:
        lines.append("<thread>\n" + "\n".join(thread) + "\n</thread>")
    if tail.work_contract.strip():
        lines.append(contract_block(tail.work_contract))
    return "\n".join(lines) + "\n"


def attach_tail(messages: Sequence[Message], tail: str, directive_index: int) -> tuple[Message, ...]:
    """``messages`` with ``tail`` inserted into the directive message at ``directive_index``: after its
    leading tool results, before its first other part. Every other message is returned unchanged."""
    if not 0 <= directive_index < len(messages):
        raise InvalidInput(f"directive index {directive_index} is not a message index (0–{len(messages) - 1})")
    msg = messages[directive_index]
    if msg.role != "user":
        raise InvalidInput(f"message {directive_index} is an {msg.role} message, not the turn's directive")
    if not tail.strip():  # providers refuse blank text parts
        return tuple(messages)
    lead = 0
    while lead < len(msg.content) and isinstance(msg.content[lead], ToolResultBlock):
        lead += 1
    content = (*msg.content[:lead], TextBlock(text=tail), *msg.content[lead:])
    return (*messages[:directive_index], Message(role="user", content=content), *messages[directive_index + 1:])


def cache_breakpoints(n_messages: int, directive_index: int | None, session_key: str | None) -> CacheHints:
    """Breakpoints computed once per request: after the prefix (``prefix=True``), on the last message
    before the current turn (the previous turn), and on the current step (the last message)."""
    points: list[int] = []
    if directive_index is not None and directive_index > 0:
        points.append(directive_index - 1)
    if n_messages:
        points.append(n_messages - 1)
    return CacheHints(session_key=session_key, prefix=True, breakpoints=tuple(sorted(set(points))))


# ------------------------------------------------------------------ the projection (moved from agent/request.py)


def text_tokens(profile: CapacityProfile, text: str) -> int:
    return estimate_tokens(len(text), profile.tokens_per_char.value)


def prefix_tokens(profile: CapacityProfile, system: str, tools: Sequence[ToolSpec] = ()) -> int:
    """The stable prefix's size: system prompt and tool schemas, counted as a request counts them."""
    return estimate_tokens(request_chars(ChatRequest(model="", system=system, tools=tuple(tools))), profile.tokens_per_char.value)


def packet_text(index: TurnIndex, p: Plan) -> str | None:
    """The packet a plan renders, or None when it has none. Raises when the summary is still to write."""
    pk = p.packet
    if pk is None:
        return None
    if pk.level == "pointer":
        return render_packet(
            pk.first_ordinal, pk.last_ordinal, level="pointer",
            total_evidence=evidence_count(index, pk.first_ordinal, pk.last_ordinal),
        )
    if pk.level == "list":
        items = covered_evidence(index, pk.first_ordinal, pk.last_ordinal)
        return render_packet(pk.first_ordinal, pk.last_ordinal, level="list", evidence=items)
    if pk.stored_id is None:
        raise InvalidInput(
            f"the plan wants a summary of turns {pk.first_ordinal}–{pk.last_ordinal} that is not written yet: "
            "write it with vak_context.agent.summarise.write_packet, then plan again"
        )
    stored = next((s for s in index.summaries if s.id == pk.stored_id), None)
    if stored is None:
        raise InvalidInput(f"stored packet {pk.stored_id} is not in this index; plan against the same index")
    # Cached by (packet, brief, whole), holding the packet so its id is not reused: every step of a long session
    # carries the same packet, listing hundreds of evidence ids, and an evidence line never changes.
    key = (id(stored), pk.level == "brief", covers_whole(index, stored))
    if (hit := _PACKETS.get(key)) is not None and hit[0] is stored:
        return hit[1]
    text = render_stored(index, stored, brief=pk.level == "brief")
    if len(_PACKETS) >= 256:
        _PACKETS.clear()
    _PACKETS[key] = (stored, text)
    return text


_PACKETS: dict[tuple[int, bool, bool], tuple[Summary, str]] = {}


def project(
    index: TurnIndex,
    p: Plan,
    *,
    model: str,
    infos: Mapping[str, EvidenceInfo],
    system: str = "",
    tools: Sequence[ToolSpec] = (),
    tail: str = "",
    max_tokens: int = 1024,
    temperature: float | None = None,
    cache: CacheHints | None = None,
) -> ChatRequest:
    """The ChatRequest ``p`` asks for. ``infos`` digests the evidence of the turns shown at Full and of
    the current turn's steps the plan digests."""
    text = packet_text(index, p)
    messages = _history(index, p, infos, text)
    tail += work_contract(index, p)
    if p.current_ordinal is not None:
        current = current_turn_messages(index, p, infos)
        first = current[0]
        if tail.strip():  # providers refuse blank text parts
            first = Message(role="user", content=(TextBlock(text=tail), *first.content))
        messages.extend([first, *current[1:]])
    else:
        parts: tuple[MessageBlock, ...] = (TextBlock(text=tail),) if tail.strip() else ()
        messages.user((*parts, TextBlock(text=p.directive)))
    return ChatRequest(
        model=model,
        system=system,
        messages=messages.build(),
        tools=tuple(tools),
        max_tokens=max_tokens,
        temperature=temperature,
        cache=cache or CacheHints(),
    )


def _history(index: TurnIndex, p: Plan, infos: Mapping[str, EvidenceInfo], text: str | None) -> Merged:
    """The request's messages before the current turn (the reset's handoff, retrieved turns, the packet
    ``text``, the turns shown), merged, ready for the current turn to follow.

    Every step of a turn projects its frozen plan again, and what it shows of the turns before the current
    one changes only where ``TurnIndex.revision`` moves (the current turn being the index's last): so it is
    built once per (plan, index, revision) and resumed, the same message objects (their char counts, kept by
    identity, are reused too). Not kept for a plan whose current turn is not the index's last."""
    key = (len(index.turns), index.revision, index.tokens_per_char)
    keep = p.current_ordinal is not None and p.current_ordinal == len(index.turns)
    hit = _HISTORIES.get(id(p)) if keep else None
    if (hit is not None and hit[0] is p and hit[1] is index and hit[2] is infos and hit[3] == key
            and hit[4] == text):
        return Merged.resume(hit[5])
    messages = Merged()
    if p.reset is not None:  # the reset this model's plan starts after: its handoff comes first
        mark = next((r for r in index.reset_marks if r.id == p.reset.entry_id), None)
        if mark is None:
            raise InvalidInput(f"reset {p.reset.entry_id} is not in this index; plan against the same index")
        messages.user((TextBlock(text=render_handoff(mark.turns, mark.handoff)),))
    rows = p.rows
    start, codes = rows.history_start, rows.codes
    runs = [m.span() for m in _SHOWN_RUN.finditer(codes)]  # the shown turns, as runs of positions
    if runs and runs[-1][1] > len(index.turns):
        index.turn(runs[-1][1])  # raises: the plan is not this index's
    # retrieved older turns come first, whole; they and the turns at Full break the runs of cards
    retrieved = sorted(i for i in rows.retrieved if i >= start and i < len(codes) and codes[i] in SHOWN)
    for i in retrieved:
        messages.extend(_record(index, index.turns[i], infos))
    if text is not None:
        messages.user((TextBlock(text=text),))
    skip = set(retrieved)
    breaks = sorted({*skip, *(m.start() for m in _FULL_CODE.finditer(codes, start))})
    cards: list[MessageBlock] = []  # a run of cards, one user message: added at once
    k = 0
    for a, b in runs:
        i = a
        while k < len(breaks) and breaks[k] < b:
            j = breaks[k]
            k += 1
            cards.extend(_card_run(index, infos, i, j))
            if j not in skip:  # at Full (a retrieved turn came first)
                if cards:
                    messages.user(tuple(cards))
                    cards.clear()
                messages.extend(_record(index, index.turns[j], infos))
            i = j + 1
        cards.extend(_card_run(index, infos, i, b))
    if cards:
        messages.user(tuple(cards))
    if keep:
        if len(_HISTORIES) >= 64:
            _HISTORIES.clear()
        snapshot = messages.snapshot()
        _HISTORIES[id(p)] = (p, index, infos, key, text, snapshot)
        return Merged.resume(snapshot)
    return messages


_SHOWN_RUN = re.compile(f"[{re.escape(SHOWN)}]+")
_FULL_CODE = re.compile(re.escape(Fidelity.FULL.code))


def _card_run(index: TurnIndex, infos: Mapping[str, EvidenceInfo], a: int, b: int) -> list[MessageBlock]:
    """The card blocks of the turns at positions ``a`` to ``b`` (shown as cards): those before the index's last
    turn kept as a list by position while ``TurnIndex.revision`` stands (only an entry that moves it changes such
    a turn), so a new plan's run of hundreds of cards is a slice, not a lookup a card."""
    if a >= b:
        return []
    hit = _CARD_RUNS.get(id(index))
    if hit is None or hit[0] is not index or hit[1] is not infos or hit[2] != index.revision:
        if len(_CARD_RUNS) >= 64:
            _CARD_RUNS.clear()
        hit = _CARD_RUNS[id(index)] = (index, infos, index.revision, [])
    kept, turns = hit[3], index.turns
    end = min(b, len(turns) - 1)
    while len(kept) < end:
        kept.append(_card_block(index, turns[len(kept)], infos))
    return [*kept[a:end], *(_card_block(index, turns[i], infos) for i in range(max(a, end), b))]


# Card blocks by position of the turns before an index's last, with the index and infos they were made from
# (held: no id is reused while kept) and the index's revision then.
_CARD_RUNS: dict[int, tuple[TurnIndex, Mapping[str, EvidenceInfo], int, list[MessageBlock]]] = {}


# Each plan's history as ``Merged.snapshot`` made it, holding the plan, index and infos it was made from (so
# no id is reused while it is kept) and what it stands for: (turns, revision, tokens per char), the packet text.
_HISTORIES: dict[int, tuple[Plan, TurnIndex, Mapping[str, EvidenceInfo], tuple[int, int, float], str | None,
                            Snapshot]] = {}


def work_contract(index: TurnIndex, p: Plan) -> str:
    """The ``<work_contract>`` line the plan's tail carries (docs/STATE.md): the stated items in force as of
    the current turn that no turn the plan carries whole says already, within the room the plan took for them
    (``Budget.contract``, at the plan's rate); "" when there are none. Appended after the turn's recorded
    tail, as ``render_tail`` would place it: a closed turn's record never carries it (a later request states
    the items in force then, once)."""
    items = index.stated.current(p.current_ordinal)
    if not items or p.budget.contract <= 0:
        return ""
    whole = {t.ordinal for t in p.shown() if t.fidelity == Fidelity.FULL}
    return render_contract(items, whole, p.budget.contract, plan_rate(p))


def current_turn_messages(index: TurnIndex, p: Plan, infos: Mapping[str, EvidenceInfo]) -> list[Message]:
    """The current turn's messages as its plan carries them (before the tail joins the first one): steps in a stored or step packet left out whole (the
    step packet, naming their evidence, follows the directive), then digested steps, then the rest
    with their results as the request carried them."""
    turn = index.turn(p.current_ordinal or 0)
    ct = p.current_turn
    if ct is None or ct.digest_through == 0:  # nothing left out, nothing digested
        return render_turn(turn, {}, with_tail=False)
    lead: tuple[MessageBlock, ...] = ()
    if ct.packet_through > ct.covered:
        items = [item for step in step_items(index, turn)[ct.covered : ct.packet_through] for item in step]
        lead = (TextBlock(text=render_step_packet(turn.ordinal, ct.covered + 1, ct.packet_through,
                                                 level="ids" if ct.level == "ids" else "list", items=items)),)
    return render_turn(turn, infos, first_step=ct.packet_through, digest_until=ct.digest_through, lead=lead,
                       with_tail=False)


def _text_block(text: str) -> TextBlock:
    """The text block of a card's text, made once per text (a long session shows hundreds of cards a step)."""
    block = _BLOCKS.get(text)
    if block is None:
        if len(_BLOCKS) >= 16_384:
            _BLOCKS.clear()
        block = _BLOCKS[text] = TextBlock(text=text)
    return block


_BLOCKS: dict[str, TextBlock] = {}


def _card_block(index: TurnIndex, turn: Turn, infos: Mapping[str, EvidenceInfo]) -> TextBlock:
    """The text block of ``turn``'s card: a stored card (a frozen model, never rewritten) is rendered once per
    (card, ordinal), since every plan of a long session shows hundreds of the same cards."""
    card = turn.card
    if card is None:
        return _text_block(card_text(index, turn, infos))
    hit = _CARDS.get(id(card))
    if hit is not None and hit[0] is card and hit[1] == turn.ordinal:
        return hit[2]
    block = _text_block(card_text(index, turn, infos))
    if len(_CARDS) >= 16_384:
        _CARDS.clear()
    _CARDS[id(card)] = (card, turn.ordinal, block)
    return block


_CARDS: dict[int, tuple[TurnCard, int, TextBlock]] = {}  # holding the card, so its id is not reused while kept


def _record(index: TurnIndex, turn: Turn, infos: Mapping[str, EvidenceInfo]) -> tuple[Message, ...]:
    """``closed_record(turn, infos)`` of a turn before the index's last, kept while ``TurnIndex.revision``
    stands (only an entry that moves it changes such a turn), without comparing what it is made of each time."""
    if turn.ordinal >= len(index.turns):  # the last turn still grows: closed_record compares its parts
        return closed_record(turn, infos)
    hit = _TURN_RECORDS.get(id(turn))
    if hit is not None and hit[0] is turn and hit[1] is index and hit[2] is infos and hit[3] == index.revision:
        return hit[4]
    record = closed_record(turn, infos)
    if len(_TURN_RECORDS) >= 4096:
        _TURN_RECORDS.clear()
    _TURN_RECORDS[id(turn)] = (turn, index, infos, index.revision, record)
    return record


# Records of turns before their index's last, with the turn, index and infos they were made from (held: no id is
# reused while kept) and the index's revision then.
_TURN_RECORDS: dict[int, tuple[Turn, TurnIndex, Mapping[str, EvidenceInfo], int, tuple[Message, ...]]] = {}


def request_tokens(profile: CapacityProfile, request: ChatRequest) -> int:
    return estimate_tokens(request_chars(request), profile.tokens_per_char.value)


