"""AssemblerActor: the request for each step of a live turn (spec §6, §10 "what each call carries").

A plain class (``vak_context.actors.factory.assembler_actor`` applies ``ray.remote``). Thin: it keeps each
session's ``SessionView`` current from the ledger, plans at a turn's first step through
``vak_context.agent.request.prepare`` (writing the packet summary or the reset the plan needs), and projects.

**The history is frozen within a turn.** The spec says that within a turn "nothing before the tail
changes": the older turns are planned once, at the turn's first step, and that plan is kept for every
later step, so each step's request is the previous one plus what the turn appended (a byte prefix, the
prefix cache's best case). The plan is made again mid-turn only when the frozen plan's request no
longer fits the profile's budget (the current turn outgrew it): a compaction at a step boundary.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from vak_context.actors.ledger_client import LedgerClient
from vak_context.agent.endpoint import EndpointTools, build_tools
from vak_context.agent.request import Prepared, SessionView, Summarise, prepare, record_plan
from vak_context.agent.steps import Assembled, StepRequest
from vak_context.context.capacity.profile import CapacityProfile, request_chars
from vak_context.context.capacity.tokens import PRIOR_TOKENS_PER_CHAR
from vak_context.context.planner.plan import Plan
from vak_context.context.planner.records import Fidelity
from vak_context.context.request.assemble import (
    cache_breakpoints,
    current_turn_messages,
    prefix_digest,
    project,
    request_tokens,
)
from vak_context.context.request.messages import ChatRequest, Message
from vak_context.errors import InvalidInput
from vak_context.events.envelope import Mapper
from vak_context.storage.ledger import LedgerStore

Count = Callable[[ChatRequest], Awaitable[int]]


def fidelity_counts(p: Plan) -> dict[str, int]:
    """How many turns the plan carries at each fidelity, keyed by ``Fidelity`` value (a report's counts)."""
    counts = {f.value: 0 for f in (Fidelity.FULL, Fidelity.CARD, Fidelity.PACKET, Fidelity.BEHIND_RESET)}
    for t in p.turns:
        counts[t.fidelity] = counts.get(t.fidelity, 0) + 1
    return counts


def request_budget(profile: CapacityProfile) -> int:
    """The tokens a request may carry, as the planner counts them: the usable horizon (never past the
    verified or declared window) less the output reserve."""
    window = profile.verified_window or profile.declared_window
    return max(0, min(profile.instruction_horizon.tokens, window) - profile.output_reserve)


class AssemblerActor:
    """``ledger``: the folder's LedgerActor handle, or a LedgerStore this process holds as its writer.
    ``summarise`` writes a packet summary when a plan needs one (``vak_context.agent.summarise.write_packet``
    bound to a summariser); without it a plan that needs a new summary is an error.
    ``count`` sizes a request exactly (``vak_context.providers.tokencount``: the server's own template and
    tokenizer); without it the budget check uses ``chars × tokens_per_char``."""

    def __init__(self, root: str, ledger: LedgerStore | Any, summarise: Summarise | None = None,
                 tokens_per_char: float = PRIOR_TOKENS_PER_CHAR,
                 count: Callable[[ChatRequest], Awaitable[int]] | None = None,
                 count_prefix: Callable[[ChatRequest], Awaitable[int]] | None = None) -> None:
        self.ledger = LedgerClient(root, ledger)
        self.count = count
        # Sizes the stable prefix once per digest where no per-request counter is wired (a hosted provider):
        # ``vak_context.providers.tokencount.UsageCounter``, a usage-only request (max_tokens 1).
        self.count_prefix = count_prefix
        self.summarise = summarise
        self.tokens_per_char = tokens_per_char
        self.mapper = Mapper()
        self._views: dict[str, tuple[SessionView, int]] = {}
        self._frozen: dict[tuple[str, str], tuple[str, Plan]] = {}  # (session, model) -> (turn id, plan)
        self._lock = threading.RLock()
        self._prefix: dict[tuple[str, str], int] = {}  # (model, prefix digest) -> tokens, as its server counts them
        self._endpoints: dict[tuple[str, str], EndpointTools] = {}
        self._rate = tokens_per_char  # the bound profile's tokens per char: an endpoint counter's fallback

    def _hooks(self, session: str, step: StepRequest) -> tuple[Count | None, Summarise | None]:
        """The counter and summariser for this step: the ones given at construction, else those built
        from the step's endpoint (kept for every later step that names the same server and model)."""
        if step.endpoint is None or (self.count is not None and self.summarise is not None):
            return self.count, self.summarise
        tools = self._endpoints.get(step.endpoint.ident)
        if tools is None:
            tools = self._endpoints[step.endpoint.ident] = build_tools(step.endpoint, lambda: self._rate)
        return self.count or tools.count, self.summarise or tools.summarise_for(self.ledger, session)

    def view(self, session: str) -> SessionView:
        """The session's view, brought up to date with every entry appended since the last call."""
        with self._lock:
            cached = self._views.get(session)
            view, seen = cached if cached is not None else (SessionView(self.tokens_per_char), 0)
            new = self.ledger.entries(session, seen)
            view.add_all(new)
            self._views[session] = (view, seen + len(new))
            return view

    async def assemble(self, session: str, profile: CapacityProfile, step: StepRequest) -> Assembled:
        """The request for the open turn's next step (see the module docstring for when it plans)."""
        view = self.view(session)
        self._rate = profile.tokens_per_char.value
        count, summarise = self._hooks(session, step)
        turn = view.index.current
        if turn is None:
            raise InvalidInput(f"session {session!r} has no open turn; append the directive first")
        key = (session, str(profile.key))
        budget = request_budget(profile)
        frozen = self._frozen.get(key)
        written: list[str] = []
        plan_id: str | None = None
        replanned = False
        request: ChatRequest | None = None
        size = 0
        if frozen is not None and frozen[0] == turn.id:
            p = frozen[1]
            request = self._project(view, p, step)
            size = await self._size(profile, request, count)
            if size > budget:
                request = None  # the turn outgrew the frozen plan: plan again at this step boundary
        if request is None:
            prepared = await self._prepare(session, view, profile, step, turn.ordinal, count, summarise)
            size = await self._size(profile, prepared.request, count)
            if count is not None and size > budget:
                # The plan's chars × tokens_per_char undercounted: plan again at the rate just measured.
                rate = replace(profile.tokens_per_char, value=size / max(1, request_chars(prepared.request)))
                written = prepared.written  # a packet or reset the first plan wrote stays written
                prepared = await self._prepare(session, view, replace(profile, tokens_per_char=rate), step,
                                               turn.ordinal, count, summarise)
                size = await self._size(profile, prepared.request, count)
            p, request, written = prepared.plan, prepared.request, [*written, *prepared.written]
            request = self._with_cache(request, view, p, step)
            plan_id = record_plan(self.ledger, session, view, p)
            self._views[session] = (view, self._views[session][1] + len(written) + 1)
            self._frozen[key] = (turn.id, p)
            replanned = True
        return Assembled(
            request=request,
            plan_digest=p.digest,
            plan_id=plan_id,
            replanned=replanned,
            fidelity=fidelity_counts(p),
            prefix_digest=prefix_digest(step.system, step.tools),
            estimated_tokens=size,
            budget_tokens=budget,
            written=written,
        )

    @staticmethod
    async def _size(profile: CapacityProfile, request: ChatRequest, count: Count | None) -> int:
        """The request's tokens: exact when a counter is wired, else the plan's chars × tokens_per_char."""
        return await count(request) if count is not None else request_tokens(profile, request)

    async def _prepare(self, session: str, view: SessionView, profile: CapacityProfile, step: StepRequest,
                       ordinal: int, count: Count | None, summarise: Summarise | None) -> Prepared:
        async def no_summariser(_view: SessionView, _plan: Plan) -> list[str]:
            raise InvalidInput(
                "the plan needs a packet summary and this assembler has no summariser; "
                "pass summarise= (vak_context.agent.summarise.write_packet bound to a model)"
            )

        return await prepare(
            view, profile, "", ledger=self.ledger, session=session, summarise=summarise or no_summariser,
            model=step.model, system=step.system, tools=step.tools, tail=step.tail, current=ordinal,
            max_tokens=step.max_tokens, prefix=await self._prefix_tokens(step, count),
        )

    async def _prefix_tokens(self, step: StepRequest, count: Count | None) -> int | None:
        """The stable prefix (system + tools) as the server counts it, measured once per prefix digest;
        None (the chars estimate) without a counter. Counted with one blank user message, the least a
        chat template renders, so the figure errs by a few tokens on the safe side."""
        counter = count or self.count_prefix
        if counter is None:
            return None
        key = (step.model, prefix_digest(step.system, step.tools))
        if key not in self._prefix:
            probe = ChatRequest(model=step.model, system=step.system, tools=step.tools,
                                messages=(Message.user(" "),), max_tokens=1)
            self._prefix[key] = await counter(probe)
        return self._prefix[key]

    def _project(self, view: SessionView, p: Plan, step: StepRequest) -> ChatRequest:
        request = project(view.index, p, model=step.model, infos=view.infos, system=step.system, tools=step.tools,
                          tail=step.tail, max_tokens=step.max_tokens, temperature=step.temperature)
        return self._with_cache(request, view, p, step)

    @staticmethod
    def _with_cache(request: ChatRequest, view: SessionView, p: Plan, step: StepRequest) -> ChatRequest:
        directive_index = _directive_index(request, view, p)
        hints = cache_breakpoints(len(request.messages), directive_index, step.session_key)
        return request.model_copy(update={"cache": hints, "temperature": step.temperature,
                                          "deferred_tools": step.deferred})


def _directive_index(request: ChatRequest, view: SessionView, p: Plan) -> int | None:
    """The index of the current turn's directive message: the number of messages the current turn
    does not account for. Resolved from the turn structure, never "the last user message"."""
    if p.current_ordinal is None:
        return None
    current = current_turn_messages(view.index, p, view.infos)  # as compacted: steps left out are not there
    # The current turn renders as its own messages at the end (its first message may merge into the
    # previous user message when roles repeat; then the directive is that merged message).
    at = len(request.messages) - len(current)
    return max(0, at)

