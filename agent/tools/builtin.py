"""The workspace tools (``read_file``, ``list_dir``, ``grep``: :mod:`vak_context.agent.workspace`) as ordinary
registered tools over one :class:`~vak_context.agent.workspace.Workspace`: always loaded, read-only (the
workspace does not change under a turn), observing (they read the world as it is now). Their schemas are
the workspace's own, byte for byte, so a request's prefix is what it was before they were registrations."""

from __future__ import annotations

import asyncio
from typing import Any

from vak_context.agent.tools.base import Run
from vak_context.agent.tools.registry import Tool
from vak_context.agent.workspace import TOOLS, Workspace
from vak_context.context.request.surface import ToolDecl


def _runner(workspace: Workspace, name: str) -> Run:
    async def run(arguments: dict[str, Any]) -> str:
        return await asyncio.to_thread(workspace.call, name, arguments)
    return run


def workspace_tools(workspace: Workspace) -> list[Tool]:
    """The registrations of the workspace tools over ``workspace``'s root."""
    return [Tool(ToolDecl(t.spec, always_loaded=True, observes=t.observes, read_only=True),
                 _runner(workspace, t.spec.name)) for t in TOOLS]
