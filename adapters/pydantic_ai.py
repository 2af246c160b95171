"""pydantic-ai: a history processor that sends the engine's projection instead of the agent's messages,
and the engine's tools (``recall``, ``find_tools``, ``session_search``) offered to the agent (the ``[pydantic-ai]`` extra)::

    vak = VakHistory(engine, "support-1", model="openai-compat:gpt-4o-mini", window=32_000)
    agent = Agent(model, capabilities=[vak.capability()], toolsets=[vak.toolset()])
    result = await agent.run("Find the open invoices of ACME")
    await vak.settle(result.all_messages())

What is recorded, from the messages new since the processor's last output: each ``UserPromptPart`` is a
directive (it begins a turn); each ``ModelResponse`` is a step (its ``TextPart`` text, its ``ToolCallPart``
calls with their ids, its usage); each ``ToolReturnPart`` is the evidence of its call, and a
``RetryPromptPart`` naming a call is that call's error result. ``SystemPromptPart`` is not recorded: the
engine's system prompt (its identity, the stable prefix) replaces it; the agent's ``instructions`` still go
out (they ride the last request). Output-validation retries that name no call are not recorded.

Compromises the framework's shape forces: a history processor runs *before* each model call and never
sees the reply until the next call, so the last reply of a run reaches the ledger (and the turn its card)
at the next run's first call or at :meth:`VakHistory.settle`; the processor's output becomes the agent's
history (pydantic-ai writes it back), so ``result.all_messages()`` is the projection plus the run's last
reply; the tools sent are the agent's (a processor cannot change them), so the engine's deferred tool
surface is not used, and ``recall``/``find_tools``/``session_search`` are ordinary tools of the agent whose own run returns a
placeholder: the engine answered the call inside the turn, and the next request carries its answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from vak_context.extras import require_extra

require_extra("pydantic-ai", "vak_context.adapters.pydantic_ai")

from pydantic_ai import RunContext, Tool  # noqa: E402
from pydantic_ai.capabilities import ProcessHistory  # noqa: E402
from pydantic_ai.messages import (  # noqa: E402
    ModelMessage,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    ModelResponsePart,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.toolsets import FunctionToolset  # noqa: E402

from vak_context.adapters.bridge import (  # noqa: E402
    ANSWERED_INSIDE,
    Bridge,
    Event,
    FrameworkCall,
    Projection,
    Replied,
    Returned,
    Said,
    declarations,
    text_of,
    tool_names,
)
from vak_context.engine.api import Engine, Session, engine_tool_specs  # noqa: E402
from vak_context.engine.results import TurnResult  # noqa: E402
from vak_context.errors import AppendOnlyHistory  # noqa: E402


class VakHistory:
    """The engine behind one pydantic-ai agent's conversation: ``history`` is its history processor,
    :meth:`toolset` the engine's tools. The vak session ``name`` is bound at the first model call, with the
    agent's tools (the engine judges calls of tools it knows); ``session_options`` go to
    :meth:`vak_context.Engine.session` (``window=``, ``stance=``, ``rules=``: the turn rules observe by
    default here, docs/DRIFT.md, ...)."""

    def __init__(self, engine: Engine, name: str, *, model: str, **session_options: Any) -> None:
        self.engine, self.name, self.model = engine, name, model
        self._options = session_options
        self._bridge: Bridge | None = None
        self._seen: list[ModelMessage] = []  # the agent's history as the engine last saw it
        self._engine_tools = [t["name"] for t in engine_tool_specs()]

    @property
    def session(self) -> Session | None:
        """The vak session, once the first model call bound it."""
        return self._bridge.session if self._bridge else None

    @property
    def results(self) -> list[TurnResult]:
        """The closed turns' results, oldest first."""
        return list(self._bridge.results) if self._bridge else []

    def capability(self) -> ProcessHistory[Any]:
        """The history processor as the agent's capability (pydantic-ai 2 takes processors this way)."""
        return ProcessHistory(self.history)

    def toolset(self) -> FunctionToolset[Any]:
        """``recall``, ``find_tools`` and ``session_search`` as the agent's tools (their run returns a placeholder: the engine
        answers them inside the turn and its next request carries the answer)."""

        async def answered_inside(**_: Any) -> str:
            return ANSWERED_INSIDE

        return FunctionToolset([Tool.from_schema(answered_inside, name=t["name"], description=t["description"],
                                                 json_schema=t["parameters"]) for t in engine_tool_specs()])

    async def history(self, ctx: RunContext[Any], messages: list[ModelMessage]) -> list[ModelMessage]:
        """The history processor: record what is new in ``messages``, return the engine's projection."""
        bridge = await self._bound(ctx)
        await bridge.feed(self._new(messages))
        projected = _messages_of(await bridge.project(), _instructions(messages))
        self._seen = list(projected)
        return projected

    async def settle(self, messages: Sequence[ModelMessage]) -> TurnResult | None:
        """Record the run's last reply (``result.all_messages()``) and close its turn: the result, with its
        card. Optional: the next run's first model call does the same."""
        if self._bridge is None:
            return None
        await self._bridge.feed(self._new(list(messages)))
        self._seen = list(messages)
        return await self._bridge.end_turn()

    async def close(self) -> None:
        """Close the open turn and the vak session."""
        if self._bridge is not None:
            await self._bridge.end_turn()
            await self._bridge.session.close()

    async def _bound(self, ctx: RunContext[Any]) -> Bridge:
        if self._bridge is None:
            manager = ctx.tool_manager
            defs = manager.tool_defs if manager is not None and manager.tools is not None else []
            own = [(d.name, d.description or "", d.parameters_json_schema) for d in defs
                   if d.name not in self._engine_tools]
            session = self.engine.session(self.name, model=self.model, tools=declarations(own), **self._options)
            self._bridge = Bridge(session)
        return self._bridge

    def _new(self, messages: list[ModelMessage]) -> list[Event]:
        """The events of what ``messages`` adds to what the engine saw; a fresh run without history (no
        model reply in it) adds all of it. Anything else rewrote the history: refused."""
        seen = self._seen
        if messages[:len(seen)] == seen:
            return _events_of(messages[len(seen):])
        if not any(isinstance(m, ModelResponse) for m in messages):
            return _events_of(messages)
        raise AppendOnlyHistory("the agent's message history differs from what the engine recorded (an "
                                "earlier message was edited or dropped); pass result.all_messages() of the "
                                "last run, or no history")


def _events_of(messages: Sequence[ModelMessage]) -> list[Event]:
    events: list[Event] = []
    for message in messages:
        if isinstance(message, ModelResponse):
            text = "".join(p.content for p in message.parts if isinstance(p, TextPart))
            calls = tuple(FrameworkCall(p.tool_call_id, p.tool_name, p.args_as_dict())
                          for p in message.parts if isinstance(p, ToolCallPart))
            usage = message.usage
            events.append(Replied(text, calls, usage.input_tokens or 0, usage.output_tokens or 0))
            continue
        for part in message.parts:
            if isinstance(part, UserPromptPart):
                content = part.content
                text = content if isinstance(content, str) else "\n".join(c for c in content if isinstance(c, str))
                if text.strip():
                    events.append(Said(text))
            elif isinstance(part, ToolReturnPart):
                events.append(Returned(part.tool_call_id, part.model_response_str()))
            elif isinstance(part, RetryPromptPart) and part.tool_name is not None:
                events.append(Returned(part.tool_call_id, part.model_response(), is_error=True))
    return events


def _messages_of(projection: Projection, instructions: str | None) -> list[ModelMessage]:
    """The projection's chat messages as pydantic-ai messages: system, user and tool messages gathered into
    requests, each assistant message a response."""
    names = tool_names(projection.messages)
    out: list[ModelMessage] = []
    parts: list[ModelRequestPart] = []
    for m in projection.messages:
        role, text = m.get("role"), text_of(m.get("content"))
        if role == "assistant":
            if parts:
                out.append(ModelRequest(parts=parts))
                parts = []
            reply: list[ModelResponsePart] = [TextPart(text)] if text else []
            reply += [ToolCallPart(c["function"]["name"], c["function"].get("arguments") or "{}", tool_call_id=c["id"])
                      for c in m.get("tool_calls") or ()]
            out.append(ModelResponse(parts=reply, model_name=projection.request.model))
        elif role == "tool":
            call_id = str(m.get("tool_call_id", ""))
            parts.append(ToolReturnPart(names.get(call_id, ""), text, tool_call_id=call_id))
        elif role == "system":
            parts.append(SystemPromptPart(text))
        else:
            parts.append(UserPromptPart(text))
    out.append(ModelRequest(parts=parts, instructions=instructions))
    return out


def _instructions(messages: Sequence[ModelMessage]) -> str | None:
    """The agent's instructions for this call (pydantic-ai puts them on the newest request)."""
    for message in reversed(messages):
        if isinstance(message, ModelRequest):
            return message.instructions
    return None
