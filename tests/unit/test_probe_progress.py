"""Progress within a rung (issue 9, item 16): samples done, and a running request's elapsed time
against an estimate from the measured prefill rate, while the rung is still running."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx

from tests.fakes.threshold import ThresholdModel
from vak_context.agent.probe import ProbeRunner, ProbeSettings
from vak_context.context.capacity.profile import ProfileKey
from vak_context.providers.base import RetryPolicy
from vak_context.providers.openai_compat import OpenAICompatProvider


async def test_a_long_request_reports_waiting_with_an_estimate_before_it_answers() -> None:
    """The first rung's sizing request is held until a "waiting" event for it arrives: the event names
    the rung and the request, its time so far, and an estimate from the prefill rate the cache rung
    measured. Then every sample of every rung is reported as it finishes."""
    model = ThresholdModel(5000)
    released = asyncio.Event()
    held: list[int] = []
    events: list[dict[str, Any]] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else {}
        if body.get("max_tokens") == 1 and "probe_ack" in body["messages"][-1]["content"] and not held:
            held.append(1)
            await released.wait()  # answers only once the runner said it is waiting
        return model.handle(request)

    def on_progress(event: dict[str, Any]) -> None:
        events.append(event)
        if event["stage"] == "waiting":
            released.set()

    settings = ProbeSettings(max_sizes=2, progress_every_s=0.01)
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        provider = OpenAICompatProvider(client, base_url="http://scripted.test/v1", retry=RetryPolicy(attempts=1))
        report = await ProbeRunner(provider, ProfileKey("scripted", "t"), settings=settings,
                                   on_progress=on_progress).run()
    waiting = [e for e in events if e["stage"] == "waiting"]
    first_rung = report.ladder.outcomes[0].target
    assert waiting and waiting[0]["target"] == first_rung and waiting[0]["what"] == "sizing 1"
    assert waiting[0]["request_s"] >= 0 and waiting[0]["elapsed_s"] >= waiting[0]["request_s"]
    assert waiting[0]["estimate_s"] is not None and waiting[0]["estimate_s"] > 0
    # The waiting event came before the rung's verdict, i.e. while the rung was running.
    stages = [(e["stage"], e.get("target", e.get("outcome", {}).get("target"))) for e in events]
    assert stages.index(("waiting", first_rung)) < stages.index(("rung", first_rung))
    for rung in report.ladder.outcomes:
        done = [e["index"] for e in events if e["stage"] == "sample" and e["target"] == rung.target
                and e["kind"] == "instruction"]
        assert done == list(range(1, len(rung.instructions) + 1))
