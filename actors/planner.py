"""PlannerActor: plans a session's next request and records the plan (spec §4), as a plain class.

``vak_context.actors.factory.planner_actor`` wraps it with ``ray.remote``. Thin: it keeps each session's
``SessionView`` current from the entries appended since it last looked, calls the pure planner,
and appends a ``plan`` entry holding the plan, its inputs and both digests. ``explain(plan_id)``
rebuilds the view as of the recorded chain head and plans again from the recorded inputs, so
any request can be explained after the fact: equal digests mean the same plan.

Each model's planner state (the current-turn reserve) is read back from its last recorded plan, so
a restarted actor carries on where the old one stopped. It writes through a LedgerActor handle when
given one (the folder's one writer), else through its own LedgerStore.

**A live turn's plans.** The AssemblerActor asks this actor for each plan of a turn (its first step, and a
re-plan when the turn outgrew the frozen plan or the server's count said the estimate undercounted):
``plan_step`` plans, writes what the plan needs first (the packet summary, through the summariser this
actor holds, or a rescue's reset-with-handoff), plans again, and returns the settled plan; the
assembler projects and sizes it, and ``record_step`` appends the ``plan`` entry of the plan it sends,
naming this actor (``PlanRecord.producer``). The summariser is the one given (in-process), else the one
built from the step's endpoint (on Ray: ``vak_context.agent.endpoint.build_tools``, once per endpoint, on
the bound model or the endpoint's cheaper summary model).

**Summaries at turn close.** When a turn closes, the turn loop asks (through the assembler, which measures
the prefix as for a step) for ``plan_ahead``: the next request's plan, made as its first step will make it,
and the packet summary it needs written then, so the summariser's call is made between turns and never
on a request's path. ``plan_step`` still writes a summary its plan finds missing (the first request
after a restart, a profile or budget that moved); both hold the session's lock, and a range with a stored
packet is never summarised again (``vak_context.agent.summarise``).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vak_context.actors.ledger_client import LedgerClient
from vak_context.actors.session_fold import FoldedSessions, fold_unseen
from vak_context.agent.endpoint import EndpointTools, build_tools
from vak_context.agent.request import Summarise, plan_record, settle_plan, summarise_ahead
from vak_context.agent.steps import StepRequest
from vak_context.context.capacity.profile import CapacityProfile, from_record
from vak_context.context.capacity.tokens import PRIOR_TOKENS_PER_CHAR
from vak_context.context.planner.delta import PlanRows
from vak_context.context.planner.plan import Plan, PlannerState
from vak_context.context.planner.view import SessionView
from vak_context.errors import InvalidInput
from vak_context.events.envelope import Mapper
from vak_context.events.payloads import CapacityProfileRecord, PlanRecord
from vak_context.storage.ledger import LedgerStore

PRODUCER = "PlannerActor"  # what a plan entry this actor writes names as its producer


@dataclass(frozen=True)
class StepPlan:
    """``plan_step``'s answer: the settled plan, and the entries written on the way (packet, reset)."""

    plan: Plan
    written: list[str] = field(default_factory=list)


def as_profile(profile: CapacityProfile | CapacityProfileRecord | Mapping[str, Any]) -> CapacityProfile:
    """A CapacityProfile from itself, its ledger record, or the record's JSON."""
    if isinstance(profile, CapacityProfile):
        return profile
    if isinstance(profile, CapacityProfileRecord):
        return from_record(profile)
    if isinstance(profile, Mapping):
        return from_record(CapacityProfileRecord.model_validate({"kind": "capacity_profile", **profile}))
    raise InvalidInput(f"not a capacity profile: {type(profile).__name__}; pass a CapacityProfile or its record")


class PlannerActor:
    """``ledger``: the folder's LedgerActor handle, or a LedgerStore this process holds as its writer."""

    def __init__(self, root: str, ledger: LedgerStore | Any, tokens_per_char: float = PRIOR_TOKENS_PER_CHAR,
                 summarise: Summarise | None = None) -> None:
        self.root = root
        self.ledger = LedgerClient(root, ledger)
        self.tokens_per_char = tokens_per_char
        # Writes a packet summary when a plan needs one (``vak_context.agent.summarise.write_packet`` bound to
        # a model); None: built from each step's endpoint, else a plan that needs a summary is an error.
        self.summarise = summarise
        self.mapper = Mapper()
        self._lock = threading.RLock()
        # The packets, resets and plans this actor writes are folded into its view as it writes them.
        self._views: FoldedSessions[SessionView] = FoldedSessions(
            self.ledger, lambda chain: SessionView.build(chain, self.tokens_per_char),
            lambda view, new: fold_unseen(view, new, self._views.written), self._lock)
        self._endpoints: dict[tuple[Any, ...], EndpointTools] = {}
        self._sessions: dict[str, asyncio.Lock] = {}  # one step plan at a time per session (an async actor)
        self._plan_rows = PlanRows()  # the rows of the plan entries it wrote: the next one's base

    def view(self, session: str) -> SessionView:
        """The session's view, brought up to date with what was appended since last time."""
        return self._views.get(session)

    def plan(
        self,
        session: str,
        profile: CapacityProfile | CapacityProfileRecord | Mapping[str, Any],
        directive: str = "",
        *,
        prefix_tokens: int,
        tail_tokens: int,
        reading_terms: Sequence[str] = (),
        current: int | None = None,
        record: bool = True,
    ) -> dict[str, Any]:
        """Plan the session's next request for ``profile``; record it unless ``record`` is False.

        Returns ``{"plan", "digest", "inputs_digest", "entry_id"}`` (``entry_id`` of the plan entry).
        """
        with self._lock:
            view = self.view(session)
            p = view.plan(
                as_profile(profile),
                directive,
                prefix_tokens=prefix_tokens,
                tail_tokens=tail_tokens,
                reading_terms=tuple(reading_terms),
                current=current,
            )
            entry_id = self.ledger.append(session, [plan_record(p, view.index.head)])[0] if record else None
        return {"plan": p.to_json(), "digest": p.digest, "inputs_digest": p.inputs_digest, "entry_id": entry_id}

    async def plan_step(self, session: str, profile: CapacityProfile, step: StepRequest, *, current: int,
                        prefix_tokens: int | None = None) -> StepPlan:
        """The settled plan for the open turn's step (its ordinal ``current``), with the packet summary or
        the reset it needed written first. ``prefix_tokens``: the stable prefix as the assembler's counter
        measured it (None: estimated). Not recorded: ``record_step`` records the plan that is sent."""
        lock = self._sessions.setdefault(session, asyncio.Lock())
        async with lock:
            view = self.view(session)
            p, written = await settle_plan(
                view, profile, "", ledger=self.ledger, session=session, summarise=self._summariser(session, step),
                system=step.system, tools=step.tools, tail=step.tail, current=current, prefix=prefix_tokens,
            )
        return StepPlan(p, written)

    async def plan_ahead(self, session: str, profile: CapacityProfile, step: StepRequest, *, after: str,
                         directive: str, prefix_tokens: int | None = None) -> list[str]:
        """At the close of turn ``after`` (its directive's entry id): plan the next request (not recorded) and
        write the packet summary it will need now, through the summariser this actor holds, so that
        request's ``plan_step`` finds it stored. ``directive`` stands in for the next one's words (the closed
        turn's; only its length reaches the packet's range). Nothing is planned once the session has moved
        on (a newer directive, or the turn still open): the next request then plans for itself. Returns the
        entries written (the ``packet.summarise`` activity and the ``compaction``), none when nothing was due."""
        lock = self._sessions.setdefault(session, asyncio.Lock())
        async with lock:  # a step plan of the same session waits for this summary, then finds it stored
            view = self.view(session)
            last = view.index.current
            if last is None or last.id != after or not last.closed:
                return []
            _, written = await summarise_ahead(
                view, profile, directive, summarise=self._summariser(session, step), system=step.system,
                tools=step.tools, tail=step.tail, prefix=prefix_tokens,
            )
        return written

    def record_step(self, session: str, plan: Plan) -> str:
        """Append the ``plan`` entry of a step's plan (the one sent), naming this actor; its entry id."""
        with self._lock:
            view = self.view(session)
            base = self._plan_rows.base_for(view.plans.get(plan.model))  # its rows: what changed since
            record = plan_record(plan, view.index.head, PRODUCER, base)
            entry_id = self.ledger.append(session, [record])[0]
            self._plan_rows.wrote(entry_id, plan.rows, record.base)
            # Folded by the next view(), with whatever else was appended by then, from this record: no read
            # of the entry back (on Ray a LedgerActor call carrying it) and no decoding it again.
            self._views.wrote(entry_id, record)
            return entry_id

    def _summariser(self, session: str, step: StepRequest) -> Summarise:
        if self.summarise is not None:
            return self.summarise
        if step.endpoint is not None:
            tools = self._endpoints.get(step.endpoint.ident)
            if tools is None:
                tools = self._endpoints[step.endpoint.ident] = build_tools(step.endpoint, lambda: self.tokens_per_char)
            return tools.summarise_for(self.ledger, session)
        return _no_summariser

    def explain(self, plan_id: str) -> dict[str, Any]:
        """Plan again from a recorded plan's inputs, on the chain as it was; say whether it is the same."""
        entry = self.ledger.get(plan_id)
        record = self.mapper.payload_of(entry)
        if not isinstance(record, PlanRecord):
            raise InvalidInput(f"{plan_id} is a {entry.kind} entry, not a plan")
        inputs = record.inputs
        chain = self.ledger.chain_to_root(record.head) if record.head else []
        view = SessionView.build(chain, self.tokens_per_char)
        p = view.plan(
            as_profile(inputs["profile"]),
            inputs["directive"] if inputs.get("current") is None else "",
            prefix_tokens=int(inputs["prefix_tokens"]),
            tail_tokens=int(inputs["tail_tokens"]),
            state=PlannerState.from_json(inputs.get("state")),
            reading_terms=tuple(inputs.get("reading_terms", ())),
            current=inputs.get("current"),
        )
        return {
            "recorded": record.digest,
            "recomputed": p.digest,
            "matches": p.digest == record.digest and p.inputs_digest == record.inputs_digest,
            "plan": p.to_json(),
        }

    def state(self, session: str, model: str) -> dict[str, Any] | None:
        """The planner state the model's last recorded plan returned (None before its first plan)."""
        st = self.view(session).states.get(model)
        return None if st is None else {"current_turn_reserve": st.current_turn_reserve, "samples": st.samples,
                                        "observed_through": st.observed_through}


async def _no_summariser(_view: SessionView, _plan: Plan) -> list[str]:
    raise InvalidInput(
        "the plan needs a packet summary and this planner has no summariser; pass summarise= "
        "(vak_context.agent.summarise.write_packet bound to a model), or bind the session with a ModelEndpoint "
        "(vak_context.agent.endpoint) so the PlannerActor builds one"
    )
