"""Preparing a request (spec §4, §6): the I/O around the planner.

* ``SessionView`` (the session as the planner sees it) is pure and lives in
  ``vak_context.context.planner.view``.
* The projection itself (``project``: stable prefix, handoff, retrieved turns, packet, working set,
  current turn with the tail before the directive's words) is pure and lives in ``vak_context.context.request.assemble``.
* ``prepare``: plan, write what the plan needs first (the packet's summary through
  ``vak_context.agent.summarise``, or this model's reset-with-handoff of a rescue), plan again, project. A
  current turn that cannot fit even at its most compact raises ``RequestTooLarge``: nothing is sent.
* ``summarise_ahead``: at a turn's close, plan the next request and write the packet summary it will
  need, so the summariser's call is made between turns and the request finds the summary stored
  (``settle_plan`` still writes one a request needs and finds missing: the first request after a
  restart, or a budget that moved).

The step policy (``vak_context.context.planner.policy``) decides when a step plans, keeps its plan or plans
again, and what profile an over-length rejection implies; the AssemblerActor and the turn loop run it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from vak_context.context.capacity.profile import CapacityProfile
from vak_context.context.planner.plan import Plan
from vak_context.context.planner.policy import plan_entry
from vak_context.context.planner.records import Fidelity, Rows
from vak_context.context.planner.view import SessionView, handoff_text
from vak_context.context.request.assemble import prefix_tokens, project, text_tokens
from vak_context.context.request.messages import (
    ChatRequest,
    ChatResult,
    ToolSpec,
)
from vak_context.errors import InvalidInput
from vak_context.events.payloads import PlanRecord, ResetWithHandoff
from vak_context.storage.contract import Ledger


def plan_record(p: Plan, head: str | None, producer: str | None = None,
                base: tuple[str, Rows] | None = None) -> PlanRecord:
    """The ``plan`` entry (``vak_context.context.planner.policy.plan_entry``): the plan, its inputs and both
    digests, so the request can be explained later and the plan decoded back after a restart; ``producer``
    names the actor that made it (outside both digests); ``base``: the model's plan entry before it (its id
    and rows), which its rows are written against (``vak_context.context.planner.delta``)."""
    record = plan_entry(p, head, base)
    return record if producer is None else record.model_copy(update={"producer": producer})


def record_plan(ledger: Ledger, session: str, view: SessionView, p: Plan, producer: str | None = None) -> str:
    """Append the plan to the session (and to the view, so the model's state carries to its next plan)."""
    entry_id = ledger.append(session, [plan_record(p, view.index.head, producer)])[0]
    view.add(ledger.get(entry_id))
    return entry_id


# ------------------------------------------------------------------ rescue and preparation


def write_reset(ledger: Ledger, session: str, view: SessionView, p: Plan) -> str:
    """The rescue: a reset-with-handoff entry, after which the turns before it are never planned."""
    if not p.rescue:
        raise InvalidInput("only a rescue plan (plan.rescue) writes a reset-with-handoff")
    history = [t for t in p.turns if t.fidelity == Fidelity.BEHIND_RESET]
    payload = ResetWithHandoff(
        handoff=handoff_text(p),
        last_turn_id=history[-1].turn_id if history else None,
        reason=p.rescue_reason,
        model=p.model,  # this model's rescue: other models' projections stay as they were
    )
    entry_id = ledger.append(session, [payload])[0]
    view.add(ledger.get(entry_id))
    return entry_id


Summarise = Callable[[SessionView, Plan], Awaitable[list[str]]]


@dataclass
class Prepared:
    plan: Plan
    request: ChatRequest
    written: list[str] = field(default_factory=list)  # entries written on the way (packet, reset)


async def prepare(
    view: SessionView,
    profile: CapacityProfile,
    directive: str,
    *,
    ledger: Ledger,
    session: str,
    summarise: Summarise,
    model: str,
    system: str = "",
    tools: Sequence[ToolSpec] = (),
    tail: str = "",
    current: int | None = None,
    reading_terms: Sequence[str] = (),
    max_tokens: int = 1024,
    prefix: int | None = None,
) -> Prepared:
    """Plan; write the packet summary or the reset the plan needs; plan again; project."""
    p, written = await settle_plan(view, profile, directive, ledger=ledger, session=session, summarise=summarise,
                                   system=system, tools=tools, tail=tail, current=current,
                                   reading_terms=reading_terms, prefix=prefix)
    request = project(
        view.index, p, model=model, infos=view.infos, system=system, tools=tools, tail=tail, max_tokens=max_tokens
    )
    return Prepared(p, request, written)


async def settle_plan(
    view: SessionView,
    profile: CapacityProfile,
    directive: str,
    *,
    ledger: Ledger,
    session: str,
    summarise: Summarise,
    system: str = "",
    tools: Sequence[ToolSpec] = (),
    tail: str = "",
    current: int | None = None,
    reading_terms: Sequence[str] = (),
    prefix: int | None = None,
) -> tuple[Plan, list[str]]:
    """The planning half of ``prepare`` (what the PlannerActor does for a step): plan; write the packet
    summary or the reset the plan needs; plan again. Returns the settled plan and the entries written."""
    written: list[str] = []
    # The stable prefix as measured (the server's own count, when the caller has one), else estimated.
    pre = prefix if prefix is not None else prefix_tokens(profile, system, tools)
    # The tail as recorded: the plan adds the room of the stated items' <work_contract> (docs/STATE.md).
    tail_n = text_tokens(profile, tail)
    for _ in range(3):  # a summary written can change the packet's cost once; a reset empties history
        p = view.plan(
            profile, directive, prefix_tokens=pre, tail_tokens=tail_n, reading_terms=reading_terms, current=current
        )
        if p.rescue and p.rows.history_start < p.rows.history_end:  # history this model does not yet start after
            written.append(write_reset(ledger, session, view, p))
            continue
        if p.packet is not None and p.packet.needs_summary:
            written += await summarise(view, p)
            continue
        break
    if p.packet is not None and p.packet.needs_summary:
        raise InvalidInput("the packet's summary could not be settled in three rounds; plan again")
    return p, written


async def summarise_ahead(
    view: SessionView,
    profile: CapacityProfile,
    directive: str,
    *,
    summarise: Summarise,
    system: str = "",
    tools: Sequence[ToolSpec] = (),
    tail: str = "",
    prefix: int | None = None,
) -> tuple[Plan, list[str]]:
    """At a turn's close: plan the session's next turn as its requests will be planned and write the
    summaries their packets need, so those requests find them stored. Two plans: its first step's (a new
    directive after every closed turn; ``directive`` stands in for the words not yet written, the closed
    turn's, whose length is what the budget reads), and a later step's, once the turn has grown as far as
    the session's recent turns grew (the largest current turn of its last recorded plans,
    ``SessionView.grown``: a turn whose tool results outgrow its first plan plans again with a larger
    reserve, so a smaller budget and a larger packet). A packet's range depends only on the budget
    (prefix, tail, the current turn's reserve), not on the directive's words, and ranges grow in whole
    batches of turns, so these are the ranges the turn's requests carry; a step that grows further than
    the recent turns did may still find its range missing and write it (``settle_plan``). Nothing else is
    written: a rescue's reset is the request's own to write. Returns the first step's plan and the entries
    written (none when every packet is stored, a list or a pointer)."""
    pre = prefix if prefix is not None else prefix_tokens(profile, system, tools)
    tail_n = text_tokens(profile, tail)
    first = view.plan(profile, directive, prefix_tokens=pre, tail_tokens=tail_n)
    written = await _summarise_packet(view, first, summarise)
    grown = max(view.grown.get(str(profile.key), ()), default=0)
    if grown > first.budget.current:
        later = view.plan(profile, directive, prefix_tokens=pre, tail_tokens=tail_n, grown=grown)
        written += await _summarise_packet(view, later, summarise)  # the view holds the first's: never twice
    return first, written


async def _summarise_packet(view: SessionView, p: Plan, summarise: Summarise) -> list[str]:
    if p.rescue or p.packet is None or not p.packet.needs_summary:
        return []
    return await summarise(view, p)


# ------------------------------------------------------------------ sending


class Complete(Protocol):
    async def complete(self, request: ChatRequest) -> ChatResult: ...
