"""Your own tools in the engine's loop: two functions registered from their type hints and docstrings, a
session on any provider spec, each turn's answer and card printed.

    python examples/own_tools.py                                  # the bundled local model (needs [local])
    VAK_MODEL=openai:gpt-4o-mini python examples/own_tools.py     # any provider:model spec (key from env)

tests/unit/test_examples.py runs it against a scripted OpenAI-compatible model; docs/EMBEDDING.md explains it.
"""

import asyncio
import os
import subprocess

import vak_context

NOTES = {"release": "0.1.0 shipped on 2026-12-01", "owner": "the platform team owns the ledger"}


def web_search(query: str) -> list[dict[str, str]]:
    """Search the team's notes; returns the matching notes, best first.

    Args:
        query: what to search for
    """
    words = set(query.lower().split())
    return [{"key": k, "text": v} for k, v in NOTES.items() if words & set(f"{k} {v}".lower().split())]


def run_command(command: str) -> str:
    """Run a shell command in the current folder; returns its output and exit code.

    Args:
        command: the command line
    """
    done = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=60)
    return f"{done.stdout}{done.stderr}exit code: {done.returncode}"


async def main(folder: str = "ledger", model: str = os.environ.get("VAK_MODEL", "local:qwen"),
               **binding: object) -> None:
    with vak_context.Engine.open(folder) as engine:
        async with engine.session("demo", model=model, tools=[web_search, run_command],
                                  stance="Say which note or command output the answer comes from.",
                                  **binding) as session:
            for directive in ("search the notes for the release", "run echo hello"):
                result = await session.run(directive)
                print(f"[{result.outcome}] {result.answer}")
                print(result.card.text)


if __name__ == "__main__":
    asyncio.run(main())
