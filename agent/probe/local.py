"""The probe of a bundled local model, end to end: its llama.cpp server, an adapter and the runner.

``probe_local`` starts the model's server (unless pointed at one), sizes rungs with the server's own
token counter and runs ``ProbeRunner`` with the protocol and profile key the local-model catalogue
(``vak_context.providers.local.catalogue``) gives; ``measure_local_profile`` is its synchronous form for the
main job's banner.
"""

from __future__ import annotations

import asyncio
import os

import httpx

from vak_context.agent.probe.results import ProbeReport
from vak_context.agent.probe.runner import ProbeRunner, Progress
from vak_context.agent.probe.settings import ProbeSettings
from vak_context.context.capacity.profile import CapacityProfile
from vak_context.providers.local.catalogue import local_profile_key, local_protocol
from vak_context.providers.local.server import LocalModelServer
from vak_context.providers.openai_compat import OpenAICompatProvider
from vak_context.providers.tokencount import CharRatioCounter, LlamaCppTokenCounter

# The main job's quick ladder (a few minutes on 2 cores): four sizes, majority of three stopping when
# two agree, no second look. A full `vak probe` uses the defaults (docs/CAPACITY.md "Noise").
QUICK = ProbeSettings(samples=3, lead=2, second_look=False, controls=1, first_rung=1024, max_sizes=4)


async def probe_local(
    model: str = "smollm2",
    *,
    n_ctx: int = 4096,
    settings: ProbeSettings | None = None,
    on_progress: Progress | None = None,
    base_url: str | None = None,
    api_key: str | None = None,
) -> ProbeReport:
    """Probe a bundled local model. Starts (and stops) its server unless ``base_url`` points at one.

    The server at ``base_url`` is asked with ``api_key``, else ``$OPENAI_COMPAT_API_KEY``; a server
    started here is asked with its own per-run key."""
    chosen = settings or ProbeSettings(
        samples=QUICK.samples, lead=QUICK.lead, second_look=QUICK.second_look, controls=QUICK.controls,
        first_rung=QUICK.first_rung, max_sizes=QUICK.max_sizes,
        protocol=local_protocol(model),
    )
    key = local_profile_key(model)

    async def run(url: str, url_key: str | None) -> ProbeReport:
        async with httpx.AsyncClient(trust_env=False, timeout=600.0) as client:
            provider = OpenAICompatProvider(client, base_url=url, api_key=url_key, timeout_s=600.0)
            # The local server counts tokens itself: rungs are sized without a prefill each (the quick
            # ladder's largest saving); a server without the endpoints falls back to billed shots' rate.
            counter = LlamaCppTokenCounter(provider, fallback=CharRatioCounter())
            return await ProbeRunner(provider, key, settings=chosen, on_progress=on_progress,
                                     counter=counter).run()

    if base_url is not None:
        return await run(base_url, api_key or os.environ.get("OPENAI_COMPAT_API_KEY"))
    with LocalModelServer(model, n_ctx=n_ctx) as server:
        return await run(server.base_url, server.api_key)


def measure_local_profile(
    model: str = "smollm2",
    *,
    n_ctx: int = 4096,
    settings: ProbeSettings | None = None,
    on_progress: Progress | None = None,
    base_url: str | None = None,
    api_key: str | None = None,
) -> CapacityProfile:
    """A quick ladder on a bundled local model (a few minutes on 2 cores); returns its profile.

    For the main job's ``vak run`` banner. Synchronous: it runs its own event loop, so call it from
    plain code, not from inside a running loop (there, ``await probe_local(...)``).
    """
    report = asyncio.run(probe_local(model, n_ctx=n_ctx, settings=settings, on_progress=on_progress,
                                     base_url=base_url, api_key=api_key))
    return report.profile
