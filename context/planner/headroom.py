"""The room a session's recent turns took beside their plans' history: the current turn's headroom. Pure.

A turn's history is planned once, at its first step, with a reserve for the current turn
(``vak_context.context.planner.currentturn.current_reserve``: an EWMA of the sizes past turns had while
current). The EWMA is a mean: a turn that grows past it, or whose request the plan's per-turn estimates
undercount by a little, outgrows its frozen plan and the step plans again (``policy.decide``, "outgrew":
a second plan and a second projection on the step's path, and a new history prefix for the cache).

``Headroom`` measures what each turn actually took: for every request sent under a plan, its tokens less
the plan's estimate of everything but the current turn (prefix, tail, handoff, packet, cards, Full turns),
as the budget check counts them. So the figure holds the current turn and whatever the plan's estimate
missed (a frozen plan's projection that outgrew it is not sent, and not counted: the plan made then is,
so a projection that went wrong once does not hold the history down for the turns after). The largest of the last ``RECENT_TURNS`` turns' figures is the headroom the next plan reserves at
least (``vak_context.context.planner.room.room_of``, held to the same share of the budget as the EWMA).
It is a plan input, recorded in the plan entry (``inputs["headroom"]``), so ``explain`` plans the same; the
AssemblerActor keeps one per (session, model) in memory (a restarted one plans without it until its next
turns are measured, as before this existed).
"""

from __future__ import annotations

import math
from collections import deque

from vak_context.context.planner.records import Plan

RECENT_TURNS = 4  # the turns whose largest figure is the headroom
MARGIN = 1.25  # over that largest figure: the turns' figures vary a little (the plan's per-turn estimates)


def beside_history(p: Plan) -> int:
    """The plan's estimate of its request without the current turn: prefix, tail (with the stated items'
    contract), the reset's handoff, the packet, the cards and the Full turns."""
    b = p.budget
    return b.prefix + b.tail + (p.reset.tokens if p.reset is not None else 0) + b.packet + b.cards + b.full


class Headroom:
    """Per key (a session and model), the largest figure of each of its last ``RECENT_TURNS`` turns."""

    def __init__(self) -> None:
        self._turns: dict[tuple[str, str], deque[tuple[str, int]]] = {}

    def saw(self, key: tuple[str, str], turn_id: str, p: Plan, tokens: int) -> None:
        """A request of turn ``turn_id`` planned as ``p`` was sent, sized at ``tokens``."""
        taken = max(0, tokens - beside_history(p))
        recent = self._turns.setdefault(key, deque(maxlen=RECENT_TURNS))
        if recent and recent[-1][0] == turn_id:
            if taken > recent[-1][1]:
                recent[-1] = (turn_id, taken)
        else:
            recent.append((turn_id, taken))

    def of(self, key: tuple[str, str]) -> int | None:
        """The headroom for the key's next plan (None before any of its requests was sized)."""
        recent = self._turns.get(key)
        return math.ceil(MARGIN * max(t for _, t in recent)) if recent else None
