"""What a probe run is asked (``ProbeSettings``) and what it returns (``ProbeReport``).

``ProbeReport.ledger_payloads()`` is what every probe writes: an ``activity`` entry
(``capacity.probe``: rungs, samples, verdicts) and then the ``capacity_profile`` entry.
"""

from __future__ import annotations

from dataclasses import dataclass

from vak_context.context.capacity.ladder import DEFAULT_CAP, DEFAULT_LEAD, CacheVerdict, LadderResult
from vak_context.context.capacity.profile import CapacityProfile, ProfileKey, Protocol, to_record
from vak_context.context.request.messages import ModelContext
from vak_context.errors import InvalidInput
from vak_context.events.payloads import Activity, CapacityProfileRecord


@dataclass(frozen=True)
class ProbeSettings:
    samples: int = DEFAULT_CAP  # at most this many instruction samples per rung; the verdict is their majority
    lead: int = DEFAULT_LEAD  # stop sampling a rung once one answer leads by this many
    second_look: bool = True  # sample both ends of the final bracket again (docs/CAPACITY.md "Noise")
    controls: int = 1  # negative-control samples per rung (same history, "do not call a tool")
    max_tokens: int = 32
    temperature: float | None = None  # the provider's default: a sampling model, as in real turns
    protocol: Protocol = "native"
    first_rung: int = 4096
    window: int | None = None  # probe as if this were the declared window (a quick, smaller ladder)
    resolution: int | None = None
    max_sizes: int | None = None  # budget on distinct prompt sizes (besides the cache rung)
    cache_rung: bool = True
    # Hosted prompt caches start at about 1024 tokens (OpenAI, Anthropic), so the cache rung's
    # prompt is that long, or a quarter of the window when that is smaller.
    cache_tokens: int = 1024
    decide_early: bool = True  # stop a rung's sampling by the ``lead`` rule; False: always ``samples``
    # A completion cut by max_tokens inside a call is continued (the reply so far sent back as the
    # start of the assistant turn) at most this many times.
    max_extensions: int = 2
    progress_every_s: float = 10.0  # a "waiting" progress event this often while a request runs

    def __post_init__(self) -> None:
        if self.samples < 1 or self.controls < 0 or self.max_tokens < 1 or self.lead < 1:
            raise InvalidInput(
                f"probe settings need samples >= 1, lead >= 1, controls >= 0 and max_tokens >= 1 (got {self})"
            )


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
