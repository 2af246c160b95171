"""The engine's own tools: ``recall``, ``find_tools``, ``session_search`` and ``commitments``, answered by the
engine, not by a registry callable.

They sit in one table, :func:`engine_tools`, that later features extend with an :class:`EngineTool`: its
declaration (the same :class:`~vak_context.context.request.surface.ToolDecl` flags as any tool's) and the
coroutine that answers a call from the turn's state (:class:`EngineCall`). An ``in_order`` tool is
answered while the step's results are stored, in call order, and stores its own result: ``recall``'s
result is written by the evidence layer (``services.recall``), so it must not run alongside the step's
other calls.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from vak_context.agent.tools.commitments import COMMITMENTS, answer_listing, parse_commitment
from vak_context.agent.tools.registry import ToolRegistry
from vak_context.agent.tools.sessionsearch import SESSION_SEARCH, parse_search_args, render_found
from vak_context.context.evidence.digest import RECALL_TOOL
from vak_context.context.request.surface import (
    FIND_TOOLS,
    Surface,
    ToolDecl,
    find_tools_result,
    parse_find_tools_args,
)
from vak_context.errors import VakError

if TYPE_CHECKING:
    from vak_context.storage.sessionsearch import Found


class RecallServices(Protocol):
    async def recall(self, args: dict[str, Any], tool_use_id: str) -> dict[str, Any]: ...


class SearchServices(Protocol):
    async def session_search(self, query: str, scope: str | None = None) -> Found: ...


@dataclass
class EngineCall:
    """One engine-tool call and the turn state it may read or update."""

    arguments: dict[str, Any]
    tool_use_id: str
    services: RecallServices
    surface: Surface
    registry: ToolRegistry
    promoted: set[str] = field(default_factory=set)  # deferred tools find_tools returned this turn
    turn_id: str = ""  # the open turn's directive (where a commitment the model records was stated)
    step_id: str = ""  # the step that made the call


@dataclass(frozen=True)
class EngineTool:
    decl: ToolDecl
    answer: Callable[[EngineCall], Awaitable[tuple[str, bool]]]
    in_order: bool = False

    @property
    def name(self) -> str:
        return self.decl.name


async def _recall(call: EngineCall) -> tuple[str, bool]:
    recalled = await call.services.recall(call.arguments, call.tool_use_id)
    return str(recalled.get("content", "")), bool(recalled.get("is_error", False))


async def _find_tools(call: EngineCall) -> tuple[str, bool]:
    query = parse_find_tools_args(call.arguments)
    if query is None:
        return 'find_tools: pass {"query": "what the tool should do"}', True
    try:
        # An MCP server's tool gets the schema its server lists: this is the demand that starts the server.
        found = tuple([await call.registry.resolve(d) for d in call.surface.find(query)])
    except VakError as exc:
        return f"find_tools: {exc}", True
    call.promoted.update(t.name for t in found)
    return find_tools_result(found, query), False


async def _session_search(call: EngineCall) -> tuple[str, bool]:
    parsed = parse_search_args(call.arguments)
    if isinstance(parsed, str):
        return parsed, True
    search = getattr(call.services, "session_search", None)
    if search is None:  # services of an embedder's own making, without the ledger's search
        return "session_search: this runtime's turn services cannot search the session", True
    try:
        found = await search(*parsed)
    except VakError as exc:
        return f"session_search: {exc}", True
    return render_found(found), False


async def _commitments(call: EngineCall) -> tuple[str, bool]:
    stated, append = getattr(call.services, "stated", None), getattr(call.services, "append", None)
    if stated is None or append is None:  # services of an embedder's own making, without the ledger's state
        return "commitments: this runtime's turn services keep no stated state", True
    try:
        current = tuple(await stated())
        item = parse_commitment(call.arguments, current)
        if item is None:
            return answer_listing(current), False
        if isinstance(item, str):
            return item, True
        same = next((it for it in current if it.key == item.key), None)
        if same is not None and same.text == item.text and same.category == item.category:
            return f"commitments: already recorded as [{same.id[:12]}]", False
        item = item.model_copy(update={"turn_id": call.turn_id or None, "entry_id": call.step_id or None})
        entry = (await append([item]))[0]
    except VakError as exc:
        return f"commitments: {exc}", True
    replaced = f"; it replaces [{same.id[:12]}]" if same is not None else ""
    return f"commitments: recorded [{entry[:12]}] {item.category} (key {item.key!r}), in force from the next turn{replaced}", False


class EngineTools:
    """The engine's tools by name."""

    def __init__(self, tools: Iterable[EngineTool] = ()) -> None:
        self._tools = {t.name: t for t in tools}

    def register(self, tool: EngineTool) -> None:
        self._tools[tool.name] = tool

    def get(self, name: str) -> EngineTool | None:
        return self._tools.get(name)

    def decls(self) -> tuple[ToolDecl, ...]:
        return tuple(t.decl for t in self._tools.values())


def engine_tools() -> EngineTools:
    """recall (in order, read-only: it reads earlier turns), find_tools (read-only: it ranks a fixed
    catalogue), session_search (read-only: it searches what the ledger holds; its result is stored
    like a world tool's) and commitments (it reads the stated state and may add to it: docs/STATE.md),
    all always loaded."""
    return EngineTools([
        EngineTool(ToolDecl(RECALL_TOOL, always_loaded=True, observes=False, read_only=True), _recall, in_order=True),
        EngineTool(ToolDecl(FIND_TOOLS, always_loaded=True, observes=False, read_only=True), _find_tools),
        EngineTool(ToolDecl(SESSION_SEARCH, always_loaded=True, observes=False, read_only=True), _session_search),
        EngineTool(ToolDecl(COMMITMENTS, always_loaded=True, observes=False), _commitments),
    ])


def surface_for(registry: ToolRegistry, *extra: ToolDecl) -> Surface:
    """recall, find_tools, the registry's tools (in registration order) and ``extra`` as one Surface."""
    return Surface.build([*engine_tools().decls(), *registry.decls(), *extra])
