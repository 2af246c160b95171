"""LangChain v1 agents: an agent middleware that records the conversation and sends the engine's projection
instead of the agent's messages, with the engine's tools (``recall``, ``find_tools``, ``session_search``) registered by the
middleware (the ``[langchain]`` extra)::

    vak = VakMiddleware(engine, "support-1", model="openai:gpt-4o-mini", window=128_000)
    agent = create_agent(model, tools=[search], middleware=[vak])
    state = await agent.ainvoke({"messages": [HumanMessage("Find the open invoices of ACME")]})

What is recorded, around each model call (``awrap_model_call``), from the agent's messages new since the
engine last saw them: a ``HumanMessage`` is a directive (it begins a turn); a ``ToolMessage`` is the
evidence of its call (``status="error"`` an error result); the model's reply, an ``AIMessage``, is a step
(text, ``tool_calls`` with their ids, ``usage_metadata``), recorded as soon as the model returns it (a
middleware wraps the call, so it sees the reply). A reply without tool calls ends the agent's run, and so
the engine's turn: its result and card are written then. ``SystemMessage``s are not recorded: the engine's
system prompt (the binding's ``identity=``) replaces the agent's ``system_prompt``. A model call the agent
asks for after the engine closed the turn (its rules ended it) raises
:class:`~vak_context.errors.TurnOver`, the turn's result recorded first.

The model gets the projection's messages, and of the agent's tools those the projection declares (the
engine's tool surface, by name; a tool the agent does not have cannot be sent). ``recall``,
``find_tools`` and ``session_search`` are the middleware's tools: the engine answers their calls inside the turn, their own run
returns a placeholder, and the next request carries the engine's answer. Async only (``ainvoke``/
``astream``): the engine's caller's loop is async, and a sync ``invoke`` raises LangChain's own error for a
middleware without ``wrap_model_call``.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from vak_context.extras import require_extra

require_extra("langchain", "vak_context.adapters.langchain")

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse  # noqa: E402
from langchain_core.messages import (  # noqa: E402
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.tools import BaseTool, StructuredTool  # noqa: E402
from langchain_core.utils.function_calling import convert_to_openai_tool  # noqa: E402

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
from vak_context.errors import AppendOnlyHistory, TurnOver  # noqa: E402

Handler = Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]]


class VakMiddleware(AgentMiddleware[Any, Any, Any]):
    """The engine behind one LangChain agent's conversation, as a middleware of ``create_agent``. The vak
    session ``name`` is bound at the first model call, with the agent's tools (the engine judges calls of
    tools it knows); ``session_options`` go to :meth:`vak_context.Engine.session` (``window=``, ``rules=``: the
    turn rules observe by default here, docs/DRIFT.md, ...)."""

    def __init__(self, engine: Engine, name: str, *, model: str, **session_options: Any) -> None:
        super().__init__()
        self.engine, self.session_name, self.model = engine, name, model
        self._options = session_options
        self._bridge: Bridge | None = None
        self._seen: list[str] = []  # a signature of each agent message the engine recorded, in order
        self._engine_tools = [t["name"] for t in engine_tool_specs()]
        self.tools = _engine_tools()

    @property
    def name(self) -> str:
        return "VakMiddleware"

    @property
    def session(self) -> Session | None:
        """The vak session, once the first model call bound it."""
        return self._bridge.session if self._bridge else None

    @property
    def results(self) -> list[TurnResult]:
        """The closed turns' results, oldest first."""
        return list(self._bridge.results) if self._bridge else []

    async def awrap_model_call(self, request: ModelRequest[Any], handler: Handler) -> ModelResponse[Any]:
        """Record what is new in the agent's messages, call the model with the engine's projection, record
        its reply."""
        bridge = self._bound(request.tools)
        messages = list(request.messages)
        await bridge.feed(self._new(messages))
        if bridge.turn is None and bridge.results:  # the engine closed the turn, the agent went on
            last = bridge.results[-1]
            raise TurnOver(last.outcome, last.answer)
        try:
            projection = await bridge.project()
        except TurnOver:
            await bridge.end_turn()  # its result and card, before the framework's run stops here
            raise
        system, projected = _messages_of(projection)
        wanted = {str(t.get("function", {}).get("name", "")) for t in projection.tools}
        tools = [t for t in request.tools if _tool_name(t) in wanted]
        response = await handler(request.override(messages=projected, system_message=system, tools=tools))
        replies = [m for m in response.result if isinstance(m, AIMessage)]
        reply = replies[0] if replies else None
        if reply is not None:
            await bridge.feed([_replied(reply)])
            messages.append(reply)
        self._seen = [_signature(m) for m in messages]
        turn = bridge.turn
        if turn is not None and (turn.done or reply is None or not reply.tool_calls):
            await bridge.end_turn()  # the agent's run ends with a reply that calls no tool
        return response

    async def close(self) -> None:
        """Close the open turn and the vak session."""
        if self._bridge is not None:
            await self._bridge.end_turn()
            await self._bridge.session.close()

    def _bound(self, tools: Sequence[BaseTool | dict[str, Any]]) -> Bridge:
        if self._bridge is None:
            own = []
            for t in tools:
                spec = convert_to_openai_tool(t)["function"]
                if spec["name"] not in self._engine_tools:
                    own.append((spec["name"], spec.get("description", ""), spec.get("parameters", {})))
            session = self.engine.session(self.session_name, model=self.model, tools=declarations(own),
                                          **self._options)
            self._bridge = Bridge(session)
        return self._bridge

    def _new(self, messages: list[AnyMessage]) -> list[Event]:
        """The events of what ``messages`` adds to what the engine saw; a fresh run without history (no
        model reply in it) adds all of it. Anything else rewrote the history: refused."""
        seen = self._seen
        if [_signature(m) for m in messages[:len(seen)]] == seen:
            return _events_of(messages[len(seen):])
        if not any(isinstance(m, AIMessage) for m in messages):
            return _events_of(messages)
        raise AppendOnlyHistory("the agent's messages differ from what the engine recorded (an earlier message "
                                "was edited or dropped); pass the last run's state['messages'], or no history")


def _engine_tools() -> list[BaseTool]:
    """``recall``, ``find_tools`` and ``session_search`` as LangChain tools (their run returns a placeholder)."""

    def answered_inside(**_: Any) -> str:
        return ANSWERED_INSIDE

    async def answered_inside_async(**_: Any) -> str:
        return ANSWERED_INSIDE

    return [StructuredTool.from_function(func=answered_inside, coroutine=answered_inside_async, name=t["name"],
                                         description=t["description"], args_schema=t["parameters"])
            for t in engine_tool_specs()]


def _tool_name(tool: BaseTool | dict[str, Any]) -> str:
    return tool.name if isinstance(tool, BaseTool) else str(convert_to_openai_tool(tool)["function"]["name"])


def _signature(message: BaseMessage) -> str:
    """What identifies a message across LangChain's copies of it (ids are assigned on the way into state)."""
    keep: dict[str, Any] = {"type": message.type, "text": text_of(message.content)}
    if isinstance(message, AIMessage):
        keep["calls"] = [[c.get("id"), c["name"], c["args"]] for c in message.tool_calls]
    if isinstance(message, ToolMessage):
        keep["call"] = message.tool_call_id
    return json.dumps(keep, sort_keys=True, default=str)


def _replied(message: AIMessage) -> Replied:
    usage: Mapping[str, Any] = message.usage_metadata or {}
    calls = tuple(FrameworkCall(str(c.get("id")), c["name"], dict(c["args"])) for c in message.tool_calls)
    return Replied(text_of(message.content), calls, int(usage.get("input_tokens", 0)),
                   int(usage.get("output_tokens", 0)))


def _events_of(messages: Sequence[BaseMessage]) -> list[Event]:
    events: list[Event] = []
    for message in messages:
        if isinstance(message, AIMessage):
            events.append(_replied(message))
        elif isinstance(message, ToolMessage):
            events.append(Returned(message.tool_call_id, text_of(message.content), is_error=message.status == "error"))
        elif isinstance(message, HumanMessage) and (said := text_of(message.content)).strip():
            events.append(Said(said))
    return events


def _messages_of(projection: Projection) -> tuple[SystemMessage | None, list[AnyMessage]]:
    """The projection's chat messages as LangChain messages: its leading system messages as the request's
    system message, the rest in order."""
    names = tool_names(projection.messages)
    system: list[str] = []
    out: list[AnyMessage] = []
    for m in projection.messages:
        role, text = m.get("role"), text_of(m.get("content"))
        if role == "system" and not out:
            system.append(text)
        elif role == "system":
            out.append(SystemMessage(text))
        elif role == "assistant":
            out.append(AIMessage(text, tool_calls=[
                {"id": c["id"], "name": c["function"]["name"], "args": _arguments(c["function"].get("arguments")),
                 "type": "tool_call"} for c in m.get("tool_calls") or ()]))
        elif role == "tool":
            call_id = str(m.get("tool_call_id", ""))
            out.append(ToolMessage(text, tool_call_id=call_id, name=names.get(call_id) or None))
        else:
            out.append(HumanMessage(text))
    return (SystemMessage("\n\n".join(system)) if system else None), out


def _arguments(arguments: Mapping[str, Any] | str | None) -> dict[str, Any]:
    if isinstance(arguments, Mapping):
        return dict(arguments)
    try:
        parsed = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return {"arguments": arguments}  # the model's malformed JSON, kept visible rather than dropped
    return parsed if isinstance(parsed, dict) else {"arguments": parsed}
