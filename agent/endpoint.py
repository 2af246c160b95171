"""The bound model's counter and summariser (``model_tools``), and where an actor finds its server (Ray).

The AssemblerActor needs two tools on the bound model: an exact token counter and a packet summariser.
``model_tools`` builds both over one provider adapter, for every path. In-process the turn's caller
builds them over its own ``httpx.AsyncClient`` and hands them to the actor. A client cannot travel to a
Ray actor (it holds sockets and an event loop), so on Ray each step request carries a ``ModelEndpoint``,
this small, picklable description, and the actor builds the same tools from it (``build_tools``) inside
its own event loop, once per endpoint.

``api_key`` never shows in a repr (Ray prints task arguments in some errors) and is never written to
the ledger: the step request it rides on is not an entry.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from vak_context.agent.request import Summarise
from vak_context.agent.summarise import Summariser, write_packet
from vak_context.context.planner.plan import Plan
from vak_context.context.planner.view import SessionView
from vak_context.context.request.messages import ChatRequest
from vak_context.providers.base import Provider


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
class ModelTools:
    """The bound model's exact token counter and packet summariser, over one provider adapter."""

    count: Callable[[ChatRequest], Awaitable[int]]
    summariser: Summariser

    def summarise_for(self, ledger: Any, session: str) -> Summarise:
        """The summariser as the AssemblerActor calls it: write the plan's packet into ``session``."""
        async def summarise(view: SessionView, plan: Plan) -> list[str]:
            return await write_packet(ledger, session, view, plan, self.summariser)

        return summarise


@dataclass
class EndpointTools(ModelTools):
    """The tools built for one endpoint, with the client they share (closed with the actor)."""

    client: httpx.AsyncClient


def model_tools(provider: Provider, model: str, *, window_tokens: int, tokens_per_char: Callable[[], float],
                max_summary_tokens: int | None = 256) -> ModelTools:
    """The exact token counter (the server's own template and tokenizer, or the chars ratio where the
    server has no such endpoint) and a summariser on the same model (``window_tokens`` its usable window,
    the server's n_ctx for a local model): the one place both are built for a bound model."""
    from vak_context.providers.tokencount import token_counter

    summariser = Summariser(provider, model, window_tokens=window_tokens, max_summary_tokens=max_summary_tokens)
    return ModelTools(count=token_counter(provider, tokens_per_char).count, summariser=summariser)


def build_tools(endpoint: ModelEndpoint, tokens_per_char: Callable[[], float]) -> EndpointTools:
    """``model_tools`` for an endpoint, over one new client (the Ray path)."""
    from vak_context.providers.openai_compat import OpenAICompatProvider

    client = httpx.AsyncClient(trust_env=False, timeout=endpoint.timeout_s)
    provider = OpenAICompatProvider(client, base_url=endpoint.base_url, api_key=endpoint.api_key,
                                    timeout_s=endpoint.timeout_s)
    tools = model_tools(provider, endpoint.model, window_tokens=endpoint.window_tokens,
                        tokens_per_char=tokens_per_char, max_summary_tokens=endpoint.max_summary_tokens)
    return EndpointTools(count=tools.count, summariser=tools.summariser, client=client)
