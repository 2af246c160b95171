"""The capacity probe against the scripted threshold model, and hand-made rung outcomes for the search.

``run_probe`` runs the real ``ProbeRunner`` through the real OpenAI-compatible adapter over
``httpx.MockTransport`` (no socket), at a fixed clock; ``outcome`` builds a ``RungOutcome`` with a given
number of followed instruction samples and control calls.
"""

from __future__ import annotations

from collections.abc import Callable

import httpx

from tests.fakes.threshold import ThresholdModel
from vak_context.agent.probe import ProbeReport, ProbeRunner, ProbeSettings
from vak_context.context.capacity.ladder import RungOutcome, SampleOutcome
from vak_context.context.capacity.profile import ProfileKey
from vak_context.context.request.toolcalls import ParsedCall
from vak_context.providers.base import RetryPolicy
from vak_context.providers.openai_compat import OpenAICompatProvider

KEY = ProfileKey("scripted", "threshold")


async def run_probe(model: ThresholdModel, settings: ProbeSettings | None = None,
                    progress: Callable[[dict[str, object]], None] | None = None) -> ProbeReport:
    async with httpx.AsyncClient(transport=model.transport()) as client:
        provider = OpenAICompatProvider(client, base_url="http://scripted.test/v1", retry=RetryPolicy(attempts=1))
        runner = ProbeRunner(provider, KEY, settings=settings, on_progress=progress, clock=lambda: 1_800_000_000.0)
        return await runner.run()


ACK = (ParsedCall("probe_ack", {"ack": "n1"}, "native"),)
OTHER = (ParsedCall("search_docs", {"query": "q"}, "native"),)


def outcome(target: int, followed: int, *, asked: int = 3, control_calls: int = 0, controls: int = 1,
            billed: int | None = None) -> RungOutcome:
    size = target if billed is None else billed
    samples = [SampleOutcome("instruction", target, size, calls=ACK if i < followed else (), nonce="n1")
               for i in range(asked)]
    samples += [SampleOutcome("control", target, size, calls=OTHER if i < control_calls else ())
                for i in range(controls)]
    return RungOutcome(target, tuple(samples))
