"""The engine's loop on Ray: the same API as in-process, with ``ray=`` at open. Each role is its actor (the
LedgerActor owns the folder, the AssemblerActor projects each request, the EvidenceActor stores the tool
results and closes the turns, the ProbeActor measures the model between turns); the turn loop, your tool and
the model's client stay in this process.

    python examples/ray_loop.py                                       # a local cluster on 127.0.0.1, local:qwen
    VAK_RAY=127.0.0.1:6379 VAK_MODEL=anthropic:claude-sonnet-4-5 python examples/ray_loop.py   # a running cluster

tests/ray/test_examples_ray.py runs it against a scripted OpenAI-compatible model on loopback; docs/EMBEDDING.md
("On Ray") explains it.
"""

import asyncio
import os

import vak_context

ORDERS = {"acme": "ACME: 3 open invoices, 12,400 EUR", "globex": "Globex: paid up"}


def web_search(query: str) -> list[dict[str, str]]:
    """Search the order book; returns the matching customers' summaries.

    Args:
        query: a customer's name
    """
    return [{"customer": k, "summary": v} for k, v in ORDERS.items() if k in query.lower()]


async def main(folder: str = "ledger", model: str = os.environ.get("VAK_MODEL", "local:qwen"),
               ray: bool | str = os.environ.get("VAK_RAY") or True, **binding: object) -> None:
    # ray=True: a local cluster on 127.0.0.1 (or the Ray this process already joined); a string: that cluster.
    with vak_context.Engine.open(folder, ray=ray) as engine:
        async with engine.session("ray-demo", model=model, tools=[web_search], **binding) as session:
            for directive in ("search the orders for acme", "search the orders for globex"):
                result = await session.run(directive)
                print(f"[{result.outcome}] {result.answer}")
            print(f"{len(await session.cards_async())} turns closed, each with its card, in {engine.folder}")


if __name__ == "__main__":
    asyncio.run(main())
