"""Registered tools through a real TurnLoop (scripted llama.cpp bodies): an async tool, a sync one in a
worker thread, a read-only repeat the rule answers, a deferred tool reached through find_tools, and a tool
that raises (the model gets an error result naming the exception; the turn completes with a card)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from tests.fakes.tool_turns import completion, run_turn
from vak_context.agent.tools import ToolRegistry


async def test_an_async_and_a_sync_tool_run_and_their_results_are_stored_in_call_order(tmp_path: Path) -> None:
    """Both calls of one step run concurrently (the async one waits until the sync one, in a worker
    thread, has run: a sync tool on the loop's thread would deadlock here); results are in call order."""
    registry = ToolRegistry()
    sync_ran = threading.Event()
    threads: list[str] = []

    @registry.tool(observes=True)
    async def slow_quote(symbol: str) -> dict[str, object]:
        """The latest quote for a symbol."""
        deadline = asyncio.get_running_loop().time() + 10
        while not sync_ran.is_set():  # poll with a deadline: the sync tool must run meanwhile
            assert asyncio.get_running_loop().time() < deadline, "the sync tool never ran"
            await asyncio.sleep(0.01)
        return {"symbol": symbol, "price": 101.5}

    @registry.tool
    def count_words(text: str) -> int:
        """Count the words of a text."""
        threads.append(threading.current_thread().name)
        sync_ran.set()
        return len(text.split())

    report, kinds, script = await run_turn(tmp_path, registry, [
        completion(calls=[("slow_quote", {"symbol": "ACME"}), ("count_words", {"text": "one two three"})]),
        completion("ACME is 101.5; three words."),
    ])
    results = kinds["tool_result"]
    assert report.outcome == "completed" and kinds["turn_card"]
    assert [r.content for r in results] == ['{"symbol": "ACME", "price": 101.5}', "3"]
    assert [r.is_error for r in results] == [False, False]
    assert threads and threads[0] != threading.main_thread().name
    assert {t["function"]["name"] for t in script.bodies[0]["tools"]} >= {"slow_quote", "count_words", "recall"}


async def test_a_read_only_tool_repeated_is_answered_by_the_rule_and_not_run_again(tmp_path: Path) -> None:
    registry = ToolRegistry()
    runs: list[str] = []

    @registry.tool(read_only=True)
    def lookup(key: str) -> str:
        """Look a key up in the settings."""
        runs.append(key)
        return f"{key}=on"

    report, kinds, _ = await run_turn(tmp_path, registry, [
        completion(calls=[("lookup", {"key": "dark_mode"})]),
        completion(calls=[("lookup", {"key": "dark_mode"})]),
        completion("dark_mode is on."),
    ])
    results = kinds["tool_result"]
    assert runs == ["dark_mode"]
    assert results[0].content == "dark_mode=on" and results[1].is_error
    assert results[1].content.startswith("[repeated-call]")
    assert any(a.activity == "rule.repeated_call" for a in kinds["activity"])
    assert report.outcome == "completed"


async def test_a_tool_not_declared_read_only_is_run_again(tmp_path: Path) -> None:
    registry = ToolRegistry()
    runs: list[str] = []

    @registry.tool
    def roll(sides: int) -> int:
        """Roll a die."""
        runs.append("r")
        return len(runs)

    await run_turn(tmp_path, registry, [
        completion(calls=[("roll", {"sides": 6})]), completion(calls=[("roll", {"sides": 6})]), completion("2"),
    ])
    assert runs == ["r", "r"]


async def test_a_deferred_tool_is_in_the_catalogue_and_reached_through_find_tools(tmp_path: Path) -> None:
    registry = ToolRegistry()

    @registry.tool(deferred=True, observes=True)
    async def exchange_rate(base: str, quote: str = "EUR") -> float:
        """Look up a currency exchange rate. Returns the rate now.

        Args:
            base: the currency to convert from, e.g. USD
            quote: the currency to convert to
        """
        return 0.92

    report, kinds, script = await run_turn(tmp_path, registry, [
        completion(calls=[("find_tools", {"query": "currency exchange rate"})]),
        completion(calls=[("exchange_rate", {"base": "USD"})]),
        completion("1 USD is 0.92 EUR."),
    ], directive="what is the USD to EUR exchange rate?")
    results = kinds["tool_result"]
    assert "exchange_rate" not in str(script.bodies[0]["tools"])
    assert "- exchange_rate — Look up a currency exchange rate." in script.bodies[0]["messages"][0]["content"]
    assert '"name": "exchange_rate"' in results[0].content and "the currency to convert from" in results[0].content
    assert results[1].content == "0.92" and not results[1].is_error
    assert not any(a.activity == "surface.misread" for a in kinds.get("activity", []))
    assert report.outcome == "completed" and report.answer == "1 USD is 0.92 EUR."


async def test_a_tool_that_raises_gives_an_error_result_naming_the_exception_and_the_turn_completes(
        tmp_path: Path) -> None:
    registry = ToolRegistry()
    secret = "s3cr3t-local"

    @registry.tool
    def settings(name: str) -> str:
        """Read one setting."""
        table = {"theme": secret}
        return table[name]

    report, kinds, _ = await run_turn(tmp_path, registry, [
        completion(calls=[("settings", {"name": "colour"}), ("settings", {"nope": 1})]),
        completion("There is no colour setting."),
    ])
    results = kinds["tool_result"]
    assert results[0].is_error and results[0].content == "settings failed: KeyError: 'colour'"
    assert secret not in results[0].content and "Traceback" not in results[0].content
    assert results[1].is_error and "do not fit its parameters" in results[1].content
    assert report.outcome == "completed" and len(kinds["turn_card"]) == 1
    assert not any(a.activity == "turn.failed" for a in kinds.get("activity", []))
