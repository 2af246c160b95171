"""What a probe run is asked: ``ProbeSettings`` (the ladder's sampling, the protocol, the sizes)."""

from __future__ import annotations

from dataclasses import dataclass

from vak_context.context.capacity.ladder import DEFAULT_CAP, DEFAULT_LEAD
from vak_context.context.capacity.profile import Protocol
from vak_context.errors import InvalidInput


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
