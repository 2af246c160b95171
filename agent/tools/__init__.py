"""Tools the turn loop runs: your own callables and MCP servers (:mod:`.registry`, :mod:`.mcp`), the
workspace tools (:mod:`.builtin`) and the engine's own (:mod:`.engine`). docs/TOOLS.md has the guide."""

from vak_context.agent.tools.builtin import workspace_tools
from vak_context.agent.tools.engine import EngineCall, EngineTool, EngineTools, engine_tools, surface_for
from vak_context.agent.tools.registry import Tool, ToolRegistry, ToolResult, encode_result, tool

__all__ = ["EngineCall", "EngineTool", "EngineTools", "Tool", "ToolRegistry", "ToolResult", "encode_result",
           "engine_tools", "surface_for", "tool", "workspace_tools"]
