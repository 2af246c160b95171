"""What a turn gives the embedder: its result, its card, its steps (re-exported by :mod:`vak_context.engine.api`;
here so that both drivers' modules build them without importing each other)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vak_context.agent.turn import StepReport


@dataclass(frozen=True)
class Step:
    """One model call of a turn: what the plan carried (turns at ``full``/``card``, ``packet`` when a
    summary stood in for older turns), the engine's own size of the request it sent (``estimated_tokens``:
    the provider's count where it has one, else the calibrated estimate) against the plan's budget, the
    prompt and cached tokens the provider billed, the calls made."""

    index: int
    fidelity: Mapping[str, int]
    replanned: bool
    prompt_tokens: int
    cached_tokens: int
    budget_tokens: int
    calls: tuple[str, ...]
    text: str
    prefix_digest: str = ""  # the digest of the request's stable prefix (what a prefix cache keys on)
    estimated_tokens: int = 0  # the engine's size of the request before sending it (0: not sized)


@dataclass(frozen=True)
class Card:
    """A closed turn's card: the deterministic record the engine writes for every turn (``text`` is what a
    model is shown of it, naming the turn and its evidence ids for ``recall``). ``reason``: why a ``failed``
    turn failed (the error's type and message, or why its request could not be sent); "" otherwise."""

    id: str
    turn: int  # the turn's ordinal in the session, from 1
    asked: str
    outcome: str  # completed, degraded, cancelled or failed
    text: str
    reason: str = ""


@dataclass(frozen=True)
class Stated:
    """One item of the session's stated state in force (docs/STATE.md): what the user stated that binds later
    turns. ``category``: rule, constraint, goal, fact or preference; ``key``: what it is about (a later item of
    the same key replaces it); ``turn``: the turn it was stated in (None: pinned outside a turn); ``via``: how
    it came in (``directive``: recognised in the user's words at turn close; ``model``: found there by the model pass;
    ``api``, ``serve``, ``tool``)."""

    id: str
    category: str
    text: str
    key: str
    turn: int | None
    via: str


@dataclass(frozen=True)
class TurnResult:
    """What one turn of :meth:`Session.run` gave: the answer, how the turn ended, its card, its steps."""

    answer: str
    outcome: str
    card: Card
    steps: tuple[Step, ...]


def step_of(report: StepReport) -> Step:
    return Step(index=report.index, fidelity=dict(report.fidelity), replanned=report.replanned,
                prompt_tokens=report.prompt_tokens, cached_tokens=report.cached_tokens,
                budget_tokens=report.budget_tokens, calls=tuple(report.calls), text=report.text,
                prefix_digest=report.prefix_digest, estimated_tokens=report.estimated_tokens)


def card_of(turn: Any) -> Card:
    from vak_context.context.history.turncard import render_card

    return Card(id=turn.card_id, turn=turn.ordinal, asked=turn.card.asked, outcome=turn.card.outcome,
                text=render_card(turn.card, turn.ordinal), reason=turn.failure)


def stated_of(item: Any) -> Stated:
    return Stated(id=item.id, category=item.category, text=item.text, key=item.key, turn=item.turn,
                  via=item.via or "directive")
