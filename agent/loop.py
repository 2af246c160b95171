"""The engine's loop (spec §6, §10): one function runs a turn end to end, driving :mod:`vak_context.agent.turn`.

``TurnLoop.run(directive)``:

1. ``turn_started`` (a running background probe is cancelled), append the directive;
2. per step: the assembler plans (at the turn's first step; the plan is then frozen) and projects the
   request; the provider sends it (an over-length rejection corrects the profile and retries once);
   the assistant step and its receipt are appended, the receipt goes through ``apply_feedback`` and
   the updated profile is written;
3. the step's tool calls run (concurrently; results appended in call order, each whole result as an
   evidence body and what the request carries as its tool result); a step with no call ends the turn.
   World tools run through the :class:`~vak_context.agent.tools.ToolRegistry` (``tools=``; ``workspace=``
   registers the workspace tools), the engine's own (recall, find_tools, session_search) through
   :func:`~vak_context.agent.tools.engine_tools`. A tool that raises gives the model an error result
   naming the exception, and the turn goes on;
4. the TurnCard closes the turn; ``turn_finished`` queues the session's search index catch-up and lets the
   probe run in the idle time. An exception mid-turn
   (a provider's 4xx/5xx or timeout after its retries, the server gone, an actor or the ledger, or a plain
   exception from the caller's own code such as an ``on_step`` callback) closes the turn ``failed`` with a
   ``turn.failed`` activity naming it, then propagates.

The turn rules (:mod:`vak_context.agent.turnrules` over :mod:`vak_context.context.rules.drift`) run at three points: card calls are
gated before they run (freshness, topic mismatch), a step's results and acks are folded in after (an
observation, repeated cards), and a step with no call is judged (empty step, model drift, freshness of
a prose answer): it is the answer, gets one redo nudge, or the turn closes with a system-authored outcome.

The turn itself (every step above, the rules, the policy and the retry) is :class:`~vak_context.agent.turn.OpenTurn`;
this driver adds only what talks to the model and runs the world tools: the provider (streamed when
``on_text`` is set), the continuation of a reply cut inside an inline call, the registry's tools run
concurrently. The caller's loop (:mod:`vak_context.engine.caller`) drives the same turn with the embedder's
client and tools.

The same code runs in-process or on Ray: everything stateful goes through :class:`TurnServices`
(``vak_context.actors.local_services.InProcessServices`` in this process, ``vak_context.actors.turn_services.RayServices`` through the actors). Tool calls are
read by the one parser (``vak_context.context.request.toolcalls``) whether they came back native or inline in the text.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

from vak_context.agent.tools import EngineTools, ToolRegistry
from vak_context.agent.turn import (
    MAX_CALLS_PER_STEP,
    OpenTurn,
    StepReport,
    TurnConfig,
    TurnCore,
    TurnReport,
    TurnServices,
    WorldCall,
    distinct_calls,
)
from vak_context.agent.workspace import Workspace
from vak_context.context.capacity.profile import CapacityProfile
from vak_context.context.request.messages import ChatRequest, ChatResult, Message
from vak_context.context.request.toolcalls import ends_inside_call, parse_tool_calls
from vak_context.context.rules.drift import PriorTurn
from vak_context.errors import ContextOverflow
from vak_context.providers.base import Complete

# re-exported: the loop's names, defined with the turn they describe
__all__ = ["MAX_CALLS_PER_STEP", "MAX_EXTENSIONS", "StepReport", "TurnConfig", "TurnLoop", "TurnReport",
           "TurnServices", "distinct_calls"]

MAX_EXTENSIONS = 2  # continuations of a reply cut inside a call


class TurnLoop(TurnCore):
    """Runs turns for one session and one bound model. ``profile`` is updated by every receipt."""

    def __init__(self, services: TurnServices, provider: Complete, profile: CapacityProfile, config: TurnConfig,
                 *, tools: ToolRegistry | None = None, workspace: Workspace | None = None,
                 engine: EngineTools | None = None, clock: Callable[[], float] = time.time,
                 on_step: Callable[[StepReport], None] | None = None, history: Sequence[PriorTurn] = (),
                 on_text: Callable[[str], None] | None = None) -> None:
        super().__init__(services, profile, config, tools=tools, workspace=workspace, engine=engine, clock=clock,
                         history=history)
        self.provider, self.on_step = provider, on_step
        self.on_text = on_text  # streams each step's text as it arrives (the CLI), when the adapter can

    def open_turn(self, directive: str, *, caller: bool = False) -> OpenTurn:
        """The next turn (nothing is written until its ``begin``); ``caller``: the caller's loop drives it."""
        return OpenTurn(self, directive, caller=caller)

    async def run(self, directive: str) -> TurnReport:
        turn = self.open_turn(directive)
        # Services that write behind (in-process: ``InProcessServices.hold``) make one durable commit per
        # model call: before each later call of the turn (``_drive``) and at the card (``close_turn``), before
        # the turn is acknowledged. Others (on Ray) commit each append as it is made.
        behind = getattr(self.services, "hold", None) is not None
        if behind:
            await self.services.hold()  # type: ignore[attr-defined]
        await turn.started()
        try:
            return await self._drive(turn)
        except asyncio.CancelledError:
            if turn.open:  # the card records why the turn has no answer; shielded from the cancel itself
                await asyncio.shield(turn.close_cancelled())
            raise
        except Exception as exc:  # any failure mid-turn (a provider's, the ledger's, the caller's own code) is
            if turn.open:  # recorded on the turn's card, then raised: every turn ends with a card
                await turn.close_failed(exc)
            raise
        finally:
            try:
                await turn.finished()
            finally:
                if behind:
                    await self.services.release()  # type: ignore[attr-defined]

    async def _drive(self, turn: OpenTurn) -> TurnReport:
        await turn.begin()
        commit = getattr(self.services, "commit", None)
        called = False
        while not turn.done:
            assembled = await turn.request()
            if assembled is None:
                break
            # What the last call led to is made durable while the next one runs (one fsync, off the step's path).
            syncing = asyncio.ensure_future(commit()) if called and commit is not None else None
            called = True
            try:
                result = await self._call(assembled.request, syncing)
            except ContextOverflow as exc:  # the policy plans again once, or the turn closes failed
                await turn.rejected(exc)
                continue
            report = await turn.replied(result)
            if self.on_step is not None:
                self.on_step(report)
            world = await turn.judge()
            if turn.calling:
                engine, ran = await asyncio.gather(turn.answer_engine(),
                                                   asyncio.gather(*(self._run_world(c) for c in world)))
                await turn.take_results({**engine, **{c.position: r for c, r in zip(world, ran, strict=True)}})
        assert turn.report is not None
        return turn.report

    # ------------------------------------------------------------ one model call

    async def _call(self, request: ChatRequest, syncing: asyncio.Future[None] | None) -> ChatResult:
        """The model call, with the turn's commit (``syncing``) running beside it: durable before the reply is
        recorded, and awaited however the call ends."""
        try:
            return await self._complete(request)
        finally:
            if syncing is not None:
                await syncing

    async def _complete(self, request: ChatRequest) -> ChatResult:
        stream = getattr(self.provider, "complete_streaming", None) if self.on_text else None
        if stream is not None:
            result = await stream(request, self.on_text)
        else:
            result = await self.provider.complete(request)
        return await self._extend(request, result)

    async def _extend(self, request: ChatRequest, result: ChatResult) -> ChatResult:
        """A completion cut by max_tokens inside an inline call is continued (the reply so far sent back as
        the start of the assistant's turn), at most MAX_EXTENSIONS times; never failed for being cut. The
        step keeps its own request's figures (prompt, cached, timings): a continuation's prompt also holds
        the reply so far, which is not what the step sent. Output tokens add up."""
        first, text, output = result, result.text, result.usage.output_tokens
        for _ in range(MAX_EXTENSIONS):
            if result.tool_calls or result.stop_reason not in ("length", "max_tokens") or not self.config.text_calls:
                break
            so_far = parse_tool_calls(text, self.tool_names())
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

    # ------------------------------------------------------------ world tools

    async def _run_world(self, call: WorldCall) -> tuple[str, bool]:
        """(body, is_error) of a world tool, through the registry (its own failures are error results)."""
        if call.name in self.tools:
            return await self.tools.call(call.name, call.arguments)
        return (f"{call.name} is declared but this runtime has no executor for it; register it in the "
                "ToolRegistry", True)
