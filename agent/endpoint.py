"""Where an actor finds the bound model's server, when it must call it itself (the Ray path).

In-process the turn's caller hands the AssemblerActor ready callables (an exact token counter and a
packet summariser over its own ``httpx.AsyncClient``). A client cannot travel to a Ray actor (it holds
sockets and an event loop), so on Ray each step request carries this small, picklable description
instead, and the actor builds the same two tools from it inside its own event loop, once per endpoint.

``api_key`` never shows in a repr (Ray prints task arguments in some errors) and is never written to
the ledger: the step request it rides on is not an entry.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from vak_context.agent.request import SessionView, Summarise
from vak_context.agent.summarise import Summariser, write_packet
from vak_context.context.planner.plan import Plan
from vak_context.context.request.messages import ChatRequest


@dataclass(frozen=True)
class ModelEndpoint:
    """An OpenAI-compatible server (llama.cpp's among them) the actor may call for the bound model."""

    base_url: str
    model: str
    window_tokens: int  # the summariser's usable window (the server's n_ctx for a local model)
    api_key: str | None = field(default=None, repr=False)
    max_summary_tokens: int | None = 256
    timeout_s: float = 900.0

    @property
    def ident(self) -> tuple[str, str]:
        """Endpoints with the same server and model share one client, counter and summariser."""
        return (self.base_url, self.model)


@dataclass
class EndpointTools:
    """The counter and summariser built for one endpoint, with the client they share."""

    client: httpx.AsyncClient
    count: Callable[[ChatRequest], Awaitable[int]]
    summariser: Summariser

    def summarise_for(self, ledger: Any, session: str) -> Summarise:
        async def summarise(view: SessionView, plan: Plan) -> list[str]:
            return await write_packet(ledger, session, view, plan, self.summariser)

        return summarise


def build_tools(endpoint: ModelEndpoint, tokens_per_char: Callable[[], float]) -> EndpointTools:
    """The exact token counter (the server's own template and tokenizer, or the chars ratio where the
    server has no such endpoint) and a summariser on the same model, over one new client."""
    from vak_context.providers.openai_compat import OpenAICompatProvider
    from vak_context.providers.tokencount import token_counter

    client = httpx.AsyncClient(trust_env=False, timeout=endpoint.timeout_s)
    provider = OpenAICompatProvider(client, base_url=endpoint.base_url, api_key=endpoint.api_key,
                                    timeout_s=endpoint.timeout_s)
    counter = token_counter(provider, tokens_per_char)
    summariser = Summariser(provider, endpoint.model, window_tokens=endpoint.window_tokens,
                            max_summary_tokens=endpoint.max_summary_tokens)
    return EndpointTools(client=client, count=counter.count, summariser=summariser)
