"""The summariser side call that writes a compaction packet (spec §4, §10 "Side calls").

A side call follows its own rule: the cheapest capable model, a purpose-built packet, never the
turn's history. The summariser gets the previous packet (the longest stored one over the same
first turn, when the packet is growing) and the newly covered turns only: each as its full record
with every tool result as its digest (never cut), or as its card when the record does not fit the
summariser's own window. Turns are sent in as few calls as fit; each call's answer becomes the
previous packet of the next.

``write_packet`` appends what it did: an ``activity`` (``packet.summarise``: model, usage, latency of
each call, the range and the seed; never model-visible) and the ``compaction`` entry keyed by the
plan's range, recording the model whose plan asked for it. It is called once per range, when the
packet over it is formed: every later request carrying that range renders the stored entry.

Where the summariser raises (a provider error, a timeout) or answers junk (nothing, or no words), or
is turned off (``Summariser.enabled``: ``summaries="off"``), the packet stores the deterministic
extract instead (``vak_context.context.history.packets.extract_summary``: each turn's directive,
outcome and evidence ids within the summary's room), ``source="extract"``, and the activity says
why (``failed``), so the operator sees it. A summariser call is never retried for a range that has
its packet: one call (or one run of calls, for turns that need several) per range.
"""

from __future__ import annotations

import asyncio
import math
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from vak_context.context.capacity.tokens import PRIOR_TOKENS_PER_CHAR, estimate_tokens
from vak_context.context.history.packets import (
    SUMMARISER_SYSTEM,
    SUMMARY_HEADROOM,
    compaction_payload,
    extract_summary,
    seed_packet,
    summariser_prompt,
)
from vak_context.context.history.render import record_text, render_turn
from vak_context.context.planner.plan import PacketPlan, Plan
from vak_context.context.planner.sizes import card_text
from vak_context.context.planner.view import SessionView
from vak_context.context.request.messages import ChatRequest, ChatResult, Message
from vak_context.context.stated.render import said_block, said_in, without_said
from vak_context.errors import InvalidInput
from vak_context.events.payloads import Activity
from vak_context.providers.base import Complete
from vak_context.storage.contract import Ledger

WORDS_PER_TOKEN = 0.7  # what "at most N words" asks for, from a token allowance (English text)


@dataclass
class Summariser:
    """A model used for packet summaries, through any provider adapter (``complete(ChatRequest)``).

    ``window_tokens`` is the summariser model's own usable window; ``tokens_per_char`` its measured
    ratio (the prompt is packed against them). ``calls`` counts completions, for receipts and tests.
    ``enabled`` False (``summaries="off"``): no call is made; every packet carries the deterministic
    extract. ``timeout_s``: how long one summary call may take before the extract stands in (None: the
    provider's own timeout). ``stated_pass`` (``stated_pass="model"``): at a turn's close it also reads the
    turn's directive for stated items (``vak_context.agent.stated_pass``), whether or not it is ``enabled``.
    """

    provider: Complete
    model: str
    window_tokens: int
    tokens_per_char: float = PRIOR_TOKENS_PER_CHAR
    temperature: float | None = 0.0
    max_summary_tokens: int | None = None  # the operator's cap on one summary (a slow local model)
    enabled: bool = True
    timeout_s: float | None = None
    stated_pass: bool = False
    calls: int = 0
    results: list[ChatResult] = field(default_factory=list)

    def tokens(self, text: str) -> int:
        return estimate_tokens(len(text), self.tokens_per_char)

    async def summarise(self, prompt: str, max_tokens: int, system: str = SUMMARISER_SYSTEM) -> ChatResult:
        """One side call (``system``: the packet summary's, or another side call's, the model pass's)."""
        request = ChatRequest(
            model=self.model,
            system=system,
            messages=(Message.user(prompt),),
            max_tokens=max_tokens,
            temperature=self.temperature,
        )
        self.calls += 1  # counted as made, whether it answers, raises or times out
        if self.timeout_s is None:
            result = await self.provider.complete(request)
        else:
            result = await asyncio.wait_for(self.provider.complete(request), self.timeout_s)
        self.results.append(result)
        return result


async def write_packet(
    ledger: Ledger, session: str, view: SessionView, plan: Plan, summariser: Summariser
) -> list[str]:
    """Write the summary the plan's packet needs; returns the new entry ids (activity, compaction).

    The summariser's text, or the deterministic extract where it failed or is turned off (the activity's
    ``failed`` says why; ``source`` on the compaction entry says which was stored)."""
    pk = _packet_to_write(view, plan)
    seed = seed_packet(view.index, pk.first_turn_id, pk.last_ordinal)
    start = seed.last_ordinal + 1 if seed is not None and seed.last_ordinal is not None else pk.first_ordinal
    calls: list[dict[str, Any]] = []
    failed: str | None = None
    text: str | None = None
    # The stated items these turns said, verbatim beside the model's summary, within half its room (issue 34).
    said = said_block(said_in(view.index.stated.current(), pk.first_ordinal, pk.last_ordinal),
                      _extract_chars(pk, plan) // 2)
    if not summariser.enabled:
        failed = "off"
    else:
        budget = _budget(pk, summariser, estimate_tokens(len(said) + 2, _rate(plan)) if said else 0)
        records = _records(view, range(start, pk.last_ordinal + 1), budget, summariser)
        try:
            text = await _summarise(pk, records, without_said(seed.summary) if seed is not None else None, budget,
                                    summariser, calls)
            text = f"{said}\n\n{text}" if said and text else text
        except SummaryFailed as e:
            failed = str(e)
        except TimeoutError:
            failed = f"timed out after {summariser.timeout_s} s"
        except Exception as e:  # a provider's error of any kind: the packet carries the extract, the turn goes on
            failed = f"{type(e).__name__}: {e}"[:300]
    source: Literal["summariser", "extract"] = "summariser"
    seeded_from = seed.id if seed is not None else None
    if text is None:
        source, seeded_from = "extract", None
        text = extract_summary(view.index, pk.first_ordinal, pk.last_ordinal, _extract_chars(pk, plan))
    detail: dict[str, Any] = {
        "model": summariser.model,
        "for_model": plan.model,
        "range": [pk.first_ordinal, pk.last_ordinal],
        "seeded_from": seeded_from,
        "new_turns": [start, pk.last_ordinal],
        "calls": calls,
        "source": source,
    }
    if failed is not None:
        detail["failed"] = failed
    activity = Activity(activity="packet.summarise", detail=detail)
    packet = compaction_payload(
        view.index, pk.first_ordinal, pk.last_ordinal, text, model=plan.model, seeded_from=seeded_from, source=source,
        brief=pk.level == "brief", listed=False,  # named by its range: the entry does not grow with the session
    )
    ids = ledger.append(session, [activity, packet])
    view.add(ledger.get(ids[0]))
    view.add(ledger.get(ids[1]), packet)  # folded from the model it was written from, not decoded again
    return ids


class SummaryFailed(Exception):
    """The summariser answered, but with nothing a packet can carry (internal: the extract stands in)."""


def _extract_chars(pk: PacketPlan, plan: Plan) -> int:
    """The extract's room in characters: the packet's summary room at the bound model's ratio, with the
    headroom a model's summary is asked for (``SUMMARY_HEADROOM``), so that a later request whose room is
    a little smaller still carries it (a stored packet never shrinks to fit)."""
    return max(80, math.floor(pk.summary_tokens * SUMMARY_HEADROOM / max(_rate(plan), 1e-6)))


def _rate(plan: Plan) -> float:
    """The bound model's tokens per character, as the plan was made with."""
    try:
        return float(plan.inputs["profile"]["tokens_per_char"]["value"])
    except (KeyError, TypeError, ValueError):
        return PRIOR_TOKENS_PER_CHAR


def _packet_to_write(view: SessionView, plan: Plan) -> PacketPlan:
    """The plan's packet, once it is known to need a summary and to name this view's turns."""
    pk = plan.packet
    if pk is None or not pk.needs_summary:
        raise InvalidInput("this plan needs no new packet summary (its packet is stored, a list or a pointer)")
    index = view.index
    if index.turn(pk.first_ordinal).id != pk.first_turn_id or index.turn(pk.last_ordinal).id != pk.last_turn_id:
        raise InvalidInput("the plan was made against another chain; plan again on this session's view")
    return pk


@dataclass(frozen=True)
class _Budget:
    max_tokens: int  # one summary's output
    words: int  # what the prompt asks the summary to stay under
    room: int  # prompt tokens left for the previous packet and the turns of one call


def _budget(pk: PacketPlan, summariser: Summariser, said_tokens: int = 0) -> _Budget:
    """``said_tokens``: what the stated items' block beside the summary takes of its room."""
    max_tokens = max(16, math.floor(pk.summary_tokens * SUMMARY_HEADROOM) - said_tokens)
    if summariser.max_summary_tokens is not None:
        max_tokens = min(max_tokens, summariser.max_summary_tokens)
    words = max(12, int(max_tokens * WORDS_PER_TOKEN))
    room = summariser.window_tokens - max_tokens - summariser.tokens(SUMMARISER_SYSTEM) - 64
    return _Budget(max_tokens, words, room)


def _records(view: SessionView, ordinals: range, budget: _Budget, summariser: Summariser) -> list[tuple[int, str]]:
    """Each newly covered turn as its full record, or as its card when the record takes over half the room."""
    records: list[tuple[int, str]] = []
    for ordinal in ordinals:
        turn = view.index.turn(ordinal)
        full = record_text(render_turn(turn, view.turn_infos(turn)))
        fits = summariser.tokens(full) <= budget.room // 2
        records.append((ordinal, full if fits else card_text(view.index, turn)))
    return records


async def _summarise(pk: PacketPlan, records: list[tuple[int, str]], running: str | None, budget: _Budget,
                     summariser: Summariser, calls: list[dict[str, Any]]) -> str:
    """The summary over ``records`` in as few calls as fit, each growing the previous one; each call's
    figures go into ``calls`` (for the activity entry). Raises ``SummaryFailed`` on a junk answer."""
    while records:
        chunk: list[tuple[int, str]] = []
        used = summariser.tokens(running or "")
        while records and (not chunk or used + summariser.tokens(records[0][1]) <= budget.room):
            used += summariser.tokens(records[0][1])
            chunk.append(records.pop(0))
        last = chunk[-1][0] if records else pk.last_ordinal
        prompt = summariser_prompt(running, chunk, pk.first_ordinal, last, budget.words)
        result = await summariser.summarise(prompt, budget.max_tokens)
        calls.append(_call_detail(chunk, prompt, budget.max_tokens, result))
        text = result.text.strip()
        if not _WORD.search(text):  # nothing, or no word in it: not a summary a model can read
            raise SummaryFailed(f"the summariser answered {'nothing' if not text else 'no words'} "
                                f"for turns {chunk[0][0]}–{chunk[-1][0]}")
        running = text
    assert running is not None
    return running


_WORD = re.compile(r"[^\W\d_]{2,}")  # two letters in a row, in any script


def _call_detail(chunk: list[tuple[int, str]], prompt: str, max_tokens: int, result: ChatResult) -> dict[str, Any]:
    return {
        "turns": [chunk[0][0], chunk[-1][0]],
        "prompt_chars": len(prompt),
        "max_tokens": max_tokens,
        "usage": result.usage.model_dump(mode="json"),
        "latency_ms": round(result.latency_ms, 1),
        "stop_reason": result.stop_reason,
        "empty": not result.text.strip(),
    }
