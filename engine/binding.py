"""Binding one session to a model: the pieces :mod:`vak_context.engine.api` wires, in-process or on Ray.

Plain functions: the model spec (``bind_model``), the profile (``session_profile``: recorded in the ledger,
else metadata and the caller's overrides), the in-process assembler with its exact counter and packet
summariser, and on Ray the services (``ray_services``: the folder's actors, with the ProbeActor and the
bound model's probe target) and the endpoint the AssemblerActor builds its counter and summariser from.
Every session (the CLI's among them) is wired by the public API through these: one wiring.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from typing import Any

import httpx

from vak_context.actors.assembler import AssemblerActor
from vak_context.agent.endpoint import EndpointSpec
from vak_context.agent.summarise import Summariser
from vak_context.agent.tools import engine_tools
from vak_context.agent.workspace import TOOLS as WORKSPACE_TOOLS
from vak_context.context.capacity.profile import (
    CapacityProfile,
    Horizon,
    ProfileKey,
    Protocol,
    from_record,
    metadata_profile,
)
from vak_context.context.history.cards import card_tools
from vak_context.context.request.messages import ModelContext
from vak_context.context.request.surface import Surface, ToolDecl
from vak_context.errors import InvalidInput, VakError
from vak_context.events.envelope import Mapper, StoredEntry
from vak_context.events.payloads import CapacityProfileRecord
from vak_context.providers.base import Provider
from vak_context.providers.local.catalogue import local_profile_key
from vak_context.providers.registry import ALIASES, make_provider, parse_spec
from vak_context.providers.tokencount import token_counter
from vak_context.storage.ledger import LedgerStore

LOCAL = "local"  # ``local:<name>``: a bundled model, served by llama.cpp on 127.0.0.1 for the session
SUMMARY_TOKENS = 256  # one packet summary's cap (a slow local model summarises too)
DEFAULT_N_CTX = 16384  # a bundled model's context size when the caller sets no window


def default_surface(*, cards_loaded: bool = False) -> Surface:
    """The engine's tools (recall, find_tools, session_search) and the workspace tools, always loaded, in
    that order; the card tools loaded too, or (the default) listed in the catalogue for find_tools. Their
    schemas are about 2,000 tokens: a fifth of a small model's measured horizon, spent on every request,
    for tools it rarely needs."""
    core = list(engine_tools().decls())
    core += [ToolDecl(t.spec, always_loaded=True, observes=t.observes) for t in WORKSPACE_TOOLS]
    core += [ToolDecl(spec, always_loaded=cards_loaded, observes=False) for spec in card_tools()]
    return Surface.build(core)


def profile_of(entry: StoredEntry | None) -> CapacityProfile | None:
    """The capacity profile a ``capacity_profile`` entry records (None for none)."""
    if entry is None:
        return None
    record = Mapper().payload_of(entry)
    return from_record(record) if isinstance(record, CapacityProfileRecord) else None


def recorded_profile(store: LedgerStore, key: ProfileKey) -> CapacityProfile | None:
    """The newest capacity profile recorded for ``key`` in any session of the ledger (a probe's, in its
    own session, or one a session's receipts tightened), read from the ledger's index, not its entries
    (storage/ledger_index.py). Blocking: from async code, in a worker thread."""
    return profile_of(store.profile_entry(key.provider, key.model, key.quantisation))


@dataclass(frozen=True)
class BoundModel:
    """A session's model: the adapter, the name requests carry, the provider's name for receipts, the key
    its profile is recorded under, and what is known of its window (``ctx``; None: ask the provider)."""

    provider: Provider
    model: str
    provider_name: str
    key: ProfileKey
    ctx: ModelContext | None
    base_url: str | None = None  # where the adapter sends requests (the Ray actors' endpoint and probe)
    protocol: Protocol | None = None  # how a bundled model makes its calls (the local catalogue's); None: not declared
    api_key: str | None = field(default=None, repr=False)  # that server's key; never in a repr or the ledger

    def endpoint(self, window_tokens: int, summary: EndpointSpec | None = None, *,
                 summaries: bool = True, stated_pass: bool = False) -> EndpointSpec:
        """The bound model as the Ray actors reach it (agent/endpoint.py): the AssemblerActor and the
        PlannerActor build its counter and summariser from this (``summary``: another model's endpoint for
        the packet summaries), the ProbeActor its probe. Only a bundled model's server carries its own
        per-run key here; a provider's key is read from the environment inside the actors and never
        travels through Ray."""
        if self.provider_name == LOCAL:
            return EndpointSpec(base_url=self.base_url, model=self.model, window_tokens=window_tokens,
                                 api_key=self.api_key, max_summary_tokens=SUMMARY_TOKENS, summary=summary,
                                 summaries=summaries, stated_pass=stated_pass)
        return EndpointSpec.of(f"{self.provider_name}:{self.model}", window_tokens=window_tokens,
                                base_url=self.base_url, max_summary_tokens=SUMMARY_TOKENS, summary=summary,
                                summaries=summaries, stated_pass=stated_pass)


def bind_model(spec: str, client: httpx.AsyncClient, stack: ExitStack, *, base_url: str | None = None,
               api_key: str | None = None, window: int | None = None,
               options: dict[str, Any] | None = None) -> BoundModel:
    """The adapter for ``spec`` (``provider:model``, or ``local:<bundled model>``, which starts the bundled
    model's server on ``stack`` unless ``base_url`` names one already running). Keys come from ``api_key``
    or the provider's environment variable (a missing one is a ConfigError naming it) and go only into the
    adapter's headers."""
    name, _, rest = spec.strip().partition(":")
    if name.lower() == LOCAL:
        return _bind_local(rest, client, stack, window, base_url, api_key)
    try:
        parse_spec(spec)
    except InvalidInput as exc:
        raise InvalidInput(f"{exc} A bundled model is local:<name>, e.g. local:qwen (the [local] extra).") from exc
    provider, model = make_provider(spec, client, api_key=api_key, base_url=base_url, **(options or {}))
    if not model:
        raise InvalidInput(f"{spec!r} names no model: write it as provider:model, e.g. openai:gpt-4o-mini")
    canonical = ALIASES.get(name.lower(), name.lower())
    ctx = None
    if window is not None:  # the caller's window wins over (and saves asking) the provider's metadata
        ctx = ModelContext(provider=canonical, model=model, declared_window=window, source="the caller's window=")
    # No key kept here: a provider's key stays in its adapter's headers (and, on Ray, in the environment).
    return BoundModel(provider, model, canonical, ProfileKey(canonical, model), ctx,
                      base_url=getattr(provider, "base_url", None))


def _bind_local(name: str, client: httpx.AsyncClient, stack: ExitStack, window: int | None,
                base_url: str | None, api_key: str | None) -> BoundModel:
    from vak_context.providers.local.catalogue import canonical_model, local_protocol
    from vak_context.providers.openai_compat import OpenAICompatProvider

    model = canonical_model(name or "qwen")
    n_ctx = window or DEFAULT_N_CTX
    if base_url is None:
        # Imported here: the server module is only needed (and only importable in full) with the [local] extra.
        from vak_context.extras import require_extra

        require_extra(LOCAL, f"the bundled local model ({model})")
        from vak_context.providers.local.server import LocalModelServer

        server = stack.enter_context(LocalModelServer(model, n_ctx=n_ctx))
        base_url, api_key = server.base_url, server.api_key
    provider = OpenAICompatProvider(client, base_url=base_url, api_key=api_key, timeout_s=900.0)
    ctx = ModelContext(provider=LOCAL, model=model, declared_window=n_ctx, source="the local server's n_ctx")
    return BoundModel(provider, model, LOCAL, local_profile_key(model), ctx, base_url=base_url, api_key=api_key,
                      protocol=local_protocol(model))


async def session_profile(store: LedgerStore | None, bound: BoundModel, *, horizon: int | None = None,
                          output_reserve: int | None = None, now: float | None = None,
                          ledger: Any = None) -> CapacityProfile:
    """The newest profile the ledger records for the model's key; else the metadata rung's, from the
    caller's window or the provider's metadata, with the caller's horizon and output reserve over it.

    ``store``: the folder's writer in this process; on Ray ``store`` is None and ``ledger`` is a
    ``LedgerClient`` over the folder's LedgerActor (the driver never opens the folder itself)."""
    # From the ledger's index (a small file per session), in a worker thread or the LedgerActor: never on the
    # event loop, and never a writer's lock on a session the lookup does not bind.
    if store is not None:
        recorded = await asyncio.to_thread(recorded_profile, store, bound.key)
    else:
        key = bound.key
        recorded = profile_of(await ledger.profile_entry_async(key.provider, key.model, key.quantisation))
    if recorded is not None:
        return recorded
    at = time.time() if now is None else now
    ctx = bound.ctx or await bound.provider.model_context(bound.model)
    profile = metadata_profile(bound.key, ctx, now=at)
    if output_reserve is not None:
        if not 0 < output_reserve < profile.declared_window:
            raise InvalidInput(f"output_reserve={output_reserve} must be between 1 and the window "
                               f"({profile.declared_window} tokens); pass a smaller one or a larger window=")
        profile = replace(profile, output_reserve=output_reserve)
    if horizon is not None:
        if horizon <= 0:
            raise InvalidInput(f"horizon={horizon} must be a positive number of tokens")
        # The caller's figure stands in for a measurement, at the metadata rung's confidence.
        profile = replace(profile, instruction_horizon=Horizon(horizon, profile.instruction_horizon.confidence, at))
    return profile


def in_process_assembler(store: LedgerStore, session: str, bound: BoundModel, window_tokens: int,
                         tokens_per_char: Callable[[], float],
                         summary: tuple[BoundModel, int] | None = None, *, summaries: bool = True,
                         stated_pass: bool = False) -> AssemblerActor:
    """The assembler in-process: requests sized by the provider's own count where it has one (else chars x
    the profile's calibrated rate), packets summarised by the same model, or by ``summary`` (another bound
    model and its window: a cheaper one), as a side call with its own prompt, never the turn's history.
    ``summaries`` False: no summariser call; packets carry the deterministic extract. ``stated_pass``: the
    summariser's model also reads each closed turn's directive for stated items (docs/STATE.md)."""
    counter = token_counter(bound.provider, tokens_per_char)
    on, window = (bound, window_tokens) if summary is None else summary
    summariser = Summariser(on.provider, on.model, window_tokens=window, max_summary_tokens=SUMMARY_TOKENS,
                            enabled=summaries, stated_pass=stated_pass)
    # The planner holds the summariser and writes each packet through its own ledger client.
    return AssemblerActor(str(store.root), store, summariser=summariser, count=counter.count)


def ray_services(root: str | os.PathLike[str], session: str, bound: BoundModel, window_tokens: int,
                 summary: tuple[BoundModel, int] | None = None, *, index_at_close: bool = True,
                 summaries: bool = True, stated_pass: bool = False) -> Any:
    """The turn loop's services on Ray for a session bound to ``bound``, and the endpoint its
    ``TurnConfig`` carries: the folder's Ledger, Planner, Assembler and Evidence actors, and its ProbeActor
    with the bound model as the target (probed in the background after a turn, cancelled when a turn on it
    starts; a hosted model only where the operator's config allows it)."""
    from vak_context.actors.turn_services import ray_services as actor_services

    endpoint = bound.endpoint(window_tokens, None if summary is None else summary[0].endpoint(summary[1]),
                              summaries=summaries, stated_pass=stated_pass)
    services, _target = actor_services(root, session, endpoint, bound.key, local=True if bound.provider_name == LOCAL
                                       else None, index_at_close=index_at_close)
    return services, endpoint


async def summary_model(spec: str, client: httpx.AsyncClient, stack: ExitStack, *, base_url: str | None,
                        fallback_window: int) -> tuple[BoundModel, int]:
    """The model packet summaries are written with, when it is not the session's own (a cheaper one), and
    its window: the provider's published one, else the session's."""
    bound = bind_model(spec, client, stack, base_url=base_url)
    if bound.ctx is not None and bound.ctx.declared_window:
        return bound, bound.ctx.declared_window
    try:
        published = (await bound.provider.model_context(bound.model)).declared_window
    except VakError:
        published = None
    # A provider that publishes no window: the summary's input is bounded by the session's.
    return bound, published or fallback_window
