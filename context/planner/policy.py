"""The step policy: when a turn's request is planned, kept or planned again, what a plan needs written
before it is sent (``needs``: a packet's summary, this model's reset), and what an over-length rejection
implies (spec §4 "over-length", §10 "within a turn"). Pure: no I/O, no clock.

Shaped like Ray Serve's autoscaling policy: one function, ``decide(inputs, state) -> (decision,
new_state)``, whose state is passed in and handed back, never kept here. The caller (the
AssemblerActor for a step's request, the turn loop for a rejected send) does what the decision says
(project, plan, send, record) and reports back what it saw as the next input:

* ``Asked`` (a step's request is wanted): the plan frozen for this turn is projected (``Project``);
  at a turn's first step, or with no frozen plan, the turn is planned (``Replan``, "first step").
* ``Projected`` (the frozen plan's request, sized): it is sent as is while it fits the budget
  (``Send``); a turn that outgrew it is planned again at this step boundary ("outgrew").
* ``Planned`` (a new plan's request, sized): sent and frozen (``Send``, recorded), unless the
  server's own count says the plan's chars × tokens-per-char undercounted: then it is planned once
  more at the rate just measured ("undercount").
* ``Rejected`` (the provider refused the request as over-length): the profile that rejection implies
  (``after_overflow``), and one retry (``Retry``) before the step gives up (``GiveUp``).

So within a turn every request is the previous one plus what the turn appended (the prefix cache's
best case) until the turn outgrows its budget. The budget is ``request_budget`` (context/capacity),
the planner's own. A request is planned at most twice (at the first step or when it outgrew its plan,
then once more on an undercount).

The state that outlives a request is the frozen plan, and it is what the turn's last ``plan`` entry
records: ``state_of_entry`` rebuilds it from that entry (``plan_of_entry`` decodes the plan and checks
its digest), so an assembler restarted mid-turn projects the same plan and sends the same bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Literal

from vak_context.context.capacity.profile import CapacityProfile, Ewma, request_budget
from vak_context.context.capacity.tokens import estimate_tokens
from vak_context.context.planner.delta import rows_of_record, rows_record
from vak_context.context.planner.records import (
    Budget,
    CurrentTurnPlan,
    Fidelity,
    PacketPlan,
    Plan,
    PlannerState,
    ResetPlan,
    Rows,
    plan_digest,
)
from vak_context.context.planner.view import handoff_text
from vak_context.errors import ContextOverflow, InvalidInput
from vak_context.events.payloads import PlanRecord, ResetWithHandoff

RETRIES = 1  # sends of a step after an over-length rejection (spec §4: "the turn retries once")

Reason = Literal["first step", "outgrew", "undercount"]

# ------------------------------------------------------------------ state


@dataclass(frozen=True)
class FrozenPlan:
    """The plan a turn keeps from its first step on, until it outgrows it."""

    turn_id: str
    plan: Plan


@dataclass(frozen=True)
class StepState:
    """What the policy carries between its calls for one (session, model). ``frozen`` outlives a
    request (a ``plan`` entry records it); ``undercounted`` and ``rejections`` count within one."""

    frozen: FrozenPlan | None = None
    undercounted: bool = False  # this request was planned again at a measured rate already
    rejections: int = 0  # over-length rejections of this step's request


# ------------------------------------------------------------------ inputs


@dataclass(frozen=True)
class Asked:
    """The next step's request of the open turn ``turn_id`` is wanted, for ``profile``."""

    turn_id: str
    profile: CapacityProfile


@dataclass(frozen=True)
class Projected:
    """The frozen plan's request, sized: ``tokens`` counted by the server when ``counted``, else
    estimated; ``chars`` as ``request_chars`` counts them."""

    profile: CapacityProfile
    tokens: int
    chars: int
    counted: bool


@dataclass(frozen=True)
class Planned:
    """A new plan's request, sized as in ``Projected``."""

    plan: Plan
    profile: CapacityProfile
    tokens: int
    chars: int
    counted: bool


@dataclass(frozen=True)
class Rejected:
    """The provider refused the request (``chars_sent`` characters) as over-length, at ``now``."""

    profile: CapacityProfile
    error: ContextOverflow
    chars_sent: int
    now: float


Inputs = Asked | Projected | Planned | Rejected

# ------------------------------------------------------------------ decisions


@dataclass(frozen=True)
class Project:
    """Project the frozen plan over the session as it is now, size it, report ``Projected``."""

    plan: Plan


@dataclass(frozen=True)
class Replan:
    """Plan the turn against ``profile`` (writing any packet or reset it needs), size it, report ``Planned``."""

    profile: CapacityProfile
    reason: Reason


@dataclass(frozen=True)
class Send:
    """The request stands. ``record``: the plan is new, append its ``plan`` entry."""

    plan: Plan
    record: bool
    tokens: int
    budget: int


@dataclass(frozen=True)
class Retry:
    """Send the step once more, planned against the corrected ``profile`` (record it first)."""

    profile: CapacityProfile


@dataclass(frozen=True)
class GiveUp:
    """The step has no result: rejected again. ``profile`` (record it) is what the next turn plans on."""

    profile: CapacityProfile


Decision = Project | Replan | Send | Retry | GiveUp


# ------------------------------------------------------------------ the policy


def decide(inputs: Inputs, state: StepState) -> tuple[Decision, StepState]:
    """The step policy: what to do next, and the state to pass to the next call."""
    if isinstance(inputs, Asked):
        state = replace(state, undercounted=False, rejections=0)
        frozen = state.frozen
        if frozen is not None and frozen.turn_id == inputs.turn_id:
            return Project(frozen.plan), state
        return Replan(inputs.profile, "first step"), state
    if isinstance(inputs, Projected):
        if state.frozen is None:
            raise InvalidInput("Projected reports a frozen plan's size, and there is none: start with Asked")
        budget = request_budget(inputs.profile)
        if inputs.tokens > budget:  # the turn outgrew its plan: plan again at this step boundary
            return Replan(inputs.profile, "outgrew"), state
        return Send(state.frozen.plan, False, inputs.tokens, budget), state
    if isinstance(inputs, Planned):
        budget = request_budget(inputs.profile)
        if inputs.counted and inputs.tokens > budget and not state.undercounted:
            # The plan's chars × tokens_per_char undercounted: plan again at the rate just measured.
            return Replan(undercount_profile(inputs.profile, inputs.tokens, inputs.chars), "undercount"), \
                replace(state, undercounted=True)
        frozen = FrozenPlan(turn_of(inputs.plan), inputs.plan)
        return Send(inputs.plan, True, inputs.tokens, budget), replace(state, frozen=frozen)
    if isinstance(inputs, Rejected):
        profile = after_overflow(inputs.profile, inputs.error, request_chars_sent=inputs.chars_sent, now=inputs.now)
        state = replace(state, rejections=state.rejections + 1)
        return (Retry(profile) if state.rejections <= RETRIES else GiveUp(profile)), state
    raise InvalidInput(f"the step policy takes Asked, Projected, Planned or Rejected, not {type(inputs).__name__}")


def turn_of(p: Plan) -> str:
    """The id of the turn a plan was made for (its current turn)."""
    if p.current_ordinal is None:
        raise InvalidInput("a plan for a new directive (current_ordinal None) is not a step's plan; "
                           "append the directive and plan with current=its ordinal")
    return p.rows.ids[p.current_ordinal - 1]


def undercount_profile(profile: CapacityProfile, tokens: int, chars: int) -> CapacityProfile:
    """The profile with the tokens per char a server's count just measured (not an EWMA sample: the
    plan made with it must hold this request's rate)."""
    rate = replace(profile.tokens_per_char, value=tokens / max(1, chars))
    return replace(profile, tokens_per_char=rate)


def after_overflow(
    profile: CapacityProfile, exc: ContextOverflow, *, request_chars_sent: int, now: float
) -> CapacityProfile:
    """The profile a rejection implies: ``verified_window`` is the rejected size (or the provider's
    stated limit, when smaller), and the rejected prompt's real token count, when the provider said
    it, is a tokens-per-char measurement like any other."""
    tpc = profile.tokens_per_char
    estimated = estimate_tokens(request_chars_sent, tpc.value)
    rejected = exc.prompt_tokens if exc.prompt_tokens else estimated
    if exc.prompt_tokens and request_chars_sent > 0:
        tpc = tpc.update(exc.prompt_tokens / request_chars_sent)
    window = rejected if not exc.limit_tokens else min(rejected, exc.limit_tokens)
    if profile.verified_window is not None:
        window = min(window, profile.verified_window)
    # In the plan's own units the window must shrink below what was sent, or the same plan comes back.
    window = min(window, max(0, estimate_tokens(request_chars_sent, tpc.value) - 1))
    signal = f"verified_window: {window} tokens after the provider rejected a {rejected}-token request"
    provenance = replace(
        profile.provenance,
        updated_at=now,
        signals=(*profile.provenance.signals, signal)[-32:],
    )
    return replace(profile, verified_window=window, tokens_per_char=Ewma(tpc.value, tpc.samples), provenance=provenance)


# ------------------------------------------------------------------ what a plan needs written first

SETTLE_ROUNDS = 3  # plans per request: a summary written can change the packet's cost once; a reset empties history

Need = Literal["reset", "summary"]


def needs(p: Plan) -> Need | None:
    """What must be written before ``p`` can be sent, after which the request is planned again: this model's
    reset-with-handoff (a rescue over history it does not yet start after), the packet's summary (a range
    with no stored packet), or nothing (``p`` is settled). The PlannerActor writes it
    (``vak_context.actors.planner.settle_plan``)."""
    if p.rescue and p.rows.history_start < p.rows.history_end:
        return "reset"
    if p.packet is not None and p.packet.needs_summary:
        return "summary"
    return None


def needs_summary_ahead(p: Plan) -> bool:
    """Whether a plan made ahead of a turn (at the close of the one before) needs its packet's summary
    written: never a rescue's reset, which is the request's own to write."""
    return not p.rescue and p.packet is not None and p.packet.needs_summary


def reset_entry(p: Plan) -> ResetWithHandoff:
    """The rescue's ``reset_with_handoff`` entry, after which the turns before it are never planned (for this
    model: other models' projections stay as they were)."""
    if not p.rescue:
        raise InvalidInput("only a rescue plan (plan.rescue) writes a reset-with-handoff")
    history = [t for t in p.turns if t.fidelity == Fidelity.BEHIND_RESET]
    return ResetWithHandoff(handoff=handoff_text(p), last_turn_id=history[-1].turn_id if history else None,
                            reason=p.rescue_reason, model=p.model)


# ------------------------------------------------------------------ the state in the ledger


def plan_entry(p: Plan, head: str | None, base: tuple[str, Rows] | None = None) -> PlanRecord:
    """The ``plan`` entry: the plan, its inputs and both digests (so the request can be explained
    later), and its rows, as what changed since ``base`` (the id and rows of the same model's plan entry
    before it) or whole, so that it decodes back (``plan_of_entry``) and does not grow with the session
    (``vak_context.context.planner.delta``)."""
    return PlanRecord(model=p.model, head=head, inputs=p.inputs, inputs_digest=p.inputs_digest,
                      plan=p.to_json(turns=False), digest=p.digest, history_start=p.rows.history_start,
                      base=base[0] if base is not None else None,
                      rows=rows_record(p.rows, base[1] if base is not None else None))


def state_of_entry(record: PlanRecord, rows: Rows | None = None) -> StepState:
    """The state a ``plan`` entry leaves: its plan frozen for its turn. An entry that does not decode
    to its digest (written before entries held ``history_start``, for a rescue) leaves none, and the
    next step plans afresh. ``rows``: as ``plan_of_entry``."""
    p = plan_of_entry(record, rows)
    if p is None or p.current_ordinal is None:
        return StepState()
    return StepState(FrozenPlan(turn_of(p), p))


def plan_of_entry(record: PlanRecord, rows: Rows | None = None) -> Plan | None:
    """The plan a ``plan`` entry recorded, rebuilt from its JSON, or None when the rebuilt plan's digest
    is not the recorded one (the entry cannot say the plan exactly). An entry whose rows are a delta
    against a base (``record.base``) needs its rows given (``PlanRows.rows_of`` with ``rows_reader``):
    None without them."""
    try:
        if record.rows is None:  # a v1 entry: the rows are the JSON turns
            p = _decode(record)
        else:
            if rows is None:
                if record.base is not None:
                    return None
                rows = rows_of_record(record.rows, None)
            p = _plan(record, rows)
    except (KeyError, IndexError, TypeError, ValueError, InvalidInput):
        return None
    return p if plan_digest(p) == record.digest else None


def rows_reader(payload_of: Callable[[str], Any]) -> Callable[[str], tuple[str | None, Mapping[str, Any]] | Rows | None]:
    """What ``PlanRows.rows_of`` reads a plan entry back with, given a read of an entry's payload by id:
    its base and rows record, or the rows of a v1 entry, or None (not a plan, or rows that do not decode)."""
    def read(entry_id: str) -> tuple[str | None, Mapping[str, Any]] | Rows | None:
        record = payload_of(entry_id)
        if not isinstance(record, PlanRecord):
            return None
        if record.rows is not None:
            return record.base, record.rows
        p = plan_of_entry(record)
        return p.rows if p is not None else None

    return read


def _decode(record: PlanRecord) -> Plan:
    raw: Mapping[str, Any] = record.plan
    turns: list[Mapping[str, Any]] = list(raw["turns"])
    current = raw["current_ordinal"]
    codes = "".join(Fidelity(t["fidelity"]).code for t in turns)
    end = len(codes) - (1 if current is not None else 0)
    history = turns[:end]
    start = record.history_start
    if start is None:  # an older entry: turns before the first planned one are the leading behind_reset run
        start = len(codes) - len(codes.lstrip(Fidelity.BEHIND_RESET.code))
    budget = _record(Budget, raw["budget"])
    rows = Rows(
        ids=tuple(str(t["turn_id"]) for t in turns),
        codes=codes,
        full=tuple(int(t["full_tokens"]) for t in history),
        card=tuple(int(t["card_tokens"]) for t in history),
        history_start=start,
        history_end=end,
        # Only scored turns have a relevance, and a scored turn's is > 0 (normalised positive scores).
        relevance={i: float(t["relevance"]) for i, t in enumerate(history) if t["relevance"]},
        anaphora=next((i for i, t in enumerate(history) if t["anaphora"] == 1.0), None),
        retrieved=frozenset(i for i, t in enumerate(history) if t["retrieved"]),
        current_tokens=budget.current,
    )
    return _plan(record, rows)


def _plan(record: PlanRecord, rows: Rows) -> Plan:
    """The plan from an entry's JSON (all but the turns) and its rows."""
    raw: Mapping[str, Any] = record.plan
    current = raw["current_ordinal"]
    budget = _record(Budget, raw["budget"])
    return Plan(
        model=str(raw["model"]),
        directive=str(raw["directive"]),
        current_ordinal=current,
        rows=rows,
        packet=_record(PacketPlan, raw["packet"]) if raw["packet"] is not None else None,
        budget=budget,
        state=PlannerState.from_json(raw["state"]),
        refers_back=bool(raw["refers_back"]),
        rescue=bool(raw["rescue"]),
        rescue_reason=str(raw["rescue_reason"]),
        inputs_digest=record.inputs_digest,
        digest=record.digest,
        inputs=dict(record.inputs),
        current_turn=_record(CurrentTurnPlan, raw["current_turn"]) if raw["current_turn"] is not None else None,
        reset=_record(ResetPlan, raw["reset"]) if raw["reset"] is not None else None,
    )


def _record(cls: Any, raw: Mapping[str, Any]) -> Any:
    """One of the plan's flat records from its JSON (fields an older entry lacks take their default)."""
    return cls(**{f.name: raw[f.name] for f in fields(cls) if f.name in raw})
