"""An MCP server (stdio, the official ``mcp`` package: tests/fakes/mcp_echo_server.py) as tools in a real TurnLoop
turn: not started until find_tools returns one of its tools, its schema from its own listing, a call's
text result, an ``isError`` result, and a server that cannot start (an error result; the turn ends with
a card)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.fakes.tool_turns import completion, run_turn
from vak_context.agent.tools import ToolRegistry
from vak_context.errors import McpError

SERVER = Path(__file__).resolve().parents[1] / "fakes" / "mcp_echo_server.py"
TOOLS = {"echo": "Echo the text back, upper-cased.", "divide": "Divide a by b."}


async def test_an_mcp_tool_is_reached_through_find_tools_and_called_in_a_turn(tmp_path: Path) -> None:
    async with ToolRegistry() as registry:
        server = registry.add_mcp_server("echo-test", [sys.executable, str(SERVER)], tools=TOOLS)
        assert [d.always_loaded for d in registry.decls()] == [False, False]
        assert not server.started  # registering starts nothing
        report, kinds, script = await run_turn(tmp_path, registry, [
            completion(calls=[("find_tools", {"query": "echo text"})]),
            completion(calls=[("echo", {"text": "hello"}), ("divide", {"a": 1, "b": 0})]),
            completion("HELLO; and 1/0 is undefined."),
        ])
        assert server.started
        results = kinds["tool_result"]
        # the schema find_tools returns is the server's own listing, not the placeholder
        assert '"name": "echo"' in results[0].content and '"text"' in results[0].content
        assert (results[1].content, results[1].is_error) == ("HELLO", False)
        # the server's own error text (mcp 1 quotes the exception, mcp 2 only names the tool), flagged isError
        assert results[2].is_error and "divide" in results[2].content
        assert report.outcome == "completed" and len(kinds["turn_card"]) == 1
        assert "- echo — Echo the text back, upper-cased." in script.bodies[0]["messages"][0]["content"]
    assert not server.started  # closed with the registry


async def test_an_mcp_server_that_fails_to_start_is_an_error_result_and_the_turn_ends_with_a_card(
        tmp_path: Path) -> None:
    async with ToolRegistry() as registry:
        server = registry.add_mcp_server("broken", [sys.executable, "-c", "import sys; sys.exit('no such server')"],
                                         tools={"echo": "Echo the text back."}, start_timeout_s=20)
        report, kinds, _ = await run_turn(tmp_path, registry, [
            completion(calls=[("find_tools", {"query": "echo"})]),
            completion(calls=[("echo", {"text": "hi"})]),
            completion("The echo tool is unavailable."),
        ])
        results = kinds["tool_result"]
        assert results[0].is_error and "MCP server" in results[0].content and "broken" in results[0].content
        assert results[1].is_error and "its stderr ends: no such server" in results[1].content
        assert report.outcome == "completed" and len(kinds["turn_card"]) == 1
        with pytest.raises(McpError, match="check its command"):
            await server.start()  # the failure is kept: not started again


async def test_a_missing_executable_is_a_typed_error(tmp_path: Path) -> None:
    async with ToolRegistry() as registry:
        server = registry.add_mcp_server("absent", [str(tmp_path / "no-such-binary")], tools={"x": "X."})
        with pytest.raises(McpError, match="absent"):
            await server.spec("x")
