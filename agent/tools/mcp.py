"""An MCP server over stdio as a source of tools, with the official ``mcp`` package (the ``[mcp]`` extra).

The server is started by demand only: the first call of one of its tools, or the first ``find_tools`` that
returns one (its schema comes from the server's own ``tools/list``). Until then nothing runs: the catalogue
lines come from the names and descriptions given at registration
(:meth:`~vak_context.agent.tools.registry.ToolRegistry.add_mcp_server`).

One task owns the connection (``stdio_client`` and ``ClientSession`` are anyio contexts that must be left in
the task that entered them, and a turn's calls run in tasks of their own): it starts the process, initialises
the session, lists the tools, then waits for :meth:`McpServer.aclose`. Every failure is typed: a server that
does not start or answer within ``start_timeout_s``, a protocol error, a process that dies are
:class:`~vak_context.errors.McpError` (the message quotes the end of the server's stderr); a tool's own
``isError`` result is an error result for the model. A server that failed to start is not started again
by the same registry: each later call gets the same error, at no cost.
"""

from __future__ import annotations

import asyncio
import json
import logging
import tempfile
from typing import Any

from vak_context.agent.tools.base import Run, ToolResult
from vak_context.context.request.messages import ToolSpec
from vak_context.errors import McpError
from vak_context.extras import require_extra

log = logging.getLogger("vak.mcp")
STDERR_QUOTE_CHARS = 600  # the end of the server's stderr an error quotes


def _leaf(exc: BaseException) -> BaseException:
    """The first real exception inside anyio's exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _field(model: Any, name: str) -> Any:
    """A field of an mcp model by its mcp 2 name (snake case) or its mcp 1 name (camel case)."""
    head, *rest = name.split("_")
    return getattr(model, name, None) if hasattr(model, name) else \
        getattr(model, head + "".join(w.title() for w in rest), None)


class McpServer:
    """One stdio MCP server: ``command`` is the argv that starts it, ``env`` extra environment variables."""

    def __init__(self, name: str, command: list[str], *, env: dict[str, str] | None = None, cwd: str | None = None,
                 start_timeout_s: float = 30.0) -> None:
        if not command:
            raise McpError(name, "the command that starts the server is empty; pass its argv, e.g. "
                           "['python', 'server.py']")
        self.name, self.command, self.env, self.cwd = name, command, env, cwd
        self.start_timeout_s = start_timeout_s
        self.listed: dict[str, ToolSpec] = {}
        self._session: Any = None
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self._stop = asyncio.Event()
        self._lock = asyncio.Lock()
        self._error: McpError | None = None
        self._stderr: Any = None

    @property
    def started(self) -> bool:
        return self._session is not None

    def runner(self, tool: str) -> Run:
        async def run(arguments: dict[str, Any]) -> ToolResult:
            return await self.call(tool, arguments)
        return run

    # ------------------------------------------------------------ starting

    async def start(self) -> None:
        """Start the server and list its tools, once; raises :class:`McpError` when it cannot."""
        async with self._lock:
            if self._session is not None:
                return
            if self._error is not None:
                raise self._error
            require_extra("mcp", f"the MCP server {self.name!r}")
            self._stderr = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")
            self._task = asyncio.create_task(self._own(), name=f"mcp:{self.name}")
            try:
                await asyncio.wait_for(self._ready.wait(), self.start_timeout_s)
            except TimeoutError:
                self._error = self._failed(f"did not answer within {self.start_timeout_s:g} s")
                await self._halt(cancel=True)
                raise self._error from None
            if self._session is None:
                self._error = self._error or self._failed("stopped before it answered")
                raise self._error

    async def _own(self) -> None:
        from mcp import ClientSession, StdioServerParameters
        from mcp.client.stdio import stdio_client

        params = StdioServerParameters(command=self.command[0], args=self.command[1:], env=self.env, cwd=self.cwd)
        try:
            async with stdio_client(params, errlog=self._stderr) as (read, write), \
                    ClientSession(read, write) as session:
                await session.initialize()
                listing = await session.list_tools()
                self.listed = {t.name: ToolSpec(name=t.name, description=t.description or "",
                                                input_schema=dict(_field(t, "input_schema") or {"type": "object"}))
                               for t in listing.tools}
                self._session = session
                self._ready.set()
                await self._stop.wait()
        except Exception as exc:  # a spawn failure, a protocol error, a server gone: the caller reads it typed
            leaf = _leaf(exc)
            log.info("MCP server %s stopped: %s", self.name, type(leaf).__name__, exc_info=True)
            if self._error is None and not self._stop.is_set():
                self._error = self._failed(f"failed ({type(leaf).__name__}: {leaf})")
        finally:
            self._session = None
            self._ready.set()

    def _failed(self, what: str) -> McpError:
        return McpError(self.name, f"the MCP server {what}; check its command {self.command!r}{self._stderr_tail()}")

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        try:
            self._stderr.flush()
            self._stderr.seek(0)
            text = self._stderr.read().strip()
        except (OSError, ValueError):
            return ""
        return f"; its stderr ends: {text[-STDERR_QUOTE_CHARS:]}" if text else ""

    # ------------------------------------------------------------ using

    async def spec(self, tool: str) -> ToolSpec:
        """``tool``'s schema as the server lists it (the server is started if it is not running)."""
        await self.start()
        listed = self.listed.get(tool)
        if listed is None:
            raise McpError(tool, f"the MCP server {self.name!r} lists no tool named {tool!r} (it lists "
                           f"{', '.join(sorted(self.listed)) or 'none'}); fix the names given at registration")
        return listed

    async def call(self, tool: str, arguments: dict[str, Any]) -> ToolResult:
        """One ``tools/call``: its text content; ``isError`` is an error result, a protocol error McpError."""
        await self.start()
        session = self._session
        if session is None:
            raise self._error or self._failed("is not running")
        try:
            result = await session.call_tool(tool, arguments)
        except Exception as exc:
            leaf = _leaf(exc)
            raise McpError(tool, f"the MCP server {self.name!r} answered the call with an error "
                           f"({type(leaf).__name__}: {leaf})") from exc
        content = getattr(result, "content", None)
        if content is None:  # not a CallToolResult (mcp 2's input-required answer): nothing here can answer it
            return ToolResult(f"{tool}: the MCP server answered with {type(result).__name__}, which this runtime "
                              "cannot continue; call another tool", True)
        parts = [block.text if getattr(block, "type", "") == "text" else block.model_dump_json(exclude_none=True)
                 for block in content]
        body = "\n".join(parts)
        structured = _field(result, "structured_content")
        if not body and structured is not None:
            body = json.dumps(structured, ensure_ascii=False, default=str)
        return ToolResult(body, bool(_field(result, "is_error")))

    # ------------------------------------------------------------ closing

    async def _halt(self, *, cancel: bool = False) -> None:
        self._stop.set()
        if self._task is not None:
            task, self._task = self._task, None
            if cancel:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            elif not task.done():
                try:
                    await asyncio.wait_for(asyncio.shield(task), self.start_timeout_s)
                except TimeoutError:
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)

    async def aclose(self) -> None:
        """Stop the server (its session closed, the process waited for); safe to call when never started."""
        await self._halt()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
