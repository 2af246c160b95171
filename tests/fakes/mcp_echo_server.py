"""A small stdio MCP server for the tool tests, on the official ``mcp`` package: ``echo`` and ``divide``
(which raises on a zero divisor, so the server answers with an ``isError`` result). Run as a script."""

from __future__ import annotations

try:  # mcp 1.x
    from mcp.server.fastmcp import FastMCP as Server
except ModuleNotFoundError:  # mcp 2.x renamed it
    from mcp.server.mcpserver import MCPServer as Server

server = Server("echo-test")


@server.tool()
def echo(text: str) -> str:
    """Echo the text back, upper-cased."""
    return text.upper()


@server.tool()
def divide(a: float, b: float) -> float:
    """Divide a by b."""
    if b == 0:
        raise ValueError("b must not be zero")
    return a / b


if __name__ == "__main__":
    server.run("stdio")
