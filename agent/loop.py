"""The live turn loop (spec §6, §10): one function runs a turn end to end.

``TurnLoop.run(directive)``:

1. ``turn_started`` (a running background probe is cancelled), append the directive;
2. per step: the assembler plans (at the turn's first step; the plan is then frozen) and projects the
   request; the provider sends it (an over-length rejection corrects the profile and retries once);
   the assistant step and its receipt are appended, the receipt goes through ``apply_feedback`` and
   the updated profile is written;
3. the step's tool calls run (concurrently; results appended in call order, each whole result as an
   evidence body and what the request carries as its tool result); a step with no call ends the turn.
   World tools run through the :class:`~vak_context.agent.tools.ToolRegistry` (``tools=``; ``workspace=``
   registers the workspace tools), the engine's own (recall, find_tools) through
   :func:`~vak_context.agent.tools.engine_tools`. A tool that raises gives the model an error result
   naming the exception, and the turn goes on;
4. the TurnCard closes the turn; ``turn_finished`` lets the probe run in the idle time. An exception mid-turn
   (a provider's 4xx/5xx or timeout after its retries, the server gone, an actor or the ledger, or a plain
   exception from the caller's own code such as an ``on_step`` callback) closes the turn ``failed`` with a
   ``turn.failed`` activity naming it, then propagates.

The turn rules (:mod:`vak_context.agent.turnrules` over :mod:`vak_context.context.rules.drift`) run at three points: card calls are
gated before they run (freshness, topic mismatch), a step's results and acks are folded in after (an
observation, repeated cards), and a step with no call is judged (empty step, model drift, freshness of
a prose answer): it is the answer, gets one redo nudge, or the turn closes with a system-authored outcome.

The same code runs in-process or on Ray: everything stateful goes through :class:`TurnServices`
(``vak_context.actors.local_services.InProcessServices`` in this process, ``vak_context.actors.turn_services.RayServices`` through the actors). Tool calls are
read by the one parser (``vak_context.context.request.toolcalls``) whether they came back native or inline in the text.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from vak_context.agent.endpoint import ModelEndpoint
from vak_context.agent.request import Complete
from vak_context.agent.steps import Assembled, StepRequest
from vak_context.agent.tools import EngineCall, EngineTools, ToolRegistry, engine_tools, workspace_tools
from vak_context.agent.turnrules import TurnRules, ack_id
from vak_context.agent.workspace import Workspace
from vak_context.context.capacity.profile import (
    CapacityProfile,
    TurnFeedback,
    apply_feedback,
    request_chars,
    to_record,
)
from vak_context.context.history.cards import default_library
from vak_context.context.planner.policy import GiveUp, Rejected, Retry, StepState, decide
from vak_context.context.request.assemble import DEFAULT_STANCE, Tail, prefix_change, render_tail
from vak_context.context.request.messages import ChatRequest, ChatResult, Message, ToolSpec
from vak_context.context.request.surface import Surface, ToolDecl
from vak_context.context.request.toolcalls import (
    ParsedCall,
    bounded,
    ends_inside_call,
    native_calls,
    parse_tool_calls,
)
from vak_context.context.rules.drift import PriorTurn, Verdict
from vak_context.errors import ContextOverflow, RequestTooLarge, VakError
from vak_context.events.payloads import (
    Activity,
    AssistantStep,
    Directive,
    Receipt,
    StepBlock,
    TextBlock,
    ToolUseBlock,
    TurnTail,
    Usage,
)

log = logging.getLogger("vak.loop")

MAX_EXTENSIONS = 2  # continuations of a reply cut inside a call
# Calls run per step; the rest get a short error result. A small model can emit dozens of identical calls in
# one step, and every result (even digested) then rides in each later request of the turn.
MAX_CALLS_PER_STEP = 8


class TurnServices(Protocol):
    """Everything stateful a turn touches, for one session: in-process objects or Ray actors."""

    session: str

    async def append(self, payloads: Sequence[Any]) -> list[str]: ...

    async def assemble(self, profile: CapacityProfile, step: StepRequest) -> Assembled: ...

    async def store_result(self, tool_use_id: str, tool_name: str, body: str, is_error: bool) -> dict[str, Any]: ...

    async def recall(self, args: dict[str, Any], tool_use_id: str) -> dict[str, Any]: ...

    async def present(self, step_id: str) -> list[dict[str, Any]]: ...

    async def close_turn(self, outcome: str) -> str: ...

    async def turn_started(self) -> CapacityProfile | None: ...  # the newest probed profile, if any

    async def turn_finished(self) -> None: ...


@dataclass(frozen=True)
class TurnConfig:
    """How turns are run for one bound model."""

    model: str  # the model name requests carry
    provider: str  # the provider's name, for receipts
    system: str
    surface: Surface
    max_steps: int = 8
    max_tokens: int = 512
    temperature: float | None = 0.0
    timezone: str = "UTC"
    session_key: str | None = None
    endpoint: ModelEndpoint | None = None  # for an assembler that calls the server itself (on Ray)
    stance: str = DEFAULT_STANCE  # the tail's <stance>: the embedder's per-turn guidance


@dataclass
class StepReport:
    """What one step did, for the CLI and the tests."""

    index: int
    fidelity: dict[str, int]
    replanned: bool
    estimated_tokens: int
    budget_tokens: int
    prompt_tokens: int
    cached_tokens: int
    prefix_digest: str
    calls: list[str]
    text: str
    overflows: int = 0


@dataclass
class TurnReport:
    directive_id: str
    answer: str
    outcome: str
    card_id: str
    profile: CapacityProfile
    steps: list[StepReport] = field(default_factory=list)


class TurnLoop:
    """Runs turns for one session and one bound model. ``profile`` is updated by every receipt."""

    def __init__(self, services: TurnServices, provider: Complete, profile: CapacityProfile, config: TurnConfig,
                 *, tools: ToolRegistry | None = None, workspace: Workspace | None = None,
                 engine: EngineTools | None = None, clock: Callable[[], float] = time.time,
                 on_step: Callable[[StepReport], None] | None = None, history: Sequence[PriorTurn] = (),
                 on_text: Callable[[str], None] | None = None) -> None:
        self.services, self.provider, self.profile, self.config = services, provider, profile, config
        # ``workspace=`` is the shorthand for registering the workspace tools over that root.
        registry = tools or ToolRegistry()
        self.tools = registry.merged(*workspace_tools(workspace)) if workspace is not None else registry
        self.engine = engine or engine_tools()
        # The repeated-call rule's read-only set, from the tools' own declarations.
        surface = config.surface
        read_only = frozenset(n for t in (*surface.core, *surface.deferred) if (d := self._decl(n := t.name))
                              and d.read_only)
        self.rules = TurnRules(services, history, read_only=read_only)  # ``history``: earlier turns, oldest first
        self.seeded = bool(history)  # else the first turn reads them from services that can (``prior_turns``)
        self.workspace, self.clock, self.on_step = workspace, clock, on_step
        self.on_text = on_text  # streams each step's text as it arrives (the CLI), when the adapter can
        self.last_prefix: tuple[str, tuple[ToolSpec, ...], str] | None = None  # system, tools, digest
        self.promoted: set[str] = set()  # deferred tools a find_tools call returned this turn
        self.turn_open = False  # the directive is written and its card is not

    async def run(self, directive: str) -> TurnReport:
        probed = await self.services.turn_started()  # a profile the probe wrote since binding is what this turn binds
        if probed is not None and probed.key == self.profile.key and (probed.provenance.probed_at or 0) > (
                self.profile.provenance.probed_at or 0):
            self.profile = probed
        self.turn_open = False
        try:
            return await self._run(directive)
        except asyncio.CancelledError:
            if self.turn_open:  # the card records why the turn has no answer; shielded from the cancel itself
                await asyncio.shield(self._close_cancelled(directive))
            raise
        except Exception as exc:  # any failure mid-turn (a provider's, the ledger's, the caller's own code) is
            if self.turn_open:  # recorded on the turn's card, then raised: every turn ends with a card
                await self._close_failed(directive, exc)
            raise
        finally:
            await self.services.turn_finished()

    async def _close_failed(self, directive: str, exc: Exception) -> None:
        """The turn's card records the failure (a ``turn.failed`` activity names the error), so the session
        stays whole and the next turn starts clean; everything the turn appended before it stays. A failure
        to write that (the ledger itself is what failed) leaves the original error to propagate."""
        try:
            # Provider errors are redacted by their adapter before they are raised: no key reaches this text.
            await self.services.append([Activity(activity="turn.failed", detail={
                "error": type(exc).__name__, "why": str(exc)[:4_000]})])
            self.rules.finish(directive, "", self.clock())
            await self.services.close_turn("failed")
            self.turn_open = False
        except VakError:
            log.warning("turn %s failed (%s) and its close could not be written", directive[:60], type(exc).__name__)

    async def _close_cancelled(self, directive: str) -> None:
        await self.services.append([Activity(activity="turn.cancelled", detail={})])
        self.rules.finish(directive, "", self.clock())
        await self.services.close_turn("cancelled")

    async def _run(self, directive: str) -> TurnReport:
        cfg = self.config
        directive_id = (await self.services.append([Directive(text=directive)]))[0]
        self.turn_open = True
        self.promoted = set()
        # The tail is computed once per turn: the directive message it sits in must not change between steps.
        if not self.seeded and hasattr(self.services, "prior_turns"):
            self.rules.history = await self.services.prior_turns()
        self.seeded = True
        paused = self.rules.begin(directive)
        tail = render_tail(Tail(now=self.clock(), timezone=cfg.timezone, stance=cfg.stance, paused=paused))
        # Recorded, so the closed turn's record carries the tail it was sent with (byte-stable across turns).
        await self.services.append([TurnTail(text=tail)])
        step_request = StepRequest(model=cfg.model, system=cfg.system, tools=cfg.surface.schemas, tail=tail,
                                   max_tokens=cfg.max_tokens, temperature=cfg.temperature,
                                   session_key=cfg.session_key, endpoint=cfg.endpoint,
                                   deferred=tuple(t.spec for t in cfg.surface.deferred))
        steps: list[StepReport] = []
        answer, outcome, prose = "", "degraded", ""
        for index in range(cfg.max_steps):
            try:
                assembled, result, overflows = await self._send(step_request)
            except RequestTooLarge as exc:  # not even the turn at its most compact fits: nothing is sent
                answer, outcome = str(exc), "failed"
                await self.services.append([Activity(activity="turn.request_too_large", detail={"why": str(exc)})])
                break
            await self._note_prefix(assembled.prefix_digest)
            if result is None:
                outcome = "failed"
                answer = "the request was over the model's window twice; the turn has no answer"
                break
            calls = self._calls(result)
            call_ids = [_call_id(directive_id, index, i, result) for i in range(len(calls))]
            step_id = await self._record_step(result, calls, call_ids, assembled)
            report = StepReport(
                index=index, fidelity=assembled.fidelity, replanned=assembled.replanned,
                estimated_tokens=assembled.estimated_tokens, budget_tokens=assembled.budget_tokens,
                prompt_tokens=result.usage.prompt_tokens, cached_tokens=result.usage.cache_read_tokens,
                prefix_digest=assembled.prefix_digest, calls=[c.name or "?" for c in calls], text=result.text,
                overflows=overflows,
            )
            steps.append(report)
            if self.on_step is not None:
                self.on_step(report)
            verdict = (await self.rules.on_reply(result.text) if not calls
                       else await self._run_calls(step_id, calls, call_ids))
            if verdict.lower_horizon:
                await self._lower_horizon(result, assembled)
            if verdict.action in ("answer", "close"):
                answer, outcome = verdict.text, verdict.outcome
                prose = result.text if verdict.action == "answer" and not verdict.tag else ""
                break
        self.rules.finish(directive, prose, self.clock())
        card_id = await self.services.close_turn(outcome)
        self.turn_open = False
        return TurnReport(directive_id, answer, outcome, card_id, self.profile, steps)

    # ------------------------------------------------------------ one model call

    async def _send(self, step: StepRequest) -> tuple[Assembled, ChatResult | None, int]:
        """Assemble and send. An over-length rejection goes to the step policy: the profile it implies is
        recorded and the step retried against it (the assembler plans again: the request no longer fits
        the corrected budget), once; rejected again, the step has no result."""
        state = StepState()
        while True:
            assembled = await self.services.assemble(self.profile, step)
            try:
                stream = getattr(self.provider, "complete_streaming", None) if self.on_text else None
                if stream is not None:
                    result = await stream(assembled.request, self.on_text)
                else:
                    result = await self.provider.complete(assembled.request)
                return assembled, await self._extend(assembled.request, result), state.rejections
            except ContextOverflow as exc:
                decision, state = decide(Rejected(self.profile, exc, request_chars(assembled.request), self.clock()),
                                         state)
                assert isinstance(decision, Retry | GiveUp)  # what the policy answers a rejection with
                self.profile = decision.profile
                await self.services.append([to_record(self.profile)])
                if isinstance(decision, GiveUp):
                    return assembled, None, state.rejections

    async def _extend(self, request: ChatRequest, result: ChatResult) -> ChatResult:
        """A completion cut by max_tokens inside an inline call is continued (the reply so far sent back as
        the start of the assistant's turn), at most MAX_EXTENSIONS times; never failed for being cut. The
        step keeps its own request's figures (prompt, cached, timings): a continuation's prompt also holds
        the reply so far, which is not what the step sent. Output tokens add up."""
        first, text, output = result, result.text, result.usage.output_tokens
        for _ in range(MAX_EXTENSIONS):
            if result.tool_calls or result.stop_reason not in ("length", "max_tokens"):
                break
            so_far = parse_tool_calls(text, self._tool_names())
            # Only a reply cut before its first whole call is continued: one that already holds whole
            # calls runs those (a small model repeating one call until max_tokens must not run on).
            if not ends_inside_call(so_far) or any(c.complete and c.name for c in so_far):
                break
            more = request.model_copy(update={"messages": (*request.messages, Message.assistant(text)),
                                              "max_tokens": 2 * request.max_tokens})
            result = await self.provider.complete(more)
            # llama.cpp returns the prefilled start with the continuation; other servers only the new text.
            text = result.text if result.text.startswith(text) else text + result.text
            output += result.usage.output_tokens
        if result is first:
            return first
        return first.model_copy(update={"text": text, "stop_reason": result.stop_reason,
                                        "usage": first.usage.model_copy(update={"output_tokens": output})})

    def _tool_names(self) -> set[str]:
        return {t.name for t in self.config.surface.core} | {t.name for t in self.config.surface.deferred}

    def _calls(self, result: ChatResult) -> list[ParsedCall]:
        """The step's calls: native ones when the provider parsed any, else the ones inline in the text;
        a call repeated with the same arguments in one step runs once (``distinct_calls``)."""
        if result.tool_calls:
            calls = list(native_calls((tc.name, tc.arguments) for tc in result.tool_calls))
        else:
            calls = [c for c in parse_tool_calls(result.text, self._tool_names()) if c.name and c.complete]
        return distinct_calls([bounded(c) for c in calls])

    async def _record_step(self, result: ChatResult, calls: Sequence[ParsedCall], call_ids: Sequence[str],
                           assembled: Assembled) -> str:
        blocks: list[StepBlock] = []
        inline = bool(calls) and not result.tool_calls
        if result.text.strip() and not inline:
            blocks.append(TextBlock(text=result.text))
        for call_id, call in zip(call_ids, calls, strict=True):
            blocks.append(ToolUseBlock(id=call_id, name=call.name or "", input=call.arguments or {}))
        if not blocks:
            blocks.append(TextBlock(text=result.text))
        step = AssistantStep(blocks=tuple(blocks), model=self.config.model, provider=self.config.provider,
                             stop_reason=result.stop_reason)
        step_id = (await self.services.append([step]))[0]
        receipt = Receipt(provider=self.config.provider, model=self.config.model, usage=result.usage,
                          latency_ms=max(0.0, result.latency_ms), first_token_ms=result.first_token_ms,
                          prefix_digest=assembled.prefix_digest, request_chars=request_chars(assembled.request),
                          step_id=step_id)
        self.profile = apply_feedback(self.profile, TurnFeedback(
            usage=result.usage, chars_sent=request_chars(assembled.request), prefill_ms=_prefill_ms(result),
        ), now=self.clock())
        extra: list[Any] = []
        if inline:  # the ledger keeps the completion as the model wrote it
            extra.append(Activity(activity="step.inline_calls", detail={
                "step_id": step_id, "text": result.text, "wrappings": [c.wrapping for c in calls]}))
        await self.services.append([receipt, to_record(self.profile), *extra])
        return step_id

    async def _lower_horizon(self, result: ChatResult, assembled: Assembled) -> None:
        """Model drift is a failed instruction: the feedback rules lower the horizon's confidence when the
        request was near it (a request well inside the horizon leaves it alone)."""
        size = result.usage.prompt_tokens or assembled.estimated_tokens
        self.profile = apply_feedback(self.profile, TurnFeedback(
            usage=Usage(), chars_sent=0, request_tokens=size, followed_instruction=False), now=self.clock())
        await self.services.append([to_record(self.profile)])

    async def _note_prefix(self, digest: str) -> None:
        """A prefix that differs from the previous step's is a cache break: an activity says what changed."""
        cfg = self.config
        current = (cfg.system, cfg.surface.schemas, digest)
        if self.last_prefix is not None and self.last_prefix[2] != digest:
            what = prefix_change(self.last_prefix[:2], current[:2])
            await self.services.append([Activity(activity="cache.break", detail={
                "before": self.last_prefix[2], "after": digest, "changed": what})])
        self.last_prefix = current

    # ------------------------------------------------------------ tool calls

    async def _run_calls(self, step_id: str, calls: Sequence[ParsedCall], ids: Sequence[str]) -> Verdict:
        """World tools run concurrently; results are stored in call order; card calls go through present
        (those the rules intercept are answered with their error instead, as are read-only calls that
        repeat an earlier step's: those are not run)."""
        cards = [(i, ids[i], c.name or "", c.arguments or {}) for i, c in enumerate(calls) if _is_card(c.name or "")]
        intercepted, verdict = await self.rules.gate(step_id, cards)
        world = [(i, ids[i], c.name or "", c.arguments) for i, c in enumerate(calls) if not _is_card(c.name or "")]
        repeats, repeated = await self.rules.gate_repeats(step_id, world)
        bodies = await asyncio.gather(*(_answered() if i in repeats else self._execute(c) if i < MAX_CALLS_PER_STEP
                                        else _not_run(c) for i, c in enumerate(calls)))
        await self._note_misread(step_id, calls)
        cards_done, acked, seen = bool(intercepted), [], []  # type: bool, list[tuple[str, Any]], list[tuple[bool, bool, str]]
        ran: list[tuple[str, dict[str, Any] | None, str, str]] = []  # world calls run, for the repeat rule
        for i, (tool_use_id, call, outcome) in enumerate(zip(ids, calls, bodies, strict=True)):
            name = call.name or ""
            if i in repeats:
                continue  # answered by the rule
            engine = self.engine.get(name)
            if engine is not None and engine.in_order and not outcome[1]:  # it stores its own result
                body, _ = await engine.answer(self._engine_call(call, tool_use_id))
                ran.append((name, call.arguments, tool_use_id, body))
            elif _is_card(name):
                if not cards_done:  # present writes every card call of the step, in call order
                    acks = await self.services.present(step_id)
                    args = {t: a for _, t, _, a in cards}
                    acked = [(pid, args.get(str(r.get("tool_use_id")), {})) for r in acks
                             if (pid := ack_id(r)) is not None]
                    cards_done = True
            else:
                body, is_error = outcome
                await self.services.store_result(tool_use_id, name, body, is_error)
                decl = self._decl(name)
                seen.append((bool(decl and decl.observes), is_error, body))
                if i < MAX_CALLS_PER_STEP:
                    ran.append((name, call.arguments, tool_use_id, body))
        self.rules.ran(ran)
        for closing in (verdict, repeated):
            if closing.action == "close":
                return closing
        return await self.rules.after_calls(seen, acked, only_cards=len(cards) == len(calls))

    async def _note_misread(self, step_id: str, calls: Sequence[ParsedCall]) -> None:
        deferred = {t.name for t in self.config.surface.deferred}
        misread = [c.name for c in calls if c.name in deferred and c.name not in self.promoted]
        if misread:  # every admitted tool is callable; one the surface did not predict is the measured misread
            await self.services.append([Activity(activity="surface.misread", detail={
                "step_id": step_id, "tools": sorted(set(misread))})])

    def _decl(self, name: str) -> ToolDecl | None:
        """A tool's declaration: its registration's (what runs it knows its flags), else the engine's, else
        the surface's."""
        registered = self.tools.get(name)
        if registered is not None:
            return registered.decl
        engine = self.engine.get(name)
        return engine.decl if engine is not None else self.config.surface.declared(name)

    def _engine_call(self, call: ParsedCall, tool_use_id: str = "") -> EngineCall:
        return EngineCall(arguments=call.arguments or {}, tool_use_id=tool_use_id, services=self.services,
                          surface=self.config.surface, registry=self.tools, promoted=self.promoted)

    async def _execute(self, call: ParsedCall) -> tuple[str, bool]:
        """(body, is_error) of a world tool, through the registry or the engine; an in-order engine tool
        (recall) and card calls are answered later, by the services."""
        name = call.name or ""
        engine = self.engine.get(name)
        if (engine is not None and engine.in_order) or _is_card(name):
            return "", False
        if call.arguments is None:
            return f"{name}: the arguments must be a JSON object matching the tool's schema", True
        if engine is not None:
            return await engine.answer(self._engine_call(call))
        if self.config.surface.declared(name) is None:
            return f"no tool named {name!r}; the tools are listed in the request and under 'More tools'", True
        if name in self.tools:
            return await self.tools.call(name, call.arguments)
        return f"{name} is declared but this runtime has no executor for it; register it in the ToolRegistry", True


async def _answered() -> tuple[str, bool]:
    """A call the turn rules already answered with its error result: nothing to run."""
    return "", True


async def _not_run(call: ParsedCall) -> tuple[str, bool]:
    return (f"{call.name}: not run: at most {MAX_CALLS_PER_STEP} calls run in one step; "
            "make the calls you still need in the next step", True)


def _is_card(name: str) -> bool:
    return default_library().is_card_tool(name)


def _call_id(directive_id: str, step: int, i: int, result: ChatResult) -> str:
    """A tool_use id: the provider's for native calls, else derived from the turn, step and position."""
    if result.tool_calls and i < len(result.tool_calls):
        return result.tool_calls[i].id
    return f"call_{directive_id[:8]}_{step}_{i}"


def _prefill_ms(result: ChatResult) -> float | None:
    value = result.timings.get("prompt_ms") if result.timings else None
    return float(value) if isinstance(value, int | float) else result.first_token_ms


def distinct_calls(calls: Sequence[ParsedCall]) -> list[ParsedCall]:
    """The calls in order, each (name, arguments) once. A step that repeats one call (a small model looping
    on ``list_dir(".")`` 85 times until max_tokens, seen in the main job) would get the same result each time
    and fill the turn with copies; the ledger keeps the completion as written (``step.inline_calls``)."""
    seen: set[str] = set()
    out: list[ParsedCall] = []
    for call in calls:
        key = json.dumps([call.name, call.arguments], sort_keys=True, default=str)
        if key not in seen:
            seen.add(key)
            out.append(call)
    return out
