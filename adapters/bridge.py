"""What every framework adapter shares: a framework's conversation, as the engine's events, drives one
caller's-loop turn (:meth:`vak_context.Session.begin`) per user message; the engine's projection comes
back as OpenAI chat-completions messages, which each adapter turns into its framework's own types.

The events, in the framework's order:

* :class:`Said`: a user message: it closes the turn before it (if still open) and begins a turn with it as
  the directive;
* :class:`Replied`: the model's reply (text and tool calls), handed to the turn as the chat-completions
  body the bound ``openai``/``openai-compat`` adapter parses (its usage when the framework reports one):
  the engine records the step, its receipt and feedback, and judges it;
* :class:`Returned`: a tool's result, stored as evidence for a call the engine gave back to the caller;
  a result for one of the engine's own calls (``recall``, ``find_tools``, ``session_search``: the framework ran the adapter's
  placeholder tool) is dropped, since the engine answered it inside the turn and its projection carries
  that answer.

The session must be bound to a chat-completions wire (``openai:`` or ``openai-compat:``): its profile is
the one the projection is planned against, and its rendered body is what the adapters translate.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from vak_context.errors import InvalidInput, TurnOver

if TYPE_CHECKING:
    from vak_context.engine.api import Session
    from vak_context.engine.caller import ModelRequest, Turn
    from vak_context.engine.results import TurnResult

CHAT_WIRES = ("openai", "openai-compat")
# What the framework's run of an engine tool returns: the framework insists on running every tool its model
# calls, but the engine already answered the call inside the turn, and the next request carries its answer.
ANSWERED_INSIDE = "answered by the context engine: its result is in the next request"


@dataclass(frozen=True)
class FrameworkCall:
    """A call in the framework's reply, as its adapter hands it over (docs/TURNS.md "Tool calls")."""

    id: str
    name: str
    arguments: Mapping[str, Any] | str  # an object, or the JSON text the model wrote


@dataclass(frozen=True)
class Said:
    text: str


@dataclass(frozen=True)
class Replied:
    text: str = ""
    calls: tuple[FrameworkCall, ...] = ()
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass(frozen=True)
class Returned:
    call_id: str
    body: str
    is_error: bool = False


Event = Said | Replied | Returned


@dataclass(frozen=True)
class Projection:
    """The next request as the engine projected it: OpenAI chat messages (system first) and the tools it
    declares (OpenAI ``tools`` entries), plus the request itself."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    request: ModelRequest


@dataclass
class Bridge:
    """One vak session driven by a framework's events: one caller's-loop turn per user message."""

    session: Session
    turn: Turn | None = None
    results: list[TurnResult] = field(default_factory=list)  # the closed turns', oldest first
    model: str = ""  # the bound model's name, as the last request named it

    async def feed(self, events: Iterable[Event]) -> None:
        """Record ``events`` (what is new in the framework's history, in its order)."""
        for event in events:
            if isinstance(event, Said):
                await self.end_turn()
                self.turn = await self.session.begin(event.text)
            elif isinstance(event, Replied):
                await self._reply(event)
            elif self.turn is not None and event.call_id in self.turn.pending:
                await self.turn.tool_result(event.call_id, event.body, is_error=event.is_error)

    async def project(self) -> Projection:
        """The engine's projection of the open turn's next request."""
        turn = self.turn
        if turn is None:
            raise InvalidInput("the framework called the model before any user message; start the run with "
                               "a user prompt (the engine's turns begin with one)")
        if turn.pending:  # the framework dropped a result: the engine cannot go on without it
            raise InvalidInput(f"the results of {', '.join(turn.pending)} never reached the model's next call; "
                               "let the framework run every tool call before calling the model again")
        request = await turn.request()
        if request is None:
            result = turn.result if turn.done else None
            raise TurnOver(result.outcome if result else "closed", result.answer if result else "")
        if request.wire not in CHAT_WIRES:
            raise InvalidInput(f"the adapters translate chat-completions requests; this session is bound to "
                               f"{request.wire!r}: bind it to openai:<model> or openai-compat:<model>")
        self.model = request.model
        messages = [dict(m) for m in request.body.get("messages", [])]
        return Projection(messages, list(request.body.get("tools", [])), request)

    async def end_turn(self) -> TurnResult | None:
        """Close the open turn: its result (the framework's run ended with the model's last reply, fed
        before this). A run the framework finished on a reply with no call is never cancelled by a rule
        that wanted one more model call: the turn closes ``completed`` with that reply
        (:meth:`~vak_context.engine.caller.Turn.accept`); one left with calls unanswered is ``cancelled``."""
        turn, self.turn = self.turn, None
        if turn is None:
            return None
        await turn.accept()
        self.results.append(turn.result)
        return turn.result

    async def _reply(self, event: Replied) -> None:
        turn = self.turn
        if turn is None:
            raise InvalidInput("a model reply came before any user message; start the history with one")
        if turn.done:
            return  # the engine closed the turn already; the framework's extra step is not recorded
        await turn.request()  # the request the framework sent (the same one, asked again)
        await turn.reply(completion_body(event, self.model))


def completion_body(event: Replied, model: str) -> dict[str, Any]:
    """The model's reply as an OpenAI chat-completions response body (what the bound adapter parses)."""
    message: dict[str, Any] = {"role": "assistant", "content": event.text or None}
    if event.calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function",
             "function": {"name": c.name, "arguments": c.arguments if isinstance(c.arguments, str)
                          else json.dumps(dict(c.arguments), ensure_ascii=False)}}
            for c in event.calls]
    body: dict[str, Any] = {
        "id": "chatcmpl-adapter", "object": "chat.completion", "created": 0, "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if event.calls else "stop"}],
    }
    if event.prompt_tokens:
        body["usage"] = {"prompt_tokens": event.prompt_tokens, "completion_tokens": event.completion_tokens,
                         "total_tokens": event.prompt_tokens + event.completion_tokens}
    return body


def tool_names(messages: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Tool-call id -> tool name over the assistant messages of a projection (a tool message names only
    its call's id; some frameworks need the name too)."""
    names: dict[str, str] = {}
    for m in messages:
        for call in m.get("tool_calls") or ():
            names[str(call.get("id"))] = str(call.get("function", {}).get("name", ""))
    return names


def text_of(content: Any) -> str:
    """A chat message's content as text: a string as it is, a list of parts joined by their text."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return "" if content is None else str(content)


def declarations(tools: Iterable[tuple[str, str, Mapping[str, Any]]]) -> list[Any]:
    """The framework's own tools as vak tool registrations (name, description, JSON schema) for the
    session's surface: the engine judges calls of tools it knows; the framework runs them."""
    from vak_context import tool

    def not_run(**_: Any) -> str:
        raise AssertionError("a caller's-loop tool is run by the framework, not the engine")

    return [tool(not_run, name=name, description=description or name, schema=schema)
            for name, description, schema in tools]
