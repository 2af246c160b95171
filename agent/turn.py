"""One turn, step by step (spec §6, §10): the single implementation both drivers run.

:class:`TurnCore` (``agent/turn_core.py``) holds what lasts across a session's turns (the profile every receipt
updates, the turn rules and their history, the tools, the last request's prefix);
:meth:`~vak_context.agent.loop.TurnLoop.open_turn` gives an :class:`OpenTurn`, whose steps are the turn:

1. ``begin``: the directive and the tail (computed once per turn: the message it sits in must not change
   between steps);
2. ``request``: the assembler plans (at the turn's first step; the plan is then frozen) and projects the
   next request; a turn that cannot fit even at its most compact closes ``failed`` (nothing is sent);
3. ``rejected``: an over-length rejection goes to the step policy: the profile it implies is recorded and
   the step planned again once; rejected again, the turn closes ``failed``;
4. ``replied``: the model's reply (native or inline calls, each distinct call once), the assistant step,
   its receipt, ``apply_feedback`` and the updated profile, a ``cache.break`` activity when the prefix
   changed;
5. ``judge``: a step with no call is judged by the rules (the answer, a redo nudge, or a close); a step
   with calls is gated (card calls, read-only repeats) and gives the world calls the *driver* runs;
   ``answer_engine`` answers the rest (``find_tools``, malformed or unknown calls, calls over
   :data:`MAX_CALLS_PER_STEP`);
6. ``take_results``: every result stored in call order (``recall`` answered here, in order; card calls
   through ``present``), the rules' verdict after the calls;
7. the card closes the turn (also ``close_failed`` / ``close_cancelled`` for a turn that raised or was
   cancelled);
8. ``finished``: the session's next request is planned and the packet summary it will need is written
   now (``summarise_ahead``), so that request's path never waits on the summariser.

The drivers differ only in who talks to the model and who runs the world tools:
:class:`~vak_context.agent.loop.TurnLoop` (the engine's loop: the provider, the inline-call continuation,
the ToolRegistry) and the caller's loop (:mod:`vak_context.engine.caller`: the embedder's own client and
tools). No policy, rule or retry lives in either.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, cast

from vak_context.agent.steps import Assembled, StepRequest
from vak_context.agent.turn_core import (
    MAX_CALLS_PER_STEP,
    Category,
    Outcome,
    StepReport,
    TurnConfig,
    TurnCore,
    TurnReport,
    TurnServices,
    WorldCall,
    _call_id,
    distinct_calls,
    stated_of,
)
from vak_context.agent.turnrules import ack_id
from vak_context.context.capacity.profile import (
    request_chars,
    to_record,
)
from vak_context.context.evidence.window import window
from vak_context.context.history.cards import default_library
from vak_context.context.planner.policy import GiveUp, Rejected, Retry, StepState, decide
from vak_context.context.request.assemble import Tail, render_tail
from vak_context.context.request.messages import ChatResult
from vak_context.context.request.toolcalls import ParsedCall
from vak_context.context.rules.drift import Verdict
from vak_context.context.stated.extract import extract
from vak_context.errors import ContextOverflow, RequestTooLarge, VakError
from vak_context.events.payloads import (
    Activity,
    AssistantStep,
    Directive,
    ToolResult,
    ToolUseBlock,
    TurnTail,
    WorkContract,
)
from vak_context.providers.local.catalogue import ANSWER_MASK

# The names the drivers import from here, defined beside the state they share (agent/turn_core.py).
__all__ = ["MAX_CALLS_PER_STEP", "OpenTurn", "Outcome", "StepReport", "TurnConfig", "TurnCore", "TurnReport",
           "TurnServices", "WorldCall", "distinct_calls", "stated_of"]

log = logging.getLogger("vak.loop")

class OpenTurn:
    """One turn's steps, in the order a driver takes them (the module's docstring). ``done`` once the card
    is written; ``report`` then says how the turn ended."""

    def __init__(self, core: TurnCore, directive: str, *, caller: bool = False) -> None:
        self.core, self.directive = core, directive
        self.caller = caller  # the caller's loop drives it: the engine is not the agent (issue 33)
        self.open = False  # the directive is written and the card is not
        self.done = False
        self.directive_id = ""
        self.card_id = ""
        self.steps: list[StepReport] = []
        self.report: TurnReport | None = None
        self.calling = False  # the step's calls are gated and their results awaited
        self.too_large: RequestTooLarge | None = None  # why request() gave None: nothing could be sent
        self._index = 0
        self._answer, self._outcome, self._prose = "", "degraded", ""
        self._step_request: StepRequest | None = None
        self._step_request_ahead: StepRequest | None = None  # taken by summarise_ahead, once
        self._state = StepState()  # this step's rejections
        self._assembled: Assembled | None = None
        self._result: ChatResult | None = None
        self._calls: list[ParsedCall] = []
        self._ids: list[str] = []
        self._step_id = ""
        self._cards: list[tuple[int, str, str, dict[str, Any]]] = []
        self._intercepted: set[int] = set()
        self._repeats: set[int] = set()
        self._verdicts: tuple[Verdict, ...] = ()
        self._answer_now = False  # the next request masks calls (the redo rule's answer step)

    # ------------------------------------------------------------ the turn's edges

    async def started(self) -> None:
        """Before the turn: a running background probe of the model is cancelled, and a profile the probe
        wrote since binding (same key, newer ``probed_at``) is what this turn binds."""
        core = self.core
        probed = await core.services.turn_started()
        if probed is not None and probed.key == core.profile.key and (probed.provenance.probed_at or 0) > (
                core.profile.provenance.probed_at or 0):
            core.profile = probed

    async def finished(self, ahead: bool = True) -> None:
        """After the turn (however it ended): the session's search index is caught up in the background
        (``storage/catchup.py``) and the probe may run in the idle time, while the next turn waits on its caller.
        With ``ahead`` (False: the driver calls :meth:`summarise_ahead` itself, once its reply is out, as
        ``vak serve`` does) the packet summary the next request will need is written now."""
        await self.core.services.turn_finished()
        if ahead:
            await self.summarise_ahead()

    async def summarise_ahead(self) -> list[str]:
        """The turn is closed: plan the session's next request and write the packet summary it will need
        (``AssemblerActor.plan_ahead``; the summariser runs where it is held, the PlannerActor on Ray), so the
        request finds it stored and its path never waits on the summariser. Once per turn; nothing for a turn
        that failed or was cancelled (the next request writes what it needs), nor once the session has
        moved on to a newer turn. A failure here is logged, never raised: the turn's answer stands, and the
        next request writes what it finds missing. The entries written."""
        step, self._step_request_ahead = self._step_request_ahead, None
        if step is None or not self.card_id or self._outcome in ("failed", "cancelled"):
            return []
        try:
            return await self.core.services.plan_ahead(self.core.profile, step, self.directive_id, self.directive)
        except VakError as exc:
            log.warning("the packet summary after turn %s was not written ahead (%s: %s); the next request "
                        "writes it", self.directive_id[:12], type(exc).__name__, exc)
            return []

    async def begin(self) -> None:
        core, cfg = self.core, self.core.config
        await core.seed_history()  # before this turn's directive is written: only closed turns (their cards) count
        paused = core.rules.begin(self.directive)
        tail = render_tail(Tail(now=core.clock(), timezone=cfg.timezone, stance=cfg.stance, paused=paused))
        # The directive and the tail it is sent with (recorded, so the closed turn's record carries it,
        # byte-stable across turns) in one append: one durable commit, one actor call on Ray.
        self.directive_id = (await core.services.append([Directive(text=self.directive), TurnTail(text=tail)]))[0]
        core.turn_id, self.open = self.directive_id, True
        # The stated items in force this turn (docs/STATE.md): what the rules judge the directive and replies by.
        core.rules.stated = await stated_of(core.services)
        await core.rules.judge_stated("directive", self.directive)
        self._step_request = core.step_request(tail)
        self._step_request_ahead = self._step_request  # the next turn's first step will look like it
        if cfg.max_steps <= 0:
            await self._close()

    async def close_failed(self, exc: BaseException) -> None:
        """The turn's card records the failure (a ``turn.failed`` activity names the error), so the session
        stays whole and the next turn starts clean; everything the turn appended before it stays. A failure
        to write that (the ledger itself is what failed) leaves the original error to propagate."""
        services = self.core.services
        try:
            # Provider errors are redacted by their adapter before they are raised: no key reaches this text.
            await services.append([Activity(activity="turn.failed", detail={
                "error": type(exc).__name__, "why": str(exc)[:4_000]})])
            self.core.rules.finish(self.directive, "", self.core.clock())
            self._outcome, self._answer = "failed", ""
            await self._extract()
            self.card_id = await services.close_turn("failed")
            self._ended()
        except VakError:
            log.warning("turn %s failed (%s) and its close could not be written", self.directive[:60],
                        type(exc).__name__)

    async def close_cancelled(self) -> None:
        await self.core.services.append([Activity(activity="turn.cancelled", detail={})])
        self.core.rules.finish(self.directive, "", self.core.clock())
        self._outcome, self._answer = "cancelled", ""
        await self._extract()
        self.card_id = await self.core.services.close_turn("cancelled")
        self._ended()

    async def accept(self) -> bool:
        """The caller's framework finished its run on the model's last reply: an open turn whose last step
        was a reply with no call (a rule asked for one more model call) closes ``completed`` with that reply
        as its answer, and a ``turn.accepted`` activity says the rule's step was not taken. False, leaving the
        turn open, when the last step was not such a reply."""
        if not self.open or self.calling or self._result is None or self._calls:
            return False
        text = self._result.text
        await self.core.services.append([Activity(activity="turn.accepted", detail={
            "step_id": self._step_id, "why": "the caller ended its run on this reply; the step a rule asked "
            "for was not taken"})])
        self._answer, self._outcome, self._prose = text, "completed", text
        await self._close()
        return True

    async def earlier_step(self, calls: Sequence[tuple[str, str, Mapping[str, Any]]], outcomes: Sequence[Outcome],
                           stored: Mapping[str, str]) -> str:
        """A step the model made before this turn opened, with its calls' results, as the driver holds them
        (``vak serve`` after a restart: the turn the step was made in is gone, the client's history carries
        the step and the results): recorded as this turn's first step, each result stored as evidence as a
        driver's results are (windowed in the request, digested once the turn closes). A result already
        stored (``stored``: call id to its evidence id, a retry of this exchange) is referred to, never
        stored again. Only before the turn's first request; the step's entry id."""
        assert self.open and not self.done and not self.calling and self._result is None
        core = self.core
        blocks = tuple(ToolUseBlock(id=i, name=n, input=dict(a)) for i, n, a in calls)
        step = AssistantStep(blocks=blocks, model=core.config.model, provider=core.config.provider,
                             stop_reason="tool_use")
        step_id = self._step_id = core.step_id = (await core.services.append([step]))[0]
        for (call_id, name, _), (body, is_error) in zip(calls, outcomes, strict=True):
            evidence_id = stored.get(call_id)
            if evidence_id is None:
                await core.services.store_result(call_id, name, body, is_error)
                continue
            carried = window(body, evidence_id)
            await core.services.append([ToolResult(tool_use_id=call_id, tool_name=name, content=carried.text,
                                                   is_error=is_error, evidence_id=evidence_id,
                                                   windowed=carried.windowed)])
        await core.services.append([Activity(activity="turn.earlier_step", detail={
            "step_id": step_id, "calls": [i for i, _, _ in calls], "stored_before": sorted(stored),
            "why": "the step and its results came from the driver's history: the turn it was made in is gone"})])
        self._index += 1
        return step_id

    async def reopen(self, directive_id: str, tail: str, step_id: str, index: int, text: str,
                     calls: Sequence[tuple[str, str, Mapping[str, Any]]], *,
                     answered: bool = False) -> list[WorldCall] | None:
        """Take up the turn a stopped driver left open in the ledger (its directive has no card, its last
        step's calls no results: ``vak serve`` killed while the client ran them), where it stopped: nothing
        is written; the step's calls are the world calls to run, their results stored by ``take_results``
        as for any step, so the turn goes on with no step recorded again. ``index``: the step's place in
        the turn. ``answered``: the calls' results are stored already (the driver stopped while the next
        request was on its way): nothing to run, the next ``request`` follows. None, with nothing taken up,
        when a call of that step is not one the driver runs (an engine tool, a card call): a new turn takes
        it up then."""
        core, cfg = self.core, self.core.config
        parsed = [ParsedCall(name, dict(arguments), "native") for _, name, arguments in calls]
        if not parsed or not all(self._runs_in_world(i, c) for i, c in enumerate(parsed)):
            return None
        await core.seed_history()  # the closed turns: this one has no card
        core.rules.begin(self.directive)
        self.directive_id = core.turn_id = directive_id
        self.open = True
        core.rules.stated = await stated_of(core.services)
        self._step_request = core.step_request(tail)
        self._step_request_ahead = self._step_request
        self._index, self._step_id, core.step_id = index, step_id, step_id
        self._result = ChatResult(provider=cfg.provider, model=cfg.model, text=text, stop_reason="tool_use")
        self._calls, self._ids = parsed, [i for i, _, _ in calls]
        if answered:
            self._index += 1  # as ``_apply`` left it once the results were in
            return []
        self.calling = True
        return [WorldCall(i, call_id, name, dict(arguments)) for i, (call_id, name, arguments) in enumerate(calls)]

    # ------------------------------------------------------------ one model call

    async def request(self) -> Assembled | None:
        """The next request, planned and projected; None when not even the turn at its most compact fits
        (the turn is then closed ``failed``: nothing is sent)."""
        assert self._step_request is not None and not self.done and not self.calling
        core = self.core
        try:
            self._assembled = await core.services.assemble(core.profile, self._step_request)
        except RequestTooLarge as exc:
            self._answer, self._outcome, self.too_large = str(exc), "failed", exc
            await core.services.append([Activity(activity="turn.request_too_large", detail={"why": str(exc)})])
            await self._close()
            return None
        if self._answer_now:
            self._answer_now = False
            request = self._assembled.request
            extra = {**request.extra, **ANSWER_MASK} if core.config.provider == "local" else request.extra
            self._assembled.request = request.model_copy(update={"tool_choice": "none", "extra": extra})
        return self._assembled

    async def rejected(self, exc: ContextOverflow) -> bool:
        """The model rejected the request as over its window: the step policy's profile is recorded. True:
        plan again (``request``); False: rejected twice, the turn is closed ``failed``."""
        assembled, core = self._assembled, self.core
        assert assembled is not None
        decision, self._state = decide(Rejected(core.profile, exc, request_chars(assembled.request), core.clock()),
                                       self._state)
        assert isinstance(decision, Retry | GiveUp)  # what the policy answers a rejection with
        core.profile = decision.profile
        await core.services.append([to_record(core.profile)])
        if isinstance(decision, Retry):
            return True
        await core.note_prefix(assembled.prefix_digest)
        self._outcome = "failed"
        self._answer = "the request was over the model's window twice; the turn has no answer"
        await core.services.append([Activity(activity="turn.over_window", detail={"why": f"{self._answer}: {exc}"})])
        await self._close()
        return False

    async def replied(self, result: ChatResult) -> StepReport:
        """The model's reply to the last request: the step, its receipt and the profile it updates."""
        assembled, core = self._assembled, self.core
        assert assembled is not None
        await core.note_prefix(assembled.prefix_digest)
        calls = core.calls_of(result)
        # Where the engine is not the agent, a call read from the text of a tool nobody offered is not a call:
        # the model's text is its answer (the engine would otherwise answer "no tool named" for it, step after step).
        unoffered = [] if not self.caller or result.tool_calls else [c for c in calls if not core.offered(c.name)]
        calls = [c for c in calls if c not in unoffered]
        ids = [_call_id(self.directive_id, self._index, i, result) for i in range(len(calls))]
        self._step_id = core.step_id = await core.record_step(result, calls, ids, assembled)
        self._result, self._calls, self._ids = result, calls, ids
        if unoffered:
            await core.services.append([Activity(activity="turn.unoffered_call", detail={
                "step_id": self._step_id, "tools": sorted({c.name or "" for c in unoffered}),
                "why": "a call in the reply's text of a tool neither the caller nor the engine offers: the text "
                       "is the model's answer, not a call"})])
        report = StepReport(
            index=self._index, fidelity=assembled.fidelity, replanned=assembled.replanned,
            estimated_tokens=assembled.estimated_tokens, budget_tokens=assembled.budget_tokens,
            prompt_tokens=result.usage.prompt_tokens, cached_tokens=result.usage.cache_read_tokens,
            prefix_digest=assembled.prefix_digest, calls=[c.name or "?" for c in calls], text=result.text,
            overflows=self._state.rejections,
        )
        self.steps.append(report)
        return report

    # ------------------------------------------------------------ the step's calls

    async def judge(self) -> list[WorldCall]:
        """A step with no call: the rules' verdict (the answer, a redo, a close). A step with calls: card
        calls and read-only repeats are gated (those intercepted are answered with their error), and the
        world calls to run are returned, in call order (``calling`` is then set)."""
        assert self._result is not None
        rules, calls, ids = self.core.rules, self._calls, self._ids
        if not calls:
            await rules.judge_stated("reply", self._result.text, step_id=self._step_id)
            await self._apply(await rules.on_reply(self._result.text))
            return []
        self._cards = [(i, ids[i], c.name or "", c.arguments or {}) for i, c in enumerate(calls)
                       if _is_card(c.name or "")]
        self._intercepted, verdict = await rules.gate(self._step_id, self._cards)
        world = [(i, ids[i], c.name or "", c.arguments) for i, c in enumerate(calls) if not _is_card(c.name or "")]
        self._repeats, repeated = await rules.gate_repeats(self._step_id, world)
        self._verdicts = (verdict, repeated)
        self.calling = True
        return [WorldCall(i, ids[i], c.name or "", c.arguments or {}) for i, c in enumerate(calls)
                if self._runs_in_world(i, c)]

    def _runs_in_world(self, i: int, call: ParsedCall) -> bool:
        name = call.name or ""
        return (i not in self._repeats and i < MAX_CALLS_PER_STEP and call.arguments is not None
                and self.core.engine.get(name) is None and not _is_card(name)
                and self.core.config.surface.declared(name) is not None)

    async def answer_engine(self) -> dict[int, Outcome]:
        """(body, is_error) of every call of the step the engine answers itself, by position: find_tools,
        malformed and unknown calls, calls over the step's limit; placeholders for those answered in
        ``take_results`` (recall, card calls) and for repeats the rules answered."""
        out: dict[int, Outcome] = {}
        for i, call in enumerate(self._calls):
            if self._runs_in_world(i, call):
                continue
            if i in self._repeats:
                out[i] = ("", True)  # already answered by the rule
            elif i >= MAX_CALLS_PER_STEP:
                out[i] = (f"{call.name}: not run: at most {MAX_CALLS_PER_STEP} calls run in one step; "
                          "make the calls you still need in the next step", True)
            else:
                out[i] = await self._engine_answer(call)
        return out

    async def _engine_answer(self, call: ParsedCall) -> Outcome:
        name = call.name or ""
        engine = self.core.engine.get(name)
        if (engine is not None and engine.in_order) or _is_card(name):
            return "", False  # answered while the results are stored
        if call.arguments is None:
            return f"{name}: the arguments must be a JSON object matching the tool's schema", True
        if engine is not None:
            return await engine.answer(self.core.engine_call(call))
        return f"no tool named {name!r}; the tools are listed in the request and under 'More tools'", True

    async def take_results(self, outcomes: Mapping[int, Outcome]) -> None:
        """Every call's (body, is_error) by position (the driver's world results and ``answer_engine``'s):
        stored in call order, card calls presented, the rules' verdict after the calls."""
        core, calls, ids = self.core, self._calls, self._ids
        services, rules = core.services, core.rules
        await self._note_misread()
        cards_done, acked, seen = bool(self._intercepted), [], []  # type: bool, list[tuple[str, Any]], list[tuple[bool | None, bool, str]]
        seen_names: list[str] = []
        ran: list[tuple[str, dict[str, Any] | None, str, str]] = []  # world calls run, for the repeat rule
        for i, (tool_use_id, call) in enumerate(zip(ids, calls, strict=True)):
            name = call.name or ""
            if i in self._repeats:
                continue  # answered by the rule
            outcome = outcomes[i]
            engine = core.engine.get(name)
            if engine is not None and engine.in_order and not outcome[1]:  # it stores its own result
                body, _ = await engine.answer(core.engine_call(call, tool_use_id))
                ran.append((name, call.arguments, tool_use_id, body))
            elif _is_card(name):
                if not cards_done:  # present writes every card call of the step, in call order
                    acks = await services.present(self._step_id)
                    args = {t: a for _, t, _, a in self._cards}
                    acked = [(pid, args.get(str(r.get("tool_use_id")), {})) for r in acks
                             if (pid := ack_id(r)) is not None]
                    cards_done = True
            else:
                body, is_error = outcome
                await services.store_result(tool_use_id, name, body, is_error)
                decl = core.decl(name)
                # The tool's own flag: True, False, or None (undeclared, which the freshness rule counts).
                seen.append((decl.observes if decl is not None else False, is_error, body))
                seen_names.append(name)
                if i < MAX_CALLS_PER_STEP:
                    ran.append((name, call.arguments, tool_use_id, body))
        rules.ran(ran)
        self.calling = False
        closing = next((v for v in self._verdicts if v.action == "close"), None)
        verdict = closing or await rules.after_calls(seen, acked, only_cards=len(self._cards) == len(calls),
                                                     names=seen_names)
        redo = next((v for v in self._verdicts if v.action == "redo"), None)
        if redo is not None and verdict.action == "continue":
            await rules.redo(redo)
            self._answer_now, verdict = True, redo
        await self._apply(verdict)

    async def _note_misread(self) -> None:
        deferred = {t.name for t in self.core.config.surface.deferred}
        misread = [c.name for c in self._calls if c.name in deferred and c.name not in self.core.promoted]
        if misread:  # every admitted tool is callable; one the surface did not predict is the measured misread
            await self.core.services.append([Activity(activity="surface.misread", detail={
                "step_id": self._step_id, "tools": sorted(set(misread))})])

    # ------------------------------------------------------------ the step's end

    async def _apply(self, verdict: Verdict) -> None:
        """The verdict on the step: the horizon lowered on drift; the answer or a close ends the turn, else
        the next step (the turn ends ``degraded`` when it has had its steps)."""
        assert self._result is not None
        if verdict.lower_horizon and self._assembled is not None:  # (None: a step taken up by ``reopen``)
            await self.core.lower_horizon(self._result, self._assembled)
        if verdict.action in ("answer", "close"):
            self._answer, self._outcome = verdict.text, verdict.outcome
            self._prose = self._result.text if verdict.action == "answer" and not verdict.tag else ""
            await self._close()
            return
        self._index += 1
        self._state = StepState()
        if self._index >= self.core.config.max_steps:  # out of steps: the model's last words, never an empty answer
            self._answer = self._result.text
            await self._close()

    async def _close(self) -> None:
        self.core.rules.finish(self.directive, self._prose, self.core.clock())
        await self._extract()
        self.card_id = await self.core.services.close_turn(self._outcome)
        self._ended()

    async def _extract(self) -> None:
        """The deterministic pass at turn close (docs/STATE.md): what the directive stated, as ``work_contract``
        items keyed against those in force (a restatement supersedes); in force from the next turn."""
        if not self.directive_id:
            return
        drafts = extract(self.directive, await stated_of(self.core.services))
        if drafts:
            await self.core.services.append([
                WorkContract(text=d.text, category=cast(Category, d.category), key=d.key, turn_id=self.directive_id,
                             entry_id=self.directive_id, via="directive") for d in drafts])

    def _ended(self) -> None:
        self.open, self.done, self.calling = False, True, False
        self.report = TurnReport(self.directive_id, self._answer, self._outcome, self.card_id, self.core.profile,
                                 self.steps)


def _is_card(name: str) -> bool:
    return default_library().is_card_tool(name)
