"""Live turns from the command line: ``vak chat``, ``vak turn`` and the main job's three turns.

``LiveSession`` wires one session: the bound model (the bundled local model on llama.cpp, started on
127.0.0.1, or any ``provider:model`` spec), its profile (the newest one recorded in the ledger for that
model, else the metadata rung's), the tool surface (recall, find_tools, the workspace tools and the
card tools) and a :class:`~vak_context.agent.loop.TurnLoop` over in-process services or the Ray actors.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from vak_context.actors.assembler import AssemblerActor
from vak_context.actors.local_services import InProcessServices
from vak_context.agent.endpoint import ModelEndpoint, model_tools
from vak_context.agent.loop import StepReport, TurnConfig, TurnLoop, TurnReport, TurnServices
from vak_context.agent.workspace import TOOLS as WORKSPACE_TOOLS
from vak_context.agent.workspace import Workspace
from vak_context.context.capacity.profile import (
    CapacityProfile,
    ProfileKey,
    describe,
    from_record,
    metadata_profile,
)
from vak_context.context.evidence.digest import RECALL_TOOL
from vak_context.context.history.cards import card_tools
from vak_context.context.planner.records import Fidelity
from vak_context.context.request.assemble import system_prompt
from vak_context.context.request.messages import ModelContext
from vak_context.context.request.surface import Surface, ToolDecl
from vak_context.events.envelope import Mapper
from vak_context.events.payloads import CapacityProfileRecord
from vak_context.providers.local.catalogue import canonical_model, local_profile_key
from vak_context.storage.ledger import LedgerStore

DEFAULT_MODEL = "qwen"
DEFAULT_N_CTX = 16384


def default_surface(*, cards_loaded: bool = False) -> Surface:
    """recall, find_tools and the workspace tools, always loaded, in that order; the card tools loaded
    too, or (the default) listed in the catalogue for find_tools. Their schemas are about 2,000 tokens:
    a fifth of a small model's measured horizon, spent on every request, for tools it rarely needs."""
    core = [ToolDecl(RECALL_TOOL, always_loaded=True)]
    core += [ToolDecl(t.spec, always_loaded=True, observes=t.observes) for t in WORKSPACE_TOOLS]
    core += [ToolDecl(spec, always_loaded=cards_loaded) for spec in card_tools()]
    return Surface.build(core)


def recorded_profile(store: LedgerStore, key: ProfileKey) -> CapacityProfile | None:
    """The newest capacity profile recorded for ``key`` in any session of the ledger."""
    mapper = Mapper()
    newest: CapacityProfile | None = None
    for session in store.sessions():
        for entry in store.entries(session):
            if entry.kind != "capacity_profile":
                continue
            record = mapper.payload_of(entry)
            if isinstance(record, CapacityProfileRecord):
                profile = from_record(record)
                if profile.key == key:
                    newest = profile
    return newest


def step_line(step: StepReport) -> str:
    """One line per step: the plan, prompt and cached tokens, and the prefix digest."""
    f = step.fidelity
    plan = (f"full {f.get(Fidelity.FULL, 0)} / card {f.get(Fidelity.CARD, 0)} / "
            f"packet {f.get(Fidelity.PACKET, 0)}")
    ratio = f" ({step.cached_tokens / step.prompt_tokens:.0%} cached)" if step.prompt_tokens else ""
    calls = ", ".join(step.calls) if step.calls else "answer"
    return (f"  step {step.index + 1}: plan {plan}{' (planned)' if step.replanned else ''}; "
            f"prompt {step.prompt_tokens} tok, cached {step.cached_tokens}{ratio}; "
            f"prefix {step.prefix_digest[:12]}; → {calls}")


@dataclass
class LiveSession:
    """One live session. Use ``async with LiveSession(...) as live: await live.turn("...")``."""

    ledger: Path
    session: str
    workspace: Path
    model: str = DEFAULT_MODEL
    n_ctx: int = DEFAULT_N_CTX
    on_step: Callable[[StepReport], None] | None = None
    on_text: Callable[[str], None] | None = None  # each step's text as it streams
    services_factory: Callable[[LedgerStore | None], TurnServices] | None = None  # None: in-process
    profile: CapacityProfile | None = None
    max_steps: int = 6
    max_tokens: int = 384
    timezone: str = "UTC"  # an IANA name: the tail's local time
    base_url: str | None = None  # a running local server (else one is started for the session)
    api_key: str | None = None  # that server's key

    async def __aenter__(self) -> LiveSession:
        from vak_context.providers.local.server import LocalModelServer
        from vak_context.providers.openai_compat import OpenAICompatProvider

        self._stack = AsyncExitStack()
        self.model = canonical_model(self.model)
        base_url, api_key = self.base_url, self.api_key
        if base_url is None:
            server = self._stack.enter_context(LocalModelServer(self.model, n_ctx=self.n_ctx))
            base_url, api_key = server.base_url, server.api_key
        client = await self._stack.enter_async_context(httpx.AsyncClient(trust_env=False, timeout=900.0))
        provider = OpenAICompatProvider(client, base_url=base_url, api_key=api_key, timeout_s=900.0)
        self.store: LedgerStore | None = None
        if self.services_factory is None:
            self.store = self._stack.enter_context(LedgerStore(self.ledger))
            services: TurnServices = InProcessServices(self.store, self.session,
                                                       assembler=self._assembler(self.store, provider))
        else:
            services = self.services_factory(None)
        key = local_profile_key(self.model)
        profile = self.profile or self._bound_profile(key, self.n_ctx)
        surface = default_surface()
        config = TurnConfig(model=self.model, provider="local", system=system_prompt(surface.catalogue()),
                            surface=surface, max_steps=self.max_steps, max_tokens=self.max_tokens,
                            timezone=self.timezone, session_key=self.session,
                            # On Ray the assembler builds its exact counter and summariser from this.
                            endpoint=None if self.store is not None else ModelEndpoint(
                                base_url=base_url, model=self.model, window_tokens=self.n_ctx, api_key=api_key))
        self.loop = TurnLoop(services, provider, profile, config, workspace=Workspace(self.workspace),
                             on_step=self.on_step, on_text=self.on_text)
        return self

    def _assembler(self, store: LedgerStore, provider: Any) -> AssemblerActor:
        """In-process: requests sized exactly by the server's own tokenizer, packets summarised by the
        same model (a side call with its own prompt, never the turn's history): ``model_tools``, as an
        actor builds them from the ModelEndpoint on Ray."""
        tools = model_tools(provider, self.model, window_tokens=self.n_ctx,
                            tokens_per_char=lambda: self.loop.profile.tokens_per_char.value)
        assembler = AssemblerActor(str(store.root), store, count=tools.count)
        # The packet is written through the actor's own ledger client, which exists once the actor does.
        assembler.summarise = tools.summarise_for(assembler.ledger, self.session)
        return assembler

    def _bound_profile(self, key: ProfileKey, n_ctx: int) -> CapacityProfile:
        if self.store is not None:
            recorded = recorded_profile(self.store, key)
            if recorded is not None:
                return recorded
        else:
            with LedgerStore(self.ledger, readonly=True) as reader:
                recorded = recorded_profile(reader, key)
            if recorded is not None:
                return recorded
        return metadata_profile(key, ModelContext(provider="local", model=key.model, declared_window=n_ctx,
                                                  source="the local server's n_ctx"), now=time.time())

    async def __aexit__(self, *exc: Any) -> None:
        await self._stack.aclose()

    async def turn(self, directive: str) -> TurnReport:
        return await self.loop.run(directive)

    def describe_profile(self) -> str:
        return describe(self.loop.profile)
