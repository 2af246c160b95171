"""The bound model's counter and summariser (``model_tools``), and where an actor finds its model (Ray).

The AssemblerActor needs an exact token counter on the bound model and the PlannerActor a packet
summariser. ``model_tools`` builds both over one provider adapter, for every path. In-process the turn's
caller builds them over its own ``httpx.AsyncClient`` and hands them to the actors. A client cannot travel
to a Ray actor (it holds sockets and an event loop), so on Ray each step request carries a
``EndpointSpec``, this small, picklable description of any provider spec (``provider:model``, as
``vak_context.providers.registry.make_provider`` reads it, with its base URL and window, and optionally
a cheaper model for summaries), and each actor builds the same tools from it (``build_tools``) inside its
own event loop, once per endpoint.

**Keys.** A hosted provider's key (``ANTHROPIC_API_KEY``, ``GEMINI_API_KEY``, ...) is never in an endpoint:
``make_provider`` reads it from the environment *inside the actor*, so it never travels through Ray and is
never written anywhere. On a cluster this process connects to, the workers' environment must hold the key
(start the workers with it, e.g. ``env ANTHROPIC_API_KEY=... ray start ...``); a missing one is a
``ConfigError`` naming the variable. ``api_key`` is only for a loopback server's own per-session key (the
bundled llama.cpp model's): it never shows in a repr (Ray prints task arguments in some errors) and is
never written to the ledger (the step request it rides on is not an entry).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from vak_context.agent.summarise import Summariser
from vak_context.context.request.messages import ChatRequest
from vak_context.providers.base import Provider

OPENAI_COMPAT = "openai-compat"  # the provider an endpoint names by default (llama.cpp and its kin)


@dataclass(frozen=True)
class EndpointSpec:
    """A model the actors may call for the bound session: any provider ``make_provider`` knows.

    ``provider`` and ``model`` make the spec (``spec``); ``base_url`` None is the provider's default.
    ``window_tokens`` is the summariser's usable window (the server's n_ctx for a local model).
    ``summary``: another endpoint for packet summaries (a cheaper model); None summarises on this one.
    ``summaries`` False (``summaries="off"``): no summariser call; packets carry the deterministic extract.
    ``stated_pass`` True (``stated_pass="model"``): the summariser's model also reads each closed turn's
    directive for stated items (``vak_context.agent.stated_pass``).
    """

    base_url: str | None
    model: str
    window_tokens: int
    api_key: str | None = field(default=None, repr=False)  # a loopback server's own key only (see above)
    max_summary_tokens: int | None = 256
    timeout_s: float = 900.0
    provider: str = OPENAI_COMPAT
    summary: EndpointSpec | None = None
    summaries: bool = True
    stated_pass: bool = False

    @classmethod
    def of(cls, spec: str, *, window_tokens: int, base_url: str | None = None,
           summary: EndpointSpec | None = None, max_summary_tokens: int | None = 256,
           timeout_s: float = 900.0, summaries: bool = True, stated_pass: bool = False) -> EndpointSpec:
        """The endpoint for a ``provider:model`` spec (the provider canonical, an alias resolved)."""
        from vak_context.providers.registry import parse_spec

        provider, model = parse_spec(spec)
        return cls(base_url=base_url, model=model, window_tokens=window_tokens, provider=provider,
                   summary=summary, max_summary_tokens=max_summary_tokens, timeout_s=timeout_s, summaries=summaries,
                   stated_pass=stated_pass)

    @property
    def spec(self) -> str:
        """``provider:model``, as ``vak_context.providers.registry.make_provider`` reads it."""
        return f"{self.provider}:{self.model}"

    @property
    def ident(self) -> tuple[Any, ...]:
        """Endpoints with the same provider, server, model (and summary model) share one client and tools."""
        return (self.provider, self.base_url, self.model, self.summary.ident if self.summary else None,
                self.summaries, self.stated_pass)


@dataclass
class ModelTools:
    """The bound model's exact token counter and packet summariser, over one provider adapter."""

    count: Callable[[ChatRequest], Awaitable[int]]
    summariser: Summariser  # the object the PlannerActor holds and writes packets with


@dataclass
class EndpointTools(ModelTools):
    """The tools built for one endpoint, with the client they share (closed with the actor)."""

    client: httpx.AsyncClient


def model_tools(provider: Provider, model: str, *, window_tokens: int, tokens_per_char: Callable[[], float],
                max_summary_tokens: int | None = 256,
                summary: tuple[Provider, str, int] | None = None, summaries: bool = True,
                stated_pass: bool = False) -> ModelTools:
    """The exact token counter (``vak_context.providers.tokencount.token_counter``: the provider's own count
    where it has one, else the chars ratio) and a summariser, on the same model by default (``window_tokens``
    its usable window, the server's n_ctx for a local model) or on ``summary`` (adapter, model, window):
    the one place both are built for a bound model."""
    from vak_context.providers.tokencount import token_counter

    on, name, window = summary if summary is not None else (provider, model, window_tokens)
    summariser = Summariser(on, name, window_tokens=window, max_summary_tokens=max_summary_tokens, enabled=summaries,
                            stated_pass=stated_pass)
    return ModelTools(count=token_counter(provider, tokens_per_char).count, summariser=summariser)


def endpoint_provider(endpoint: EndpointSpec, client: httpx.AsyncClient) -> Provider:
    """The adapter for ``endpoint`` over ``client``; the key from the environment unless the endpoint
    carries a loopback server's own."""
    from vak_context.providers.registry import make_provider

    return make_provider(endpoint.spec, client, api_key=endpoint.api_key, base_url=endpoint.base_url,
                         timeout_s=endpoint.timeout_s).provider


def build_tools(endpoint: EndpointSpec, tokens_per_char: Callable[[], float]) -> EndpointTools:
    """``model_tools`` for an endpoint, over one new client (the Ray path)."""
    client = httpx.AsyncClient(trust_env=False, timeout=endpoint.timeout_s)
    provider = endpoint_provider(endpoint, client)
    summary = None
    if endpoint.summary is not None:
        s = endpoint.summary
        summary = (endpoint_provider(s, client), s.model, s.window_tokens)
    tools = model_tools(provider, endpoint.model, window_tokens=endpoint.window_tokens,
                        tokens_per_char=tokens_per_char, max_summary_tokens=endpoint.max_summary_tokens,
                        summary=summary, summaries=endpoint.summaries, stated_pass=endpoint.stated_pass)
    return EndpointTools(count=tools.count, summariser=tools.summariser, client=client)
