"""What a probe run returns: ``ProbeReport`` (the profile, the ladder, the cache verdict, the settings asked).

``ProbeReport.ledger_payloads()`` is what every probe writes: an ``activity`` entry
(``capacity.probe``: rungs, samples, verdicts) and then the ``capacity_profile`` entry.
"""

from __future__ import annotations

from dataclasses import dataclass

from vak_context.agent.probe.settings import ProbeSettings
from vak_context.context.capacity.ladder import CacheVerdict, LadderResult
from vak_context.context.capacity.profile import CapacityProfile, ProfileKey, to_record
from vak_context.context.request.messages import ModelContext
from vak_context.events.payloads import Activity, CapacityProfileRecord


@dataclass(frozen=True)
class ProbeReport:
    key: ProfileKey
    profile: CapacityProfile
    metadata: ModelContext
    ladder: LadderResult
    cache: CacheVerdict | None
    settings: ProbeSettings
    started_at: float
    finished_at: float
    requests: int
    salt: str = ""  # the prompt salt of this run: with it, every request can be rebuilt exactly

    def activity(self) -> Activity:
        """The ``capacity.probe`` activity: enough to reconstruct every verdict."""
        return Activity(
            activity="capacity.probe",
            detail={
                "key": {"provider": self.key.provider, "model": self.key.model,
                        "quantisation": self.key.quantisation},
                "metadata": self.metadata.model_dump(mode="json"),
                "settings": {k: v for k, v in self.settings.__dict__.items()},
                "salt": self.salt,
                "cache": None if self.cache is None else {
                    "behaviour": self.cache.behaviour.value, "signal": self.cache.signal,
                    "first_ms": round(self.cache.first_ms, 1), "second_ms": round(self.cache.second_ms, 1),
                    "cached_tokens": self.cache.cached_tokens,
                },
                "rungs": [{**o.as_dict(), "samples": [s.as_dict() for s in o.samples]} for o in self.ladder.outcomes],
                "verdict": {
                    "passed_any": self.ladder.passed_any, "horizon_tokens": self.ladder.horizon_tokens,
                    "step": self.ladder.step, "bracket": list(self.ladder.bracket),
                    "verified_window": self.ladder.verified_window,
                    "protocol": self.ladder.protocol,
                },
                "started_at": self.started_at, "finished_at": self.finished_at, "requests": self.requests,
            },
        )

    def record(self) -> CapacityProfileRecord:
        return to_record(self.profile)

    def ledger_payloads(self) -> list[Activity | CapacityProfileRecord]:
        """Activity first, then the profile it produced."""
        return [self.activity(), self.record()]
