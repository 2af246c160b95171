"""The full-record rendering of a closed turn (spec §10), as ``vak_context.context.request.messages.Message`` objects.

The record is the turn as it was sent, with three changes and nothing else:

* thinking is dropped;
* every evidence result longer than ``VERBATIM_CHARS`` is replaced by its digest
  (``vak_context.context.evidence.digest.digest``, which ends with the ``[evidence:<id> — <n> chars; call recall to
  expand]`` tag), except a ``recall``'s, which is replaced by its lead (``vak_context.context.evidence.lead``:
  the lines it asked for that fit, and the recall call for the rest), and every ``emit_*_card`` result by the short ack ``{"presentation": "<id>", "ok": true}``;
* a ```vak fence that duplicates a card already presented in the turn is dropped from the prose.

So the directive keeps the tail block it was sent with (a ``turn_tail`` entry, when one was recorded),
and a result no longer than a digest may be stays as the request carried it. A turn whose results
are all that short renders closed exactly as its last step sent it, so the next turn's first request
finds the whole previous turn in the provider's prefix cache (spec P5; ``docs/CACHE.md``).

The real tool_use/tool_result pairs stay: every tool_use is answered by exactly one tool_result in
the next user message, in call order, so the record is API-valid on every provider and byte-stable
once the turn closes. A call the recording never answered gets an explicit error result saying so.

Pure: the caller passes each evidence body's digest in (``evidence_info`` computes one from the
stored bytes), so nothing here reads the ledger.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vak_context.context.evidence.digest import DIGEST_CHARS, body_text, shaped_digest
from vak_context.context.evidence.lead import RECALL_NAME, recall_lead
from vak_context.context.evidence.shapes.focus import focus_terms
from vak_context.context.history.cards import card_ack, payload_digest
from vak_context.context.history.infocache import InfoCache
from vak_context.context.history.turns import Exchange, Step, Turn
from vak_context.context.request.messages import Message
from vak_context.context.request.toolrefs import FIND_TOOLS_NAME, tools_loaded_by
from vak_context.errors import VakError
from vak_context.events.blocks import ImageBlock, MessageBlock, TextBlock, ToolResultBlock, ToolUseBlock
from vak_context.events.payloads import EvidenceBody, Presentation

SHORT_ID = 12  # digests and cards name ids by their first 12 hex digits; recall resolves a unique prefix
# A result this short is its own record: its digest could be as long (``DIGEST_CHARS`` is the longest a
# digest gets), and keeping it as sent keeps the closed turn byte-identical to the requests that carried it.
VERBATIM_CHARS = DIGEST_CHARS
NO_RESULT = "[no result was recorded for this call: the recorded run ended or moved on before it returned]"

_FENCE = re.compile(r"```vak[^\n]*\n(.*?)\n?```[ \t]*\n?", re.DOTALL)


@dataclass(frozen=True)
class EvidenceInfo:
    """What a closed turn shows of one evidence body: its shape, its digest, and its size."""

    shape: str
    digest: str
    chars: int


# The process's digests, each computed once per result (``vak_context.context.history.infocache``).
DIGESTS: InfoCache[EvidenceInfo] = InfoCache()


def evidence_info(
    evidence_id: str,
    body: EvidenceBody,
    blob: bytes,
    tool_input: Mapping[str, Any] | None = None,
    *,
    shown_id: str | None = None,
    focus: str = "",
) -> EvidenceInfo:
    """Shape and digest of a stored body, computed once per result in this process (``DIGESTS``) and
    kept: every view, actor and rebuild that asks for it again reads the same value.

    ``shown_id`` is the id the digest's evidence tag names: by default the first ``SHORT_ID`` hex
    digits, which recall resolves as a unique prefix within the session. ``focus`` is the text of the
    directive of the turn the result fell in (``turn_focus``): the digest quotes the lines that name its
    distinctive words. Every holder passes the same turn's, so every holder shows the same digest.
    """
    shown = shown_id or evidence_id[:SHORT_ID]
    inputs = dict(tool_input or {})
    check = (len(blob), body.encoding, body.tool_name, body.is_error, inputs, focus_terms(focus))
    return DIGESTS.get(
        (evidence_id, shown), check, lambda: compute_evidence_info(body, blob, inputs, shown, focus)
    )


def turn_focus(turn: Turn | None) -> str:
    """What a digest of a result in ``turn`` focuses on: its directive's text ("" outside a turn)."""
    return turn.directive.text if turn is not None else ""


def compute_evidence_info(
    body: EvidenceBody, blob: bytes, tool_input: Mapping[str, Any], shown_id: str, focus: str = ""
) -> EvidenceInfo:
    """``evidence_info`` without the cache: the body decoded, its shape detected and digested in one read."""
    text = body_text(blob, body.encoding)
    shape, shown = shaped_digest(  # one read of the body: a JSON body is parsed once, not twice
        text,
        shown_id,
        tool_name=body.tool_name,
        is_error=body.is_error,
        tool_input=dict(tool_input),
        focus=focus,
    )
    return EvidenceInfo(shape, shown, len(text))


def is_card_tool(name: str) -> bool:
    """``emit_<type>_card`` tools (the card library generates them all with this shape)."""
    return name.startswith("emit_") and name.endswith("_card")


# ------------------------------------------------------------------ fences


def fence_payloads(text: str) -> list[tuple[re.Match[str], Any]]:
    """Every ```vak fence in ``text`` with its parsed JSON (None when it does not parse)."""
    out = []
    for m in _FENCE.finditer(text):
        try:
            value = json.loads(m.group(1))
        except ValueError:
            value = None
        out.append((m, value))
    return out


def _fence_digests(value: Any) -> set[str]:
    """Payload digests a fence could stand for: the object itself, or its ``payload``/``card`` field."""
    found = set()
    nested = [value.get(k) for k in ("payload", "card", "data")] if isinstance(value, dict) else []
    for candidate in [value, *nested]:
        if isinstance(candidate, dict):
            try:
                found.add(payload_digest(candidate))
            except VakError:  # a fence is model text: one that cannot be hashed is kept as written
                continue
    return found


def strip_card_fences(
    text: str, step_id: str, presentations: Mapping[str, Presentation], shown: set[str]
) -> str:
    """``text`` without the ```vak fences that repeat a card the turn already presented.

    A fence whose payload was written as its own presentation (source fence, this step) stays the
    first time it appears; every other fence whose payload digest matches a presentation of the
    turn is a duplicate and goes. ``shown`` collects the digests already shown, across steps.
    """
    by_digest = {p.payload_digest: p for p in presentations.values()}
    pieces: list[str] = []
    last = 0
    for m, value in fence_payloads(text):
        digests = _fence_digests(value) & set(by_digest)
        if not digests:
            continue
        d = sorted(digests)[0]
        pres = by_digest[d]
        own = pres.source.type == "fence" and pres.source.message_entry_id == step_id
        if own and d not in shown:
            shown.add(d)
            continue
        pieces.append(text[last : m.start()])
        last = m.end()
    pieces.append(text[last:])
    return "".join(pieces)


# ------------------------------------------------------------------ the record


def render_turn(
    turn: Turn,
    evidence: Mapping[str, EvidenceInfo],
    *,
    first_step: int = 0,
    digest_until: int | None = None,
    lead: Sequence[MessageBlock] = (),
    with_tail: bool = True,
) -> list[Message]:
    """The full record of ``turn``: its tail and directive, then each step and its results, API-valid.

    For the current turn (``vak_context.context.planner.plan``'s in-turn compaction): steps before ``first_step`` are
    left out whole (their calls and results both), ``lead`` parts follow the directive in its message
    (the step packet that names them), and only steps before ``digest_until`` show evidence results as
    their digests; later ones show the result as the request carried it. Default: every step, digests.
    ``with_tail=False`` leaves the recorded tail out (the current turn's caller adds the tail it sends).
    """
    # The ledger's image blocks are the request's: they go in as they are. The recorded tail goes where
    # ``vak_context.context.request.assemble.project`` put it while the turn was current: first in the directive's message.
    tail: tuple[MessageBlock, ...] = (TextBlock(text=turn.tail),) if with_tail and turn.tail.strip() else ()
    directive_parts: tuple[MessageBlock, ...] = (*tail, TextBlock(text=turn.directive.text), *turn.directive.images)
    messages: list[Message] = [Message(role="user", content=(*directive_parts, *lead))]
    for k, (assistant, results) in enumerate(_step_messages(turn, evidence, digest_until, digest_until is None)):
        if k < first_step:
            continue  # left out whole
        if assistant is not None:  # a thinking-only step has nothing model-visible
            _append(messages, assistant)
            if results is not None:
                _append(messages, results)
        for text in (t for after, t in turn.nudges if after == k + 1):  # a runtime redo nudge, verbatim
            _append(messages, Message.user(text))
    return messages


def closed_record(turn: Turn, evidence: Mapping[str, EvidenceInfo]) -> tuple[Message, ...]:
    """``render_turn(turn, evidence)`` of a turn a request shows whole, rendered once per turn as it stands.

    A long session's request shows dozens of turns whole, the same ones step after step: rendering them
    again each step (a pydantic block per part) was the largest part of a step's CPU at 1,000 turns and
    grew with the turns the window holds. The record is kept by turn and reused while everything it is
    made of is the same object (``_record_parts``: the tail, the directive, each step, each result and the
    evidence info it is shown with), so a late result, a withdrawn step or a new digest renders again."""
    parts, counts = _record_parts(turn, evidence)
    hit = _RECORDS.get(id(turn))
    if (hit is not None and hit[0] is turn and hit[2] == counts and len(hit[1]) == len(parts)
            and all(a is b for a, b in zip(hit[1], parts, strict=True))):
        return hit[3]
    record = tuple(render_turn(turn, evidence))
    if len(_RECORDS) >= 4096:  # the turns of a few sessions' windows
        _RECORDS.clear()
    _RECORDS[id(turn)] = (turn, parts, counts, record)
    return record


def _record_parts(turn: Turn, evidence: Mapping[str, EvidenceInfo]) -> tuple[list[object], tuple[int, ...]]:
    """What a closed record is made of, as objects compared by identity (held, so an id is never reused
    while it is compared), and the counts of what is only ever added to."""
    parts: list[object] = [turn.tail, turn.directive]
    for step in turn.steps:
        parts.append(step)
        parts.append(step.payload)
        for ex in step.exchanges:
            parts.append(ex.result)
            eid = ex.evidence_id
            parts.append(evidence.get(eid) if eid else None)
    return parts, (len(turn.nudges), len(turn.presentation_payloads))


_RECORDS: dict[int, tuple[Turn, list[object], tuple[int, ...], tuple[Message, ...]]] = {}


def step_chars(turn: Turn, evidence: Mapping[str, EvidenceInfo]) -> list[tuple[int, int]]:
    """Characters of each step of ``turn`` as sent (``record_chars`` counting, as a request counts them):
    with results as the request carried them, and with evidence results as their digests."""
    verbatim = _step_messages(turn, {}, None)
    digested = _step_messages(turn, evidence, None, keep_short=False)
    out = []
    for (a, r), (_, d) in zip(verbatim, digested, strict=True):
        out.append((_chars(a) + _chars(r), _chars(a) + _chars(d)))
    return out


def _chars(msg: Message | None) -> int:
    if msg is None:
        return 0
    n = 0
    for p in msg.content:
        if isinstance(p, TextBlock):
            n += len(p.text)
        elif isinstance(p, ToolUseBlock):
            n += len(p.name) + len(json.dumps(p.input, ensure_ascii=False))  # as vak_context.context.capacity.profile.request_chars
        elif isinstance(p, ToolResultBlock):
            n += len(p.content)
    return n


def _step_messages(
    turn: Turn, evidence: Mapping[str, EvidenceInfo], digest_until: int | None, keep_short: bool = True
) -> list[tuple[Message | None, Message | None]]:
    """Each step's assistant message and its results message (None where there is nothing to send).
    ``keep_short``: results of at most ``VERBATIM_CHARS`` stay as sent (the closed record); a compaction
    of the current turn digests every evidence result, since it is there to make room."""
    acks = {
        p.source.tool_use_id: pid
        for pid, p in turn.presentation_payloads.items()
        if p.source.type == "tool_call" and p.source.tool_use_id
    }
    shown: set[str] = set()
    out: list[tuple[Message | None, Message | None]] = []
    for k, step in enumerate(turn.steps):
        parts = _assistant_parts(step, turn, shown)  # in step order: ``shown`` carries across steps
        if not parts:
            out.append((None, None))
            continue
        infos = evidence if digest_until is None or k < digest_until else {}
        results = tuple(_result_part(ex, infos, acks, keep_short) for ex in step.exchanges)
        out.append((Message(role="assistant", content=tuple(parts)),
                    Message(role="user", content=results) if results else None))
    return out


def _assistant_parts(step: Step, turn: Turn, shown: set[str]) -> list[MessageBlock]:
    parts: list[MessageBlock] = []
    for block in step.payload.blocks:
        if isinstance(block, TextBlock):
            text = strip_card_fences(block.text, step.id, turn.presentation_payloads, shown)
            if text.strip():  # providers refuse empty or whitespace-only text blocks
                parts.append(TextBlock(text=text))
        elif isinstance(block, ToolUseBlock):
            parts.append(block)  # the stored block is the request's block
    return parts


def _result_part(
    ex: Exchange, evidence: Mapping[str, EvidenceInfo], acks: Mapping[str, str], keep_short: bool
) -> ToolResultBlock:
    if ex.tool_use_id in acks:
        return ToolResultBlock(tool_use_id=ex.tool_use_id, content=card_ack(acks[ex.tool_use_id]))
    if ex.result is None:
        return ToolResultBlock(tool_use_id=ex.tool_use_id, content=NO_RESULT, is_error=True)
    info = evidence.get(ex.result.evidence_id) if ex.result.evidence_id else None
    short = keep_short and len(ex.result.content) <= VERBATIM_CHARS
    content = info.digest if info is not None and not short else ex.result.content
    if info is not None and not short and ex.tool_name == RECALL_NAME and not ex.result.is_error:
        # a recall's digest would be the digest the model recalled from: its lead shows the lines it asked for
        content = recall_lead(ex.input, ex.result.content, info.chars, DIGEST_CHARS) or content
    loads = tools_loaded_by(content) if ex.result.tool_name == FIND_TOOLS_NAME and not ex.result.is_error else ()
    return ToolResultBlock(tool_use_id=ex.tool_use_id, content=content, is_error=ex.result.is_error, loads=loads)


def _append(messages: list[Message], msg: Message) -> None:
    """Consecutive messages of one role merge: providers want user and assistant to alternate."""
    if messages and messages[-1].role == msg.role:
        prev = messages[-1]
        if msg.role == "user" and any(isinstance(p, ToolResultBlock) for p in msg.content):
            # tool results lead their user message (before any text), as Anthropic requires
            messages[-1] = Message(role="user", content=msg.content + prev.content)
        else:
            messages[-1] = Message(role=msg.role, content=prev.content + msg.content)
        return
    messages.append(msg)


# ------------------------------------------------------------------ checking and measuring


def api_problems(messages: Sequence[Message]) -> list[str]:
    """Every way ``messages`` would be refused by a strict provider; empty when it is API-valid.

    Roles alternate, starting with user; no message is empty; no text part is blank; tool_use ids
    are unique; every tool_use is answered by exactly one tool_result in the very next user message, in call order,
    placed before any other content there; and no tool_result answers a call that was not made.
    """
    problems: list[str] = []
    ids = [p.id for m in messages for p in m.content if isinstance(p, ToolUseBlock)]
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        problems.append(f"tool_use ids {repeated} occur more than once")
    if messages and messages[0].role != "user":
        problems.append("the first message is not from the user")
    for i, msg in enumerate(messages):
        if not msg.content:
            problems.append(f"message {i} is empty")
        if i and messages[i - 1].role == msg.role:
            problems.append(f"messages {i - 1} and {i} are both {msg.role}")
        for p in msg.content:
            if isinstance(p, TextBlock) and not p.text.strip():
                problems.append(f"message {i} has a blank text part")
        calls = [p.id for p in msg.content if isinstance(p, ToolUseBlock)]
        if msg.role == "assistant" and calls:
            nxt = messages[i + 1] if i + 1 < len(messages) else None
            answered = [p.tool_use_id for p in nxt.content if isinstance(p, ToolResultBlock)] if nxt else []
            if answered != calls:
                problems.append(f"message {i} calls {calls} but the next message answers {answered}")
            elif nxt is not None and any(
                not isinstance(p, ToolResultBlock) for p in nxt.content[: len(calls)]
            ):
                problems.append(f"message {i + 1} puts content before its tool results")
        if msg.role == "user":
            answered = [p.tool_use_id for p in msg.content if isinstance(p, ToolResultBlock)]
            prev_calls = (
                [p.id for p in messages[i - 1].content if isinstance(p, ToolUseBlock)]
                if i and messages[i - 1].role == "assistant"
                else []
            )
            if answered and answered != prev_calls:
                problems.append(f"message {i} answers {answered}, which message {i - 1} did not call")
    return problems


def record_text(messages: Sequence[Message]) -> str:
    """A plain-text view of a record: what recall({turn}) returns and what its size is measured on."""
    lines: list[str] = []
    for msg in messages:
        for p in msg.content:
            if isinstance(p, TextBlock):
                lines.append(f"{msg.role}: {p.text}")
            elif isinstance(p, ImageBlock):
                lines.append(f"{msg.role}: [image {p.ref}]")
            elif isinstance(p, ToolUseBlock):
                lines.append(
                    f"{msg.role}: tool_use {p.name} {json.dumps(p.input, ensure_ascii=False, sort_keys=True)}"
                    f" (id {p.id})"
                )
            elif isinstance(p, ToolResultBlock):
                flag = " (error)" if p.is_error else ""
                lines.append(f"{msg.role}: tool_result for {p.tool_use_id}{flag} → {p.content}")
    return "\n".join(lines)


def record_chars(messages: Sequence[Message]) -> int:
    """Characters a provider is sent for these messages: text, tool inputs and result contents."""
    n = 0
    for msg in messages:
        for p in msg.content:
            if isinstance(p, TextBlock):
                n += len(p.text)
            elif isinstance(p, ToolUseBlock):
                n += len(p.name) + len(json.dumps(p.input, ensure_ascii=False, separators=(",", ":")))
            elif isinstance(p, ToolResultBlock):
                n += len(p.content)
    return n
