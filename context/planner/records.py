"""The plan records: what the planner decides, as frozen data with its JSON and digests; no deciding here.

The planner is ``plan()`` in ``vak_context.context.planner.plan`` (which re-exports these names).

A ``Plan`` carries one fidelity code per turn (``Rows``), the packet it asks for (``PacketPlan``),
the budget arithmetic (``Budget``) and the planner's next state (``PlannerState``). Its digest
covers everything a request is built from, so a request can be explained after the fact.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from enum import StrEnum
from functools import cached_property
from typing import Any, NamedTuple

import blake3

from vak_context.context.capacity.profile import ALPHA
from vak_context.context.capacity.tokens import PRIOR_TOKENS_PER_CHAR
from vak_context.context.history.packets import SUMMARY_LEVELS, Level
from vak_context.errors import InvalidInput


class Fidelity(StrEnum):
    """How a turn is carried. The value is what plan JSON and ``plan`` entries store; ``code`` is its
    one letter in ``Rows.codes`` (and so in the plan's digest): neither may change."""

    FULL = "full"
    CARD = "card"
    PACKET = "packet"
    BEHIND_RESET = "behind_reset"
    CURRENT = "current"

    @property
    def code(self) -> str:
        return _CODES[self]

    @classmethod
    def of_code(cls, code: str) -> Fidelity:
        return _BY_CODE[code]


_CODES = {Fidelity.FULL: "F", Fidelity.CARD: "c", Fidelity.PACKET: "p", Fidelity.BEHIND_RESET: "x",
          Fidelity.CURRENT: "*"}
_BY_CODE = {code: fidelity for fidelity, code in _CODES.items()}


@dataclass(frozen=True)
class PlannerState:
    """What the planner carries from one plan to the next for one (session, model).

    ``current_turn_reserve`` is an EWMA of the sizes closed turns had while they were current;
    ``observed_through`` is the last turn folded into it, so each turn is counted once.
    """

    current_turn_reserve: float = 0.0
    samples: int = 0
    observed_through: int = 0

    def observe(self, tokens: int, ordinal: int) -> PlannerState:
        value = float(tokens) if self.samples == 0 else ALPHA * tokens + (1 - ALPHA) * self.current_turn_reserve
        return PlannerState(value, self.samples + 1, ordinal)

    @classmethod
    def from_json(cls, raw: Mapping[str, Any] | None) -> PlannerState:
        if not raw:
            return cls()
        try:
            return cls(float(raw["current_turn_reserve"]), int(raw["samples"]), int(raw["observed_through"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidInput(f"not a planner state: {raw!r}; pass the 'state' of a previous plan") from exc


class PlannedTurn(NamedTuple):
    ordinal: int
    turn_id: str
    fidelity: Fidelity
    tokens: int  # what it costs in this request at its fidelity (0 in a packet or behind a reset)
    full_tokens: int
    card_tokens: int
    value: float = 0.0
    recency: float = 0.0
    relevance: float = 0.0
    anaphora: float = 0.0
    retrieved: bool = False  # Full although inside the packet range (shown before the packet)


@dataclass(frozen=True)
class PacketPlan:
    first_ordinal: int
    last_ordinal: int
    first_turn_id: str
    last_turn_id: str
    level: Level
    tokens: int  # what it costs in this request
    allowance: int  # what the plan reserved for it
    summary_tokens: int  # room for a new summary's text (level summary, nothing stored yet)
    stored_id: str | None = None  # the stored packet over exactly this range, rendered as is
    seed_id: str | None = None  # the longest stored packet over the same first turn, to grow from
    # A recorded mid-turn compaction: ``last_ordinal`` is the current turn, and the packet covers its
    # steps 1..through_step as well (the current turn shows the steps after them).
    through_step: int | None = None

    @property
    def needs_summary(self) -> bool:
        return self.level in SUMMARY_LEVELS and self.stored_id is None


@dataclass(frozen=True)
class CurrentTurnPlan:
    """How the current turn is carried (``docs/PLANNER.md``, "A current turn larger than its room").

    Its steps are cut into whole-step runs, oldest first: ``1..covered`` in a stored mid-turn packet
    (the plan's packet), ``covered+1..packet_through`` in a step packet naming every evidence id they
    got (``level`` list or ids), ``packet_through+1..digest_through`` with evidence results as their
    digests, and the rest as the request carried them. ``tokens`` is what it costs, within ``room``.
    """

    steps: int
    covered: int
    packet_through: int
    digest_through: int
    level: str  # "list" | "ids" | "" (no step packet)
    tokens: int
    room: int
    verbatim_tokens: int  # what the whole turn would cost as carried
    minimum_tokens: int  # its most compact form: every earlier step in the ids packet, the last digested

    @property
    def compacted(self) -> bool:
        return self.digest_through > self.covered


@dataclass(frozen=True)
class ResetPlan:
    """The reset-with-handoff this model's plan starts after: its handoff is rendered first."""

    entry_id: str
    turns: int  # turns 1..turns are behind it
    tokens: int


@dataclass(frozen=True)
class Budget:
    horizon: int  # what the prompt and the output reserve may total: request_budget + output_reserve
    prefix: int
    tail: int  # the tail as recorded, and the contract's room (``contract``)
    output_reserve: int
    current_turn_reserve: int
    budget: int  # horizon − prefix − tail − output_reserve − current_turn_reserve
    current: int  # the current turn so far (directive and any steps)
    packet: int = 0
    cards: int = 0
    full: int = 0
    contract: int = 0  # of ``tail``: the room of the stated items' <work_contract> (docs/STATE.md)

    @property
    def history(self) -> int:
        return self.packet + self.cards + self.full

    @property
    def left(self) -> int:
        return self.budget - self.history


@dataclass(frozen=True, eq=False)
class Rows:
    """The plan's turns as columns: one fidelity code per turn (``Fidelity.code``: ``F`` full, ``c``
    card, ``p`` packet, ``x`` behind a reset, ``*`` current), in ordinal order from turn 1.
    ``Plan.turns`` reads them. ``ids`` has one entry per code, ``full`` and ``card`` one per turn
    before the current; they are the plan's own tuples, never a caller's columns."""

    ids: Sequence[str]
    codes: str
    full: Sequence[int]
    card: Sequence[int]
    history_start: int  # position of the first planned turn (the ones before it are behind a reset)
    history_end: int  # one past the last history turn
    # position -> relevance (sparse); None where it was not recorded: rows read back from a plan entry whose
    # rows record leaves it out (``vak_context.context.planner.delta``, form 3; ``explain()`` recomputes it)
    relevance: Mapping[int, float] | None
    anaphora: int | None  # position of the referred-to turn
    retrieved: frozenset[int]
    current_tokens: int
    # The characters ``full`` and ``card`` were derived from at ``rate`` (``ceil(chars x rate)``, as the
    # plan's ``TurnTable`` derives them), when the table lent them: a plan entry records these, which a closed
    # turn never changes, rather than the tokens, which each newly measured rate moves for a share of every
    # turn (``vak_context.context.planner.delta``). None: the tokens are all there is. Not part of equality.
    full_chars: Sequence[int] | None = None
    card_chars: Sequence[int] | None = None
    rate: float | None = None

    def _key(self, relevance: bool = True) -> tuple[Any, ...]:
        m, end = len(self.codes), self.history_end
        return (tuple(self.ids[:m]), self.codes, tuple(self.full[:end]), tuple(self.card[:end]), self.history_start,
                end, dict(self.relevance) if relevance and self.relevance is not None else None, self.anaphora,
                self.retrieved, self.current_tokens)

    def __eq__(self, other: object) -> bool:
        """Equal in every column both hold: rows read back without their relevance (None, not recorded) equal
        the rows they were recorded from."""
        if not isinstance(other, Rows):
            return False
        both = self.relevance is not None and other.relevance is not None
        return self._key(both) == other._key(both)

    __hash__ = None  # type: ignore[assignment]  # equal by value, like the dict it carries


# The codes as the rows hold them (``Fidelity.code``).
FULL, CARD, PACKET, BEHIND, CURRENT = (f.code for f in Fidelity)
SHOWN = FULL + CARD  # the history the request carries
_SHOWN_CODES = re.compile(f"[{SHOWN}]")


def _indexable(seq: Sequence[Any]) -> Sequence[Any]:
    """A lent prefix's own list (``vak_context.context.planner.sizes.Prefix.items``, read only at the prefix's
    positions), else the sequence itself: a list indexes in C, a ``Prefix`` in Python."""
    items = getattr(seq, "items", None)
    return items if isinstance(items, list) else seq


@dataclass(frozen=True)
class Plan:
    model: str
    directive: str
    current_ordinal: int | None
    rows: Rows = field(repr=False)
    packet: PacketPlan | None
    budget: Budget
    state: PlannerState
    refers_back: bool
    rescue: bool = False
    rescue_reason: str = ""
    inputs_digest: str = ""
    digest: str = ""
    inputs: dict[str, Any] = field(default_factory=dict, compare=False)  # what inputs_digest covers
    current_turn: CurrentTurnPlan | None = None  # None: a new directive, no steps yet
    reset: ResetPlan | None = None

    @property
    def packet_range(self) -> tuple[int, int] | None:
        return (self.packet.first_ordinal, self.packet.last_ordinal) if self.packet else None

    @property
    def fidelities(self) -> str:
        """One code per turn (``Fidelity.code``), turn 1 first: F full, c card, p packet, x behind a reset,
        * current."""
        return self.rows.codes

    @cached_property
    def turns(self) -> tuple[PlannedTurn, ...]:
        """Every turn up to the current one, with its fidelity, cost and value, built on first use."""
        return tuple(self._turn(i) for i in range(len(self.rows.codes)))

    def _turn(self, i: int) -> PlannedTurn:
        r = self.rows
        code = r.codes[i]
        if code == CURRENT:
            return PlannedTurn(i + 1, r.ids[i], Fidelity.CURRENT, r.current_tokens, 0, 0)
        f, c = r.full[i], r.card[i]
        cost = f if code == FULL else c if code == CARD else 0
        if i < r.history_start or code == BEHIND:
            return PlannedTurn(i + 1, r.ids[i], Fidelity.BEHIND_RESET, 0, f, c)
        recency = 1.0 / (r.history_end - i)
        rel = r.relevance.get(i, 0.0) if r.relevance is not None else 0.0
        a = 1.0 if i == r.anaphora else 0.0
        return PlannedTurn(i + 1, r.ids[i], Fidelity.of_code(code), cost, f, c, max(recency, rel, a), recency, rel, a,
                           i in r.retrieved)

    def fidelity(self, ordinal: int) -> Fidelity:
        if not 1 <= ordinal <= len(self.rows.codes):
            raise InvalidInput(f"turn {ordinal} is not in this plan (it plans turns 1..{len(self.rows.codes)})")
        return Fidelity.of_code(self.rows.codes[ordinal - 1])

    def with_fidelity(self, fidelity: Fidelity) -> list[PlannedTurn]:
        code = fidelity.code
        return [self._turn(i) for i, c in enumerate(self.rows.codes) if c == code]

    def shown(self) -> list[PlannedTurn]:
        """The turns the request carries from history (Full or card), oldest first."""
        return list(self._shown)

    @cached_property
    def _shown(self) -> tuple[PlannedTurn, ...]:
        # Built once per plan (a plan a step reuses is projected again), ~200 shown turns at 1,000: ``_turn`` for
        # each, inlined. Shown turns are planned ones (F or c; the turns behind a reset are x), the positions
        # found by a scan in C, the columns read as lists (a lent ``Prefix`` indexes in Python).
        r = self.rows
        codes, end, an, retrieved = r.codes, r.history_end, r.anaphora, r.retrieved
        ids, full, card = _indexable(r.ids), _indexable(r.full), _indexable(r.card)
        scores: Mapping[int, float] = r.relevance if r.relevance is not None else {}
        rel = scores.get
        full_code, full_fid, card_fid, make = FULL, Fidelity.FULL, Fidelity.CARD, tuple.__new__
        out = []
        for m in _SHOWN_CODES.finditer(codes):
            i = m.start()
            f, c = full[i], card[i]
            recency, score = 1.0 / (end - i), rel(i, 0.0)
            value = score if score > recency else recency  # max(recency, relevance, anaphora): the same float
            a = 0.0
            if i == an:
                a, value = 1.0, value if value > 1.0 else 1.0
            # ``PlannedTurn(...)`` without its Python-level ``__new__``: the same tuple
            out.append(make(PlannedTurn, (i + 1, ids[i], full_fid, f, f, c, value, recency, score, a, i in retrieved))
                       if codes[i] == full_code else
                       make(PlannedTurn, (i + 1, ids[i], card_fid, c, f, c, value, recency, score, a, i in retrieved)))
        return tuple(out)

    def to_json(self, *, turns: bool = True) -> dict[str, Any]:
        out = {
            "model": self.model,
            "directive": self.directive,
            "current_ordinal": self.current_ordinal,
            "turns": [_turn_json(t) for t in self.turns] if turns else None,
            "packet": flat_record(self.packet) if self.packet else None,
            "packet_range": list(self.packet_range) if self.packet_range else None,
            "budget": _budget_json(self.budget),
            "state": flat_record(self.state),
            "refers_back": self.refers_back,
            "rescue": self.rescue,
            "rescue_reason": self.rescue_reason,
            "inputs_digest": self.inputs_digest,
            "current_turn": flat_record(self.current_turn) if self.current_turn else None,
            "reset": flat_record(self.reset) if self.reset else None,
        }
        return out


def _budget_json(b: Budget) -> dict[str, Any]:
    out = flat_record(b) | {"history": b.history, "left": b.left}
    if not b.contract:  # a plan with nothing stated says what it said before the contract had a room
        del out["contract"]
    return out


def _turn_json(t: PlannedTurn) -> dict[str, Any]:
    return {
        # The fidelity's value as a plain str: the same JSON, and a JSON encoder need not unwrap the enum.
        "ordinal": t.ordinal, "turn_id": t.turn_id, "fidelity": _VALUES[t.fidelity], "tokens": t.tokens,
        "full_tokens": t.full_tokens, "card_tokens": t.card_tokens, "value": t.value, "recency": t.recency,
        "relevance": t.relevance, "anaphora": t.anaphora, "retrieved": t.retrieved,
    }


def flat_record(obj: Any) -> dict[str, Any]:
    """``dataclasses.asdict`` for the plan's flat records (scalar fields only), without its deep copy."""
    names = _FIELD_NAMES.get(type(obj))
    if names is None:
        names = _FIELD_NAMES[type(obj)] = tuple(f.name for f in fields(obj))
    return {name: getattr(obj, name) for name in names}


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}
_VALUES: dict[Fidelity, str] = {f: str(f.value) for f in Fidelity}  # a record type's field names: ``fields()`` is slow per call


def plan_digest(p: Plan) -> str:
    """The plan's digest: every field of ``to_json`` but the turns, then the turns' columns (value,
    recency and relevance follow from the inputs, which ``inputs_digest`` covers)."""
    r = p.rows  # turn ids and sizes are inputs: to_json carries inputs_digest, which covers them
    h = blake3.blake3(_canonical(p.to_json(turns=False)).encode())
    h.update(f"{r.codes}|{r.history_start}|{sorted(r.retrieved)}|{r.current_tokens}".encode())
    return h.hexdigest()


def _canonical(value: Any) -> str:
    return _CANONICAL.encode(value)


# ``json.dumps`` with these options builds an encoder per call; one does (it keeps no state between calls).
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def canonical_digest(value: Any) -> str:
    """blake3 of sorted, compact JSON: the same value gives the same digest in any process."""
    return blake3.blake3(_canonical(value).encode()).hexdigest()


def plan_rate(p: Plan) -> float:
    """The tokens per char the plan was made at (its profile input), else the prior."""
    try:
        return float(p.inputs["profile"]["tokens_per_char"]["value"])
    except (KeyError, TypeError, ValueError):
        return PRIOR_TOKENS_PER_CHAR
