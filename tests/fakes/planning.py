"""One request planned and projected outside a turn loop, for the planner's tests.

``prepare`` is what a step's plan and projection are, without the step policy around them (which the
AssemblerActor runs): the PlannerActor's ``settle_plan`` (plan; write the packet summary or this model's
reset the plan needs; plan again), then the projection (``vak_context.context.request.assemble.project``).
A current turn that cannot fit even at its most compact raises ``RequestTooLarge``: nothing is sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from vak_context.actors.planner import Summarise, settle_plan
from vak_context.context.capacity.profile import CapacityProfile
from vak_context.context.planner.plan import Plan
from vak_context.context.planner.view import SessionView
from vak_context.context.request.assemble import project
from vak_context.context.request.messages import ChatRequest, ToolSpec
from vak_context.storage.contract import Ledger


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
