"""What a session's turns share (the turn's own steps are :mod:`vak_context.agent.turn`'s :class:`OpenTurn`):
the services a turn touches, how turns are run for one bound model, what a step and a turn report, and
:class:`TurnCore`, the state that lasts across turns (the profile every receipt updates, the turn rules and
their history, the tools, the last request's prefix) with the step's record: the assistant step, its
receipt and the profile it updates, a cache break.

Split from :mod:`vak_context.agent.turn` (which re-exports every name here) to keep each module one concept.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from vak_context.agent.endpoint import EndpointSpec
from vak_context.agent.steps import Assembled, StepRequest
from vak_context.agent.tools import EngineCall, EngineTools, ToolRegistry, engine_tools, workspace_tools
from vak_context.agent.turnrules import TurnRules
from vak_context.agent.workspace import Workspace
from vak_context.context.capacity.profile import (
    CapacityProfile,
    TurnFeedback,
    apply_feedback,
    request_chars,
    to_record,
)
from vak_context.context.history.cards import default_library
from vak_context.context.request.assemble import DEFAULT_STANCE, prefix_change
from vak_context.context.request.messages import ChatResult, ToolSpec
from vak_context.context.request.surface import Surface, ToolDecl
from vak_context.context.request.toolcalls import ParsedCall, bounded, native_calls, parse_tool_calls
from vak_context.context.rules.drift import PriorTurn
from vak_context.context.stated.items import StatedItem
from vak_context.events.payloads import (
    Activity,
    AssistantStep,
    Receipt,
    StepBlock,
    TextBlock,
    ToolUseBlock,
    Usage,
)

log = logging.getLogger("vak.loop")

# Calls run per step; the rest get a short error result. A small model can emit dozens of identical calls in
# one step, and every result (even digested) then rides in each later request of the turn.
MAX_CALLS_PER_STEP = 8

Outcome = tuple[str, bool]  # (body, is_error) of one call
Category = Literal["rule", "constraint", "goal", "fact", "preference"]


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

    # At turn ``after``'s close: the packet summary the next request will need, written now (the entries).
    async def plan_ahead(self, profile: CapacityProfile, step: StepRequest, after: str, directive: str) -> list[str]: ...


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
    endpoint: EndpointSpec | None = None  # for an assembler that calls the server itself (on Ray)
    stance: str = DEFAULT_STANCE  # the tail's <stance>: the embedder's per-turn guidance
    # The repeated-call rule's second strike: "close" ends the turn quoting the results; "redo" first asks
    # for the answer in one more step with calls masked (docs/DRIFT.md).
    repeat_rule: Literal["close", "redo"] = "close"
    # The model writes its calls as text (its measured or declared protocol: toolcalls.calls_in_text): only
    # then is a reply's text parsed for calls; otherwise the text is the answer, whole.
    text_calls: bool = False


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


@dataclass(frozen=True)
class WorldCall:
    """A call of a world tool (the embedder's or the workspace's), for the driver to run. ``position`` is
    its place in the model's call order, where its result is stored."""

    position: int
    tool_use_id: str
    name: str
    arguments: dict[str, Any]


class TurnCore:
    """A session's turns for one bound model: the state that lasts across turns. ``profile`` is updated by
    every receipt; :meth:`open_turn` starts the next turn."""

    def __init__(self, services: TurnServices, profile: CapacityProfile, config: TurnConfig, *,
                 tools: ToolRegistry | None = None, workspace: Workspace | None = None,
                 engine: EngineTools | None = None, clock: Callable[[], float] = time.time,
                 history: Sequence[PriorTurn] = ()) -> None:
        self.services, self.profile, self.config = services, profile, config
        # ``workspace=`` is the shorthand for registering the workspace tools over that root.
        registry = tools or ToolRegistry()
        self.tools = registry.merged(*workspace_tools(workspace)) if workspace is not None else registry
        self.engine = engine or engine_tools()
        # The repeated-call rule's read-only set, from the tools' own declarations.
        surface = config.surface
        read_only = frozenset(n for t in (*surface.core, *surface.deferred) if (d := self.decl(n := t.name))
                              and d.read_only)
        self.rules = TurnRules(services, history, read_only=read_only, repeat_rule=config.repeat_rule)  # ``history``: earlier turns, oldest first
        self.seeded = bool(history)  # else the first turn reads them from services that can (``prior_turns``)
        self.workspace, self.clock = workspace, clock
        self.last_prefix: tuple[str, tuple[ToolSpec, ...], str] | None = None  # system, tools, digest
        self.promoted: set[str] = set()  # deferred tools a find_tools call returned this turn
        self.turn_id = self.step_id = ""  # the open turn's directive and its last step (the engine's tools)

    # ------------------------------------------------------------ what the steps share

    async def seed_history(self) -> None:
        """At a turn's start (begun or taken up): nothing promoted yet, and the session's earlier turns read
        once, from services that can (``prior_turns``)."""
        self.promoted = set()
        if not self.seeded and hasattr(self.services, "prior_turns"):
            self.rules.history = await self.services.prior_turns()
        self.seeded = True

    def step_request(self, tail: str) -> StepRequest:
        """The request a turn's steps are planned from: the bound model's, with the turn's tail."""
        cfg = self.config
        return StepRequest(model=cfg.model, system=cfg.system, tools=cfg.surface.schemas, tail=tail,
                           max_tokens=cfg.max_tokens, temperature=cfg.temperature, session_key=cfg.session_key,
                           endpoint=cfg.endpoint, deferred=tuple(t.spec for t in cfg.surface.deferred))

    def tool_names(self) -> set[str]:
        return {t.name for t in self.config.surface.core} | {t.name for t in self.config.surface.deferred}

    def calls_of(self, result: ChatResult) -> list[ParsedCall]:
        """The step's calls: native ones when the provider parsed any, else, for a model that writes its
        calls as text (``TurnConfig.text_calls``), the ones inline in the text; a call repeated with the same
        arguments in one step runs once (``distinct_calls``)."""
        if result.tool_calls:
            calls = list(native_calls((tc.name, tc.arguments) for tc in result.tool_calls))
        elif self.config.text_calls:
            calls = [c for c in parse_tool_calls(result.text, self.tool_names()) if c.name and c.complete]
        else:
            calls = []
        return distinct_calls([bounded(c) for c in calls])

    def offered(self, name: str | None) -> bool:
        """Whether a call of ``name`` names a tool the model was offered or the engine answers (a card tool
        among them); a call with no name read is malformed, not unoffered."""
        return name is None or self.decl(name) is not None or default_library().is_card_tool(name)

    def decl(self, name: str) -> ToolDecl | None:
        """A tool's declaration: its registration's (what runs it knows its flags), else the engine's, else
        the surface's."""
        registered = self.tools.get(name)
        if registered is not None:
            return registered.decl
        engine = self.engine.get(name)
        return engine.decl if engine is not None else self.config.surface.declared(name)

    def engine_call(self, call: ParsedCall, tool_use_id: str = "") -> EngineCall:
        return EngineCall(arguments=call.arguments or {}, tool_use_id=tool_use_id, services=self.services,
                          surface=self.config.surface, registry=self.tools, promoted=self.promoted,
                          turn_id=self.turn_id, step_id=self.step_id)

    async def record_step(self, result: ChatResult, calls: Sequence[ParsedCall], call_ids: Sequence[str],
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
        chars = request_chars(assembled.request)
        profile = apply_feedback(self.profile, TurnFeedback(
            usage=result.usage, chars_sent=chars, prefill_ms=_prefill_ms(result)), now=self.clock())

        def after(ids: list[str]) -> list[Any]:
            """The step's receipt, the profile it measured and the inline calls' record, naming the step."""
            receipt = Receipt(provider=self.config.provider, model=self.config.model, usage=result.usage,
                              latency_ms=max(0.0, result.latency_ms), first_token_ms=result.first_token_ms,
                              prefix_digest=assembled.prefix_digest, request_chars=chars, step_id=ids[0])
            extra: list[Any] = []
            if inline:  # the ledger keeps the completion as the model wrote it
                extra.append(Activity(activity="step.inline_calls", detail={
                    "step_id": ids[0], "text": result.text, "wrappings": [c.wrapping for c in calls]}))
            return [receipt, to_record(profile), *extra]

        linked = getattr(self.services, "append_linked", None)  # one append where the services chain it
        if linked is not None:
            step_id = (await linked([step], after))[0]
        else:
            step_id = (await self.services.append([step]))[0]
            await self.services.append(after([step_id]))
        self.profile = profile  # recorded: the turn's later steps plan with it
        return step_id

    async def lower_horizon(self, result: ChatResult, assembled: Assembled) -> None:
        """Model drift is a failed instruction: the feedback rules lower the horizon's confidence when the
        request was near it (a request well inside the horizon leaves it alone)."""
        size = result.usage.prompt_tokens or assembled.estimated_tokens
        self.profile = apply_feedback(self.profile, TurnFeedback(
            usage=Usage(), chars_sent=0, request_tokens=size, followed_instruction=False), now=self.clock())
        await self.services.append([to_record(self.profile)])

    async def note_prefix(self, digest: str) -> None:
        """A prefix that differs from the previous step's is a cache break: an activity says what changed."""
        cfg = self.config
        current = (cfg.system, cfg.surface.schemas, digest)
        if self.last_prefix is not None and self.last_prefix[2] != digest:
            what = prefix_change(self.last_prefix[:2], current[:2])
            await self.services.append([Activity(activity="cache.break", detail={
                "before": self.last_prefix[2], "after": digest, "changed": what})])
        self.last_prefix = current


async def stated_of(services: Any) -> tuple[StatedItem, ...]:
    """The stated items in force, from services that keep them (an embedder's own services may not)."""
    stated = getattr(services, "stated", None)
    return tuple(await stated()) if stated is not None else ()


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
