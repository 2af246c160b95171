"""Binding one session to a model in this process: the pieces :mod:`vak_context.engine.api` wires.

``engine/live.py`` wires the CLI's sessions through ``LiveSession``'s private methods; the same wiring for
an embedded session is here as plain functions (the model spec, the profile, the in-process assembler with
its exact counter and packet summariser), so the public API builds sessions from public functions. The two
are meant to merge (live.py then calls these).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, replace
from typing import Any

import httpx

from vak_context.actors.assembler import AssemblerActor
from vak_context.agent.summarise import Summariser, write_packet
from vak_context.context.capacity.profile import CapacityProfile, Horizon, ProfileKey, metadata_profile
from vak_context.context.planner.plan import Plan
from vak_context.context.planner.view import SessionView
from vak_context.context.request.messages import ModelContext
from vak_context.engine.live import DEFAULT_N_CTX, recorded_profile
from vak_context.errors import InvalidInput
from vak_context.providers.base import Provider
from vak_context.providers.local.catalogue import local_profile_key
from vak_context.providers.registry import ALIASES, make_provider, parse_spec
from vak_context.providers.tokencount import token_counter
from vak_context.storage.ledger import LedgerStore

LOCAL = "local"  # ``local:<name>``: a bundled model, served by llama.cpp on 127.0.0.1 for the session
SUMMARY_TOKENS = 256  # one packet summary's cap (a slow local model summarises too), as live.py caps it


@dataclass(frozen=True)
class BoundModel:
    """A session's model: the adapter, the name requests carry, the provider's name for receipts, the key
    its profile is recorded under, and what is known of its window (``ctx``; None: ask the provider)."""

    provider: Provider
    model: str
    provider_name: str
    key: ProfileKey
    ctx: ModelContext | None


def bind_model(spec: str, client: httpx.AsyncClient, stack: ExitStack, *, base_url: str | None = None,
               api_key: str | None = None, window: int | None = None,
               options: dict[str, Any] | None = None) -> BoundModel:
    """The adapter for ``spec`` (``provider:model``, or ``local:<bundled model>``, which starts the bundled
    model's server on ``stack``). Keys come from ``api_key`` or the provider's environment variable (a
    missing one is a ConfigError naming it) and go only into the adapter's headers."""
    name, _, rest = spec.strip().partition(":")
    if name.lower() == LOCAL:
        return _bind_local(rest, client, stack, window)
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
    return BoundModel(provider, model, canonical, ProfileKey(canonical, model), ctx)


def _bind_local(name: str, client: httpx.AsyncClient, stack: ExitStack, window: int | None) -> BoundModel:
    # Imported here: the server module is only needed (and only importable in full) with the [local] extra.
    from vak_context.extras import require_extra
    from vak_context.providers.local.server import LocalModelServer, canonical_model
    from vak_context.providers.openai_compat import OpenAICompatProvider

    model = canonical_model(name or "qwen")
    require_extra(LOCAL, f"the bundled local model ({model})")
    n_ctx = window or DEFAULT_N_CTX
    server = stack.enter_context(LocalModelServer(model, n_ctx=n_ctx))
    provider = OpenAICompatProvider(client, base_url=server.base_url, api_key=server.api_key, timeout_s=900.0)
    ctx = ModelContext(provider=LOCAL, model=model, declared_window=n_ctx, source="the local server's n_ctx")
    return BoundModel(provider, model, LOCAL, local_profile_key(model), ctx)


async def session_profile(store: LedgerStore, bound: BoundModel, *, horizon: int | None = None,
                          output_reserve: int | None = None, now: float | None = None) -> CapacityProfile:
    """The newest profile the ledger records for the model's key; else the metadata rung's, from the
    caller's window or the provider's metadata, with the caller's horizon and output reserve over it."""
    # Read through a read-only view of the folder: the scan covers every session, and a writer's scan would
    # take every session's writer lock (shutting out another engine writing a different session).
    with LedgerStore(store.root, readonly=True) as reader:
        recorded = recorded_profile(reader, bound.key)
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
                         tokens_per_char: Callable[[], float]) -> AssemblerActor:
    """The assembler as live.py wires it in-process: requests sized by the server's own tokenizer where it
    has one (else chars x the profile's calibrated rate), packets summarised by the same model (a side
    call with its own prompt, never the turn's history)."""
    counter = token_counter(bound.provider, tokens_per_char)
    summariser = Summariser(bound.provider, bound.model, window_tokens=window_tokens,
                            max_summary_tokens=SUMMARY_TOKENS)
    assembler: AssemblerActor

    async def summarise(view: SessionView, plan: Plan) -> list[str]:
        return await write_packet(assembler.ledger, session, view, plan, summariser)

    assembler = AssemblerActor(str(store.root), store, summarise=summarise, count=counter.count)
    return assembler
