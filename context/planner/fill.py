"""The planner's fill (``vak_context.context.planner.plan`` steps 1 and 2): coverage, the packet, and Full by value. Pure.

1. Coverage: from the newest turn back, each turn is carried at its cheaper form (its card, or its
   full record when that is no larger) while it fits. When the oldest ones do not, they collapse
   into one packet over the oldest contiguous range, grown in batches of ``PACKET_BATCH_TURNS``
   from the first planned turn; the packet's room is reserved first (``vak_context.context.history.packets``).
2. Full: in descending value (ties: anaphora, then newer), each turn is raised to Full while the
   extra cost fits, skipping one that does not for a cheaper one further down. A turn inside the
   packet range is retrieved whole (before the packet) only when it is relevant or referred to.

The fill writes ``Fidelity.code`` letters into the ``HistoryColumns`` it is given (its own, built
for this plan); the caller's ``PlanCache`` keeps what is worth keeping between plans.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass, field
from operator import le

import numpy as np

from vak_context.context.capacity.tokens import estimate_tokens
from vak_context.context.history.packets import (
    PACKET_BATCH_TURNS,
    PACKET_SHARE,
    PacketRoom,
    packet_room,
    render_stored,
    seed_packet,
    stored_packet,
)
from vak_context.context.history.turns import Summary, TurnIndex
from vak_context.context.planner.history import CARD as CARD_TOTALS
from vak_context.context.planner.history import CHEAP, EVIDENCE_CHARS, EVIDENCE_ITEMS, HistoryColumns
from vak_context.context.planner.records import CARD, FULL, PACKET, PacketPlan
from vak_context.context.planner.relevance import ranked_columns, ranked_lists


@dataclass
class PlanCache:
    """What a caller keeps between the plans of one session (``SessionView`` holds one), so a plan
    need not redo it: the characters of each stored packet's rendering, by its id. A stored packet
    and the evidence it names never change, and rendering it walks every evidence line it lists.
    Plans with and without a cache are the same plans."""

    packet_chars: dict[tuple[str, bool], int] = field(default_factory=dict)

    def stored_chars(self, index: TurnIndex, stored: Summary, brief: bool = False) -> int:
        key = (stored.id, brief)
        chars = self.packet_chars.get(key)
        if chars is None:
            chars = self.packet_chars[key] = len(render_stored(index, stored, brief=brief))
        return chars


def fill(index: TurnIndex, w: HistoryColumns, budget: int, tpc: float, cache: PlanCache, full: bool = True
         ) -> tuple[PacketPlan | None, str]:
    """Place every turn of ``w`` within ``budget``: (the packet, if any; a rescue reason, or ""). ``full``
    False: coverage only (the packet, the kept turns at their cheaper forms), no promotion to Full."""
    n = len(w.turns)
    packet: PacketPlan | None = None
    keep_from = 0
    if w.total(CHEAP, 0, n) > budget:
        span = packet_span(w, budget, tpc)
        if isinstance(span, str):
            return None, span
        last_pos, room, reserved = span
        packet = _packet(index, w, last_pos, room, reserved, tpc, cache)
        keep_from = w.keep_from = last_pos + 1
    w.fid[keep_from:] = map(_KEPT_CODE.__getitem__, map(le, w.full[keep_from:n], w.card[keep_from:n]))
    left = budget - (packet.tokens if packet else 0) - w.total(CHEAP, keep_from, n)
    if left > 0 and full:
        promote(w, keep_from, left)
    return packet, ""


def packet_span(w: HistoryColumns, budget: int, tpc: float) -> tuple[int, PacketRoom, int] | str:
    """The packet's last position, its room and what is reserved for it; or why no packet can point
    at the turns it leaves out (a rescue). The room and the range depend on each other: both grow
    to a fixed point."""
    n = len(w.turns)
    share = math.floor(budget * PACKET_SHARE)
    reserved, last_pos = 0, -1
    while True:
        need = max(w.suffix_start(budget - reserved), 1, last_pos + 1)
        last_pos = batch_end(need, n) - 1
        stop = last_pos + 1
        room = packet_room(
            w.turns[0].ordinal, w.turns[last_pos].ordinal, share=share, budget=budget, tokens_per_char=tpc,
            card_tokens=w.total(CARD_TOTALS, 0, stop), item_chars=w.total(EVIDENCE_CHARS, 0, stop),
            items=w.total(EVIDENCE_ITEMS, 0, stop),
        )
        if room is None:
            return (f"no usable horizon: a budget of {budget} tokens cannot even point at the "
                    f"{n} earlier turn(s) it leaves out")
        if room.allowance <= reserved:
            return last_pos, room, reserved
        reserved = room.allowance


def batch_end(need: int, n: int) -> int:
    """One past the packet's last position: the ``need`` oldest turns that do not fit, rounded up to a whole
    batch (``PACKET_BATCH_TURNS``, from the first planned turn) so the boundary holds over several turns and a
    summary written for it at a turn's close is the one the next requests carry. But the rounding never takes
    every turn: where the batch would reach the session's end it stops short of the newest turns the budget
    keeps, at the newest 4, 2 or 1 (the most that fit beside the packet), a choice that moves only when the
    turns that fit cross one of those counts. Rounded up to ``n``, the batch swallowed all 63 turns of the kit's
    session with most of the history's budget unused. A batch cut short covers fewer turns and lists fewer
    evidence lines: what that frees of the packet's share goes to its summary (``packet_room``)."""
    rounded = math.ceil(need / PACKET_BATCH_TURNS) * PACKET_BATCH_TURNS
    if rounded < n:
        return rounded
    for keep in _KEEP_NEWEST:
        if need <= n - keep:
            return n - keep
    return n


_KEEP_NEWEST = (4, 2, 1)  # the newest turns a batch that would reach the session's end leaves out, most first


_KEPT_CODE = {True: FULL, False: CARD}  # a kept turn whose full record is no larger than its card is Full


def promote(w: HistoryColumns, keep_from: int, left: int) -> None:
    """Raise turns to Full in descending value (ties: the referred-to, then the newer) while the extra
    cost fits ``left``. Candidates: the kept cards, and packeted turns that are relevant or referred to.

    One greedy pass over the candidates in the order of ``(-value, i != anaphora, -i)``. The
    referred-to turn comes first (its value is 1.0, the most there is). The kept cards (as many as the
    budget holds) are sorted; the packeted relevant turns (up to a share of the session) are ranked as
    numpy columns and read from the head only while one of them could still fit (``Ranked``): each costs
    its whole record, so one that does not fit what is left never will."""
    n, an, fid, full, card = len(w.turns), w.anaphora, w.fid, w.full, w.card
    if an is not None and fid[an] in (CARD, PACKET):
        extra = full[an] - (card[an] if fid[an] == CARD else 0)
        if extra <= left:
            _raise(w, an)
            left -= extra
    # Keys are (-value, -i), value = max(recency, relevance). The packeted relevant turns are the
    # scored positions before ``keep_from``, ranked; the kept cards' scores are the ones after.
    scored, scores = w.scored, w.scores
    if isinstance(scored, np.ndarray) and isinstance(scores, np.ndarray):
        cut = int(np.searchsorted(scored, keep_from))
        rel = dict(zip(scored[cut:].tolist(), scores[cut:].tolist(), strict=True))
        column = w.full_array if w.full_array is not None else full  # gathered in C from the table's own
        ranked = ranked_columns(column, scored[:cut], scores[:cut], n, an, left)
    else:  # few scores, as Python lists: numpy's per-call overhead would outweigh them
        cut = bisect_left(scored, keep_from)
        rel = dict(zip(scored[cut:], scores[cut:], strict=True))
        ranked = ranked_lists(full, list(scored[:cut]), list(scores[:cut]), n, an, left)
    # The kept cards as flat keys ``(-value, -i, extra)`` (the extra a raise costs beside them; flat tuples
    # compare several times faster than nested ones, and the positions are distinct, so the extra is never
    # compared), newest first: their recency keys ascend so, and the sort merges the runs.
    kept = [(-max(1.0 / (n - i), rel[i]) if i in rel else -1.0 / (n - i), -i, full[i] - card[i])
            for i in range(n - 1, keep_from - 1, -1) if fid[i] == CARD and i != an]
    kept.sort()
    k, m = 0, len(kept)
    head = ranked.head(left)  # the best packeted turn that could still fit (its record is the extra cost)
    while left > 0:
        if head is not None and (k == m or head < kept[k]):  # (-value, -i) against (-value, -i, extra)
            i = -head[1]
            ranked.pop()
            extra = full[i]  # packeted: its whole record (``head`` gave one that fits)
        elif k < m:
            _, i, extra = kept[k]
            i = -i
            k += 1
            if extra > left:
                continue  # ``left`` is as it was: so is the head
        else:
            break  # no kept card is left and no packeted turn can fit any more
        _raise(w, i)
        left -= extra
        head = ranked.head(left) if head is not None else None  # once none fits, none will (left only falls)


def _raise(w: HistoryColumns, i: int) -> None:
    if w.fid[i] == PACKET:
        w.retrieved.add(i)  # shown whole before the packet
    w.fid[i] = FULL


def _packet(index: TurnIndex, w: HistoryColumns, last_pos: int, room: PacketRoom, reserved: int, tpc: float,
            cache: PlanCache) -> PacketPlan:
    first, last = w.turns[0], w.turns[last_pos]
    span = (first.ordinal, last.ordinal, first.id, last.id)
    if room.level == "pointer":
        return PacketPlan(*span, "pointer", room.pointer_tokens, reserved, 0)
    if room.level == "list":
        return PacketPlan(*span, "list", room.list_tokens, reserved, 0)
    stored = stored_packet(index, first.id, last.id)
    if stored is not None:
        # The stored summary as it is, with its evidence lines where they fit, else counted (brief; a packet
        # written brief is always brief, so its bytes never change): the range's one summary, reused byte
        # for byte; too large even brief, the evidence list (or the pointer) stands in.
        for brief in (True,) if stored.brief else (False, True):
            cost = estimate_tokens(cache.stored_chars(index, stored, brief), tpc)  # tokens_of its rendering
            if cost <= reserved:
                return PacketPlan(*span, "brief" if brief else "summary", cost, reserved, 0, stored.id)
        if room.list_tokens <= reserved:
            return PacketPlan(*span, "list", room.list_tokens, reserved, 0)
        return PacketPlan(*span, "pointer", room.pointer_tokens, reserved, 0)
    seed = seed_packet(index, first.id, last.ordinal)
    return PacketPlan(*span, room.level, reserved, reserved, room.summary_tokens, None, seed.id if seed else None)


def history_codes(w: HistoryColumns, rescue: bool) -> str:
    """``w.fid`` as text. The packet's turns are ``p`` but for the few retrieved ones, so that part is
    built from runs of ``p`` instead of joining a code per packeted turn."""
    if rescue or not w.keep_from:
        return "".join(w.fid)
    runs, at = [], 0
    for i in sorted(w.retrieved):
        runs += [PACKET * (i - at), FULL]
        at = i + 1
    return "".join([*runs, PACKET * (w.keep_from - at), *w.fid[w.keep_from :]])
