"""The OpenAI Agents SDK: a ``call_model_input_filter`` that sends the engine's projection instead of the
run's input, and an append-only ``Session`` (the ``[openai-agents]`` extra)::

    vak = VakAgents(engine, "support-1", model="openai:gpt-4o-mini", window=128_000)
    agent = Agent(name="support", model=model, tools=[search, *vak.tools()])
    result = await Runner.run(agent, "Find the open invoices of ACME", session=vak.session,
                              run_config=RunConfig(call_model_input_filter=vak.input_filter))

What is recorded, from the items new since the engine last saw the conversation (the filter sees the
session's items, the new input and the items the run generated so far; the session's ``add_items`` sees a
run's items once it ends, its last reply among them): a user message item is a directive (it begins a
turn); an assistant ``message`` and the ``function_call`` items after it are one step (text and calls with
their ``call_id``s; the items carry no usage, so none is recorded); a ``function_call_output`` is the
evidence of its call. System and developer items are not recorded: the projection's system prompt becomes
the call's ``instructions`` (the agent's own instructions are replaced by the engine's system prompt, which
the binding's ``identity=`` sets). Reasoning items, hosted tools' items and other item types are not
recorded (a compromise: the engine's ledger has no kind for them), and are not sent again.

``pop_item`` and ``clear_session`` raise :class:`~vak_context.errors.AppendOnlyHistory`: the ledger only
appends. The tools sent are the agent's (a filter changes only input and instructions); ``recall``,
``find_tools`` and ``session_search`` are agent tools whose own run returns a placeholder: the engine answered the call inside the
turn and the next request carries its answer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from vak_context.extras import require_extra

require_extra("openai-agents", "vak_context.adapters.openai_agents")

from agents import FunctionTool, RunContextWrapper  # noqa: E402
from agents.memory import SessionABC  # noqa: E402
from agents.run_config import CallModelData, ModelInputData  # noqa: E402

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
)
from vak_context.engine.api import Engine, Session, engine_tool_specs  # noqa: E402
from vak_context.engine.results import TurnResult  # noqa: E402
from vak_context.errors import AppendOnlyHistory  # noqa: E402


class AppendOnlySession(SessionABC):
    """The SDK's session for one vak conversation: it keeps the run's items as the SDK gave them (for
    ``get_items``) and hands each run's new items to the engine; it never removes an item."""

    def __init__(self, owner: VakAgents, session_id: str) -> None:
        self.session_id, self.session_settings = session_id, None
        self._owner = owner
        self._items: list[Any] = []

    async def get_items(self, limit: int | None = None) -> list[Any]:
        return list(self._items if limit is None else self._items[-limit:] if limit > 0 else [])

    async def add_items(self, items: list[Any]) -> None:
        self._items.extend(items)
        await self._owner._ingest(self._items)

    async def pop_item(self) -> Any:
        raise AppendOnlyHistory("pop_item()")

    async def clear_session(self) -> None:
        raise AppendOnlyHistory("clear_session()")


class VakAgents:
    """The engine behind one OpenAI Agents SDK conversation: :attr:`session` for ``Runner.run(...,
    session=)``, :meth:`input_filter` for ``RunConfig(call_model_input_filter=)``, :meth:`tools` the
    engine's tools. The vak session ``name`` is bound at the first model call, with the agent's function
    tools; ``session_options`` go to :meth:`vak_context.Engine.session` (``rules=``: the turn rules observe by
    default here, docs/DRIFT.md)."""

    def __init__(self, engine: Engine, name: str, *, model: str, **session_options: Any) -> None:
        self.engine, self.name, self.model = engine, name, model
        self._options = session_options
        self._bridge: Bridge | None = None
        self._seen: list[str] = []  # a signature of each item the engine recorded, in order
        self.session = AppendOnlySession(self, name)

    @property
    def vak_session(self) -> Session | None:
        return self._bridge.session if self._bridge else None

    @property
    def results(self) -> list[TurnResult]:
        return list(self._bridge.results) if self._bridge else []

    def tools(self) -> list[FunctionTool]:
        """``recall``, ``find_tools`` and ``session_search`` as the agent's tools (their run returns a placeholder)."""

        async def answered_inside(ctx: RunContextWrapper[Any], arguments: str) -> str:
            return ANSWERED_INSIDE

        return [FunctionTool(name=t["name"], description=t["description"], params_json_schema=t["parameters"],
                             on_invoke_tool=answered_inside, strict_json_schema=False)
                for t in engine_tool_specs()]

    async def input_filter(self, data: CallModelData[Any]) -> ModelInputData:
        """The model-input filter: record what is new in the call's input, send the engine's projection."""
        if self._bridge is None:
            engine_names = {t["name"] for t in engine_tool_specs()}
            own = [(t.name, t.description, t.params_json_schema) for t in data.agent.tools
                   if isinstance(t, FunctionTool) and t.name not in engine_names]
            session = self.engine.session(self.name, model=self.model, tools=declarations(own), **self._options)
            self._bridge = Bridge(session)
        await self._ingest(data.model_data.input)
        return _input_of(await self._bridge.project())

    async def close(self) -> None:
        """Close the open turn and the vak session."""
        if self._bridge is not None:
            await self._bridge.end_turn()
            await self._bridge.session.close()

    async def _ingest(self, items: Sequence[Any]) -> None:
        if self._bridge is None:
            return  # nothing reached the model yet: the first filter call records it
        signatures = [_signature(i) for i in items]
        seen = self._seen
        if signatures[:len(seen)] != seen:
            raise AppendOnlyHistory("the run's input differs from what the engine recorded (an earlier item "
                                    "was edited or dropped); keep the items the session gives")
        await self._bridge.feed(_events_of([_plain(i) for i in items[len(seen):]]))
        self._seen = signatures
        turn = self._bridge.turn
        if turn is not None and turn.done:
            await self._bridge.end_turn()


def _plain(item: Any) -> dict[str, Any]:
    if isinstance(item, Mapping):
        return dict(item)
    dump = getattr(item, "model_dump", None)
    return dict(dump(exclude_unset=True)) if dump else {"value": str(item)}


def _signature(item: Any) -> str:
    """What identifies an item across the SDK's own copies of it (dicts, or its pydantic types)."""
    plain = _plain(item)
    keep: dict[str, Any] = {k: plain.get(k) for k in ("type", "role", "call_id", "name", "arguments", "output")
                            if k in plain}
    keep["text"] = text_of(plain.get("content"))
    return json.dumps(keep, sort_keys=True, default=str)


def _events_of(items: Sequence[Mapping[str, Any]]) -> list[Event]:
    events: list[Event] = []
    text, calls = "", list[FrameworkCall]()  # the step being gathered: an assistant message and the calls after it

    def flush() -> None:
        nonlocal text, calls
        if text or calls:
            events.append(Replied(text, tuple(calls)))
        text, calls = "", []

    for item in items:
        kind, role = item.get("type", "message"), item.get("role")
        if kind == "message" and role == "assistant":
            if calls:
                flush()
            text += text_of(item.get("content"))
        elif kind == "function_call":
            calls.append(FrameworkCall(str(item.get("call_id")), str(item.get("name")), str(item.get("arguments") or "{}")))
        else:
            flush()
            if kind == "message" and role == "user":
                if (said := text_of(item.get("content"))).strip():
                    events.append(Said(said))
            elif kind == "function_call_output":
                output = item.get("output")
                events.append(Returned(str(item.get("call_id")), output if isinstance(output, str) else text_of(output)))
    flush()
    return events


def _input_of(projection: Projection) -> ModelInputData:
    """The projection's chat messages as Responses input items; its system messages as the instructions."""
    system: list[str] = []
    items: list[Any] = []
    for m in projection.messages:
        role, text = m.get("role"), text_of(m.get("content"))
        if role == "system":
            system.append(text)
        elif role == "assistant":
            if text:
                items.append({"role": "assistant", "content": text})
            items += [{"type": "function_call", "call_id": c["id"], "name": c["function"]["name"],
                       "arguments": c["function"].get("arguments") or "{}"} for c in m.get("tool_calls") or ()]
        elif role == "tool":
            items.append({"type": "function_call_output", "call_id": str(m.get("tool_call_id", "")), "output": text})
        else:
            items.append({"role": "user", "content": text})
    return ModelInputData(input=items, instructions="\n\n".join(system) or None)
