"""A session's turn loop wired from its options (:meth:`vak_context.engine.api.Session.start`): the model
bound, its profile read from the ledger, the services in-process (the assembler over this process's store)
or on Ray (the folder's actors), the tools' surface and the turn's config.

Split from :mod:`vak_context.engine.api` so that the public names stay one short module: this is the one
wiring every session (the CLI's among them) goes through; its pieces are :mod:`vak_context.engine.binding`'s.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vak_context.errors import InvalidInput

if TYPE_CHECKING:
    import httpx

    from vak_context.agent.endpoint import EndpointSpec
    from vak_context.agent.loop import StepReport, TurnLoop, TurnServices
    from vak_context.agent.tools.registry import ToolRegistry
    from vak_context.context.capacity.profile import CapacityProfile
    from vak_context.engine.binding import BoundModel
    from vak_context.engine.results import Step
    from vak_context.storage.ledger import LedgerStore


@dataclass(frozen=True)
class SessionOptions:
    """What :meth:`vak_context.engine.api.Engine.session` was given, as given (checked there)."""

    model: str
    tools: Any
    workspace: str | os.PathLike[str] | None
    stance: str | None
    identity: str | None
    window: int | None
    horizon: int | None
    output_reserve: int | None
    base_url: str | None
    api_key: str | None
    http_client: Any
    on_step: Callable[[Step], None] | None
    on_text: Callable[[str], None] | None
    summary_model: str | None
    summary_base_url: str | None
    card_tools: bool
    max_steps: int
    max_tokens: int
    timezone: str
    repeat_rule: str
    rules: Any = None  # as given (str, mapping or None: the driver's default); checked by Engine.session
    calls: str | None = None
    summaries: bool = True
    stated_pass: bool = False
    defer_tools: str = "never"


async def bind_loop(name: str, o: SessionOptions, client: httpx.AsyncClient, stack: ExitStack,
                    store: LedgerStore | None, folder: Path, *, index_at_close: bool,
                    on_step: Callable[[StepReport], None] | None) -> TurnLoop:
    """The bound loop of session ``name``: in-process over ``store``, or (``store`` None) on Ray over the
    actors of ``folder``. ``stack`` keeps what binding starts (the bundled model's server)."""
    from vak_context.agent.loop import TurnConfig, TurnLoop
    from vak_context.agent.tools import surface_for
    from vak_context.context.request.assemble import DEFAULT_IDENTITY, DEFAULT_STANCE, system_prompt
    from vak_context.context.request.toolcalls import calls_in_text
    from vak_context.engine.binding import bind_model

    bound = bind_model(o.model, client, stack, base_url=o.base_url, api_key=o.api_key, window=o.window)
    if store is None:
        profile, services, endpoint = await _on_ray(name, o, client, stack, folder, bound,
                                                    index_at_close=index_at_close)
    else:
        # The counter follows the profile that receipts keep calibrating: read from the loop at each count.
        profile, services = await _in_process(name, o, client, stack, store, bound, index_at_close=index_at_close,
                                              tokens_per_char=lambda: loop.profile.tokens_per_char.value)
        endpoint = None
    # Decided on the profile just bound: one bind, whatever the tools' share of the horizon.
    registry = _registry(o.tools, o.workspace).deferring(o.defer_tools, profile.instruction_horizon.tokens,
                                                         profile.tokens_per_char.value)
    surface = surface_for(registry, *(_card_decls() if o.card_tools else ()))
    config = TurnConfig(model=bound.model, provider=bound.provider_name,
                        system=system_prompt(surface.catalogue(), identity=o.identity or DEFAULT_IDENTITY),
                        surface=surface, max_steps=o.max_steps, max_tokens=o.max_tokens, timezone=o.timezone,
                        session_key=name, stance=o.stance if o.stance is not None else DEFAULT_STANCE,
                        endpoint=endpoint, repeat_rule="redo" if o.repeat_rule == "redo" else "close",
                        text_calls=calls_in_text(o.calls, profile.provenance.protocol, bound.protocol))
    loop = TurnLoop(services, bound.provider, profile, config, tools=registry, on_step=on_step, on_text=o.on_text)
    return loop


async def _on_ray(name: str, o: SessionOptions, client: httpx.AsyncClient, stack: ExitStack, folder: Path,
                  bound: BoundModel, *, index_at_close: bool,
                  ) -> tuple[CapacityProfile, TurnServices, EndpointSpec | None]:
    """On Ray: the folder's actors; the profile is read through the LedgerActor."""
    from vak_context.actors.factory import ledger_actor
    from vak_context.actors.ledger.client import LedgerClient
    from vak_context.engine.binding import ray_services, session_profile, summary_model

    reader = LedgerClient(str(folder), ledger_actor(folder), coalesce=False)
    profile = await session_profile(None, bound, horizon=o.horizon, output_reserve=o.output_reserve, ledger=reader)
    # The actors build the exact counter and the packet summariser from the endpoint (a client cannot
    # travel to an actor); the ProbeActor probes it between turns.
    summary = None if o.summary_model is None else await summary_model(
        o.summary_model, client, stack, base_url=o.summary_base_url, fallback_window=profile.declared_window)
    services, endpoint = ray_services(folder, name, bound, profile.declared_window, summary,
                                      index_at_close=index_at_close, summaries=o.summaries,
                                      stated_pass=o.stated_pass)
    return profile, services, endpoint


async def _in_process(name: str, o: SessionOptions, client: httpx.AsyncClient, stack: ExitStack,
                      store: LedgerStore, bound: BoundModel, *, index_at_close: bool,
                      tokens_per_char: Callable[[], float]) -> tuple[CapacityProfile, TurnServices]:
    """In this process: the actor classes as plain objects over ``store``."""
    from vak_context.actors.local_services import InProcessServices
    from vak_context.engine.binding import in_process_assembler, session_profile, summary_model

    # Takes the session's writer lock now (SessionLocked if another writer holds it), reading the session
    # in: in a worker thread, so that a long session does not hold up the event loop.
    await asyncio.to_thread(_hold, store, name)
    profile = await session_profile(store, bound, horizon=o.horizon, output_reserve=o.output_reserve)
    summary = None if o.summary_model is None else await summary_model(
        o.summary_model, client, stack, base_url=o.summary_base_url, fallback_window=profile.declared_window)
    assembler = in_process_assembler(store, name, bound, profile.declared_window, tokens_per_char, summary,
                                     summaries=o.summaries, stated_pass=o.stated_pass)
    return profile, InProcessServices(store, name, assembler=assembler, index_at_close=index_at_close)


def _hold(store: LedgerStore, session: str) -> None:
    """Open ``session`` in ``store`` (its writer lock taken, its segments read) if it exists."""
    if session in store.sessions():
        store.head(session)


def _registry(tools: Any, workspace: str | os.PathLike[str] | None) -> ToolRegistry:
    from vak_context.agent.tools import ToolRegistry, workspace_tools
    from vak_context.agent.tools.registry import Tool
    from vak_context.agent.workspace import Workspace

    if isinstance(tools, ToolRegistry):
        registry = tools
    else:
        registry = ToolRegistry()
        for item in tools:
            if isinstance(item, Tool):
                registry.add(item)
            elif callable(item):
                registry.register(item)
            else:
                raise InvalidInput(f"tools: {item!r} is neither a callable nor a Tool; pass functions or a ToolRegistry")
    # The workspace tools join only when the caller names a folder for them.
    return registry.merged(*workspace_tools(Workspace(Path(workspace)))) if workspace is not None else registry


def _card_decls() -> list[Any]:
    from vak_context.context.history.cards import card_tools
    from vak_context.context.request.surface import ToolDecl

    # Listed in the catalogue, not loaded: their schemas are about 2,000 tokens a request, rarely needed.
    return [ToolDecl(spec, always_loaded=False, observes=False) for spec in card_tools()]

