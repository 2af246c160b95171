"""Your own tools: a :class:`ToolRegistry` of callables (and MCP servers) the turn loop runs.

Register a function, sync or async::

    registry = ToolRegistry()

    @registry.tool(read_only=True, observes=True)
    async def web_search(query: str, limit: int = 5) -> list[dict[str, str]]:
        \"\"\"Search the web. Returns titles and links.

        Args:
            query: what to search for
            limit: how many results
        \"\"\"

The schema comes from the type hints and the docstring (:mod:`vak_context.agent.tools.schema`) or is given
with ``schema=``; the description is the docstring's first paragraph or ``description=``. The flags are the
ones the engine's rules read, carried on the tool's :class:`~vak_context.context.request.surface.ToolDecl`:
``read_only`` (its result cannot change within a turn unless a world-changing call runs: the repeated-call
rule answers a repeat instead of running it), ``observes`` (True: it reads the world as it is now, and the
freshness check counts its successful call as an observation; False: it never counts; unset (None): it
counts, as a tool that says nothing is given the benefit of the doubt) and ``deferred`` (listed in the catalogue and loaded through
``find_tools`` instead of riding every request). :meth:`ToolRegistry.decls` gives the declarations the
:class:`~vak_context.context.request.surface.Surface` is built from.

Running a call (:meth:`ToolRegistry.call`) never raises for the tool's own failure: a
:class:`~vak_context.errors.ToolFailure` comes back as its message, any other exception as an error result
naming its type and message (no traceback, no locals: those go to the log), and the turn goes on. Sync
callables run in a worker thread (``asyncio.to_thread``) so a slow tool does not hold the loop.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

from vak_context.agent.tools.base import Run, ToolResult
from vak_context.agent.tools.schema import describe_callable, schema_of
from vak_context.context.request.messages import ToolSpec
from vak_context.context.request.surface import ToolDecl
from vak_context.errors import InvalidInput, ToolFailure

if TYPE_CHECKING:
    from vak_context.agent.tools.mcp import McpServer

log = logging.getLogger("vak.tools")

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Tool:
    """One registered tool: its declaration and what runs a call (the arguments as one JSON object)."""

    decl: ToolDecl
    run: Run
    server: McpServer | None = None  # the MCP server that answers it, when it is one's tool

    @property
    def name(self) -> str:
        return self.decl.name


def tool(fn: Callable[..., Any], *, name: str | None = None, description: str | None = None,
         schema: Mapping[str, Any] | None = None, read_only: bool = False, observes: bool | None = None,
         deferred: bool = False) -> Tool:
    """A registration for ``fn`` (sync or async): add it with :meth:`ToolRegistry.add`. The schema is taken
    from the hints and the docstring unless ``schema`` gives it (then the call's arguments are passed as
    keywords all the same); a tool with no description in either place is refused."""
    tool_name = name or getattr(fn, "__name__", "")
    if not tool_name or not tool_name.replace("_", "").replace("-", "").isalnum():
        raise InvalidInput(f"tool name {tool_name!r}: use letters, digits, '_' or '-'; pass name=")
    doc, params = describe_callable(fn)
    text = description or doc
    if not text:
        raise InvalidInput(f"tool {tool_name!r} has no description: give it a docstring or pass description=")
    input_schema = dict(schema) if schema is not None else schema_of(fn, tool_name, params)
    spec = ToolSpec(name=tool_name, description=text, input_schema=input_schema)
    decl = ToolDecl(spec, always_loaded=not deferred, observes=observes, read_only=read_only)
    return Tool(decl, _runner(fn, tool_name))


def _runner(fn: Callable[..., Any], name: str) -> Run:
    signature = inspect.signature(fn)
    is_async = inspect.iscoroutinefunction(fn)

    async def run(arguments: dict[str, Any]) -> Any:
        try:
            signature.bind(**arguments)
        except TypeError as exc:
            raise ToolFailure(name, f"the arguments do not fit its parameters ({exc}); pass the parameters "
                              "its schema lists") from exc
        if is_async:
            return await fn(**arguments)
        value = await asyncio.to_thread(fn, **arguments)
        return await value if inspect.isawaitable(value) else value  # a sync wrapper around a coroutine

    return run


def encode_result(value: Any) -> str:
    """A tool's return value as the text the model gets: a str unchanged; a dict, list, tuple, number,
    bool or None JSON-encoded (values JSON cannot hold inside them written with ``str()``); anything
    else ``str()``."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict | list | tuple | int | float | bool) or value is None:
        return json.dumps(value, ensure_ascii=False, default=str)
    return str(value)


def error_text(name: str, exc: BaseException) -> str:
    """What the model is told of a tool that raised: the exception's type and message, nothing more."""
    if isinstance(exc, ToolFailure):
        return str(exc)
    message = str(exc).strip()
    return f"{name} failed: {type(exc).__name__}" + (f": {message}" if message else "")


class ToolRegistry:
    """The tools a turn loop can run, by name, in registration order; and the MCP servers behind some."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        self.servers: list[McpServer] = []
        self.add(*tools)

    # ------------------------------------------------------------ registering

    def add(self, *tools: Tool) -> None:
        for t in tools:
            if t.name in self._tools:
                raise InvalidInput(f"tool {t.name!r} is registered twice; register each tool once")
            self._tools[t.name] = t

    def register(self, fn: Callable[..., Any], **flags: Any) -> Tool:
        """Register ``fn`` (the keywords of :func:`tool`) and return its registration."""
        registered = tool(fn, **flags)
        self.add(registered)
        return registered

    def tool(self, fn: F | None = None, **flags: Any) -> Any:
        """Decorator: ``@registry.tool`` or ``@registry.tool(read_only=True, ...)``; returns ``fn`` unchanged."""
        def wrap(f: F) -> F:
            self.register(f, **flags)
            return f
        return wrap(fn) if fn is not None else wrap

    def add_mcp_server(self, name: str, command: Sequence[str], *, tools: Mapping[str, str],
                       env: Mapping[str, str] | None = None, cwd: str | None = None, deferred: bool = True,
                       read_only: bool = False, observes: bool | None = None, start_timeout_s: float = 30.0) -> McpServer:
        """An MCP server over stdio, started on the first call of one of its tools (or the first
        ``find_tools`` that returns one: its schemas come from the server's own listing).

        ``tools`` names its tools up front, each with a one-line description: the catalogue is in the stable
        prefix of every request, so it must not wait for (or depend on) a server that is not running yet.
        Its tools are deferred by default; one loaded (``deferred=False``) rides the request with a schema
        that accepts any object, since its real schema is known only once the server runs."""
        from vak_context.agent.tools.mcp import McpServer

        server = McpServer(name, list(command), env=dict(env) if env is not None else None, cwd=cwd,
                           start_timeout_s=start_timeout_s)
        for tool_name, description in tools.items():
            spec = ToolSpec(name=tool_name, description=description, input_schema={"type": "object"})
            decl = ToolDecl(spec, always_loaded=not deferred, observes=observes, read_only=read_only)
            self.add(Tool(decl, server.runner(tool_name), server=server))
        self.servers.append(server)
        return server

    def merged(self, *tools: Tool) -> ToolRegistry:
        """A new registry with this one's tools and ``tools`` (the servers are shared, still closed by this
        registry's owner)."""
        out = ToolRegistry([*self._tools.values(), *tools])
        out.servers = list(self.servers)
        return out

    def deferring(self, setting: str, horizon_tokens: int, tokens_per_char: float) -> ToolRegistry:
        """This registry as a session binds it under ``defer_tools=``: ``"always"`` every tool behind
        ``find_tools`` (listed in the catalogue, still callable by name), ``"auto"`` the same when their
        schemas exceed ``DEFER_SHARE`` of the horizon (``should_defer``), ``"never"`` as registered."""
        from vak_context.context.request.surface import should_defer

        if setting == "never" or (setting == "auto" and not should_defer(
                [t.decl.spec for t in self._tools.values()], horizon_tokens, tokens_per_char)):
            return self
        out = ToolRegistry(replace(t, decl=replace(t.decl, always_loaded=False)) for t in self._tools.values())
        out.servers = list(self.servers)
        return out

    # ------------------------------------------------------------ reading

    def decls(self) -> tuple[ToolDecl, ...]:
        """Every tool's declaration, in registration order: what the Surface is built from."""
        return tuple(t.decl for t in self._tools.values())

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    async def resolve(self, decl: ToolDecl) -> ToolDecl:
        """``decl`` with its full schema: an MCP server's tool gets the one its server lists (starting the
        server, :class:`~vak_context.errors.McpError` when it cannot); any other tool is returned as it is."""
        registered = self._tools.get(decl.name)
        if registered is None or registered.server is None:
            return decl
        listed = await registered.server.spec(decl.name)
        return replace(decl, spec=listed)

    # ------------------------------------------------------------ running

    async def call(self, name: str, arguments: Mapping[str, Any]) -> tuple[str, bool]:
        """(body, is_error) of one call. The tool's own failures are error results; a cancel propagates."""
        registered = self._tools.get(name)
        if registered is None:
            return f"no tool named {name!r} is registered", True
        try:
            value = await registered.run(dict(arguments))
        except Exception as exc:  # any failure of the tool is the model's to read, the turn goes on
            log.info("tool %s raised %s", name, type(exc).__name__, exc_info=True)
            return error_text(name, exc), True
        if isinstance(value, ToolResult):
            return value.body, value.is_error
        return encode_result(value), False

    # ------------------------------------------------------------ closing

    async def aclose(self) -> None:
        """Stop every MCP server this registry started (each waits for its process to exit)."""
        for server in self.servers:
            await server.aclose()

    async def __aenter__(self) -> ToolRegistry:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()
