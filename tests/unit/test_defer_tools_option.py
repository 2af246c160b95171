"""``Engine.session(defer_tools=...)``: whether the session's tools go behind ``find_tools`` is decided as
the session binds, on the bound profile's horizon (``vak serve`` binds each conversation once with it): "auto"
defers many large schemas against a small window and keeps them against a large one, "always" defers even
one small tool, "never" keeps them. A bad setting is refused naming the ones it takes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

import vak_context
from vak_context.agent.tools.registry import tool
from vak_context.errors import InvalidInput


def _handle(request: httpx.Request) -> httpx.Response:
    return httpx.Response(404, json={"error": "nothing is served here"})  # binding sends no request


def _client_side(**arguments: Any) -> None:
    raise AssertionError("never run: these tests only bind")


def _tools(n: int) -> list[Any]:
    schema = {"type": "object", "properties": {f"field_{j}": {"type": "string", "description": f"the record's field {j}"}
                                               for j in range(8)}}
    return [tool(_client_side, name=f"tool_{i:02d}", description=f"Tool {i}: it does task {i} on a record.",
                 schema=schema) for i in range(n)]


async def _deferred(folder: Path, setting: str, tools: list[Any], window: int) -> tuple[set[str], set[str]]:
    async with httpx.AsyncClient(transport=httpx.MockTransport(_handle)) as client:
        with vak_context.Engine.open(folder) as engine:
            async with engine.session("s", model="openai-compat:scripted", base_url="http://127.0.0.1:9/v1",
                                      http_client=client, tools=tools, window=window, defer_tools=setting) as session:
                surface = session._bound_loop().config.surface
                return {d.name for d in surface.deferred}, {d.name for d in surface.core}


@pytest.mark.parametrize(("setting", "count", "window", "deferred"), [
    ("auto", 30, 6_000, True), ("auto", 30, 200_000, False), ("always", 1, 200_000, True), ("never", 30, 6_000, False)])
async def test_the_tools_are_deferred_as_the_session_binds(tmp_path: Path, setting: str, count: int, window: int,
                                                           deferred: bool) -> None:
    names = {f"tool_{i:02d}" for i in range(count)}
    behind, core = await _deferred(tmp_path / "ledger", setting, _tools(count), window)
    assert (behind, core & names) == ((names, set()) if deferred else (set(), names))
    assert "find_tools" in core  # the engine's own tools always ride the request


def test_a_bad_setting_is_refused(tmp_path: Path) -> None:
    with vak_context.Engine.open(tmp_path / "ledger") as engine, pytest.raises(
            InvalidInput, match="defer_tools must be one of 'never', 'auto', 'always'"):
        engine.session("s", model="openai-compat:m", defer_tools="sometimes")
