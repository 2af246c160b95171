"""The capacity ladder, pure: rung plan, per-sample and per-rung verdicts, the search, the cache rung,
and the profile a finished ladder yields (spec §1). No I/O and no clock: the probe runner
(``vak_context.agent.probe.ProbeRunner``) drives it, and the ``ProbeActor`` decides when (docs/CAPACITY.md).

The search (``LadderSearch``) is a small state machine. Ask it for the next prompt size, run the
samples there, hand back a ``RungOutcome``; repeat until it says ``None``:

1. climb the geometric rungs (``plan_rungs``: ×2 from 4k, or from a quarter of the top when the
   window is small, up to 0.9 × the declared window) until the first failing rung;
2. when even the first rung fails, try the smallest history the runner can build (``floor``);
3. binary-search between the last pass and the first fail, in BILLED tokens (the provider's own
   count of each prompt), until that bracket is one search step (``resolution``) wide;
4. a second look at both ends of the bracket: their samples are pooled with the first look's,
   and an end whose pooled verdict flips reopens the search.

A sample is followed when it called ``probe_ack`` with the rung's nonce inside its arguments, in
any wrapping ``vak_context.context.request.toolcalls`` reads. A rung passes when the strict majority of its instruction
samples followed AND the majority of its negative controls (same history, told NOT to call a tool)
called nothing: a model that always calls never passes. Sampling stops by ``settled`` (a lead of
two, or the cap). An over-length rejection (400/413) fails the rung and, once seen, makes the
largest accepted prompt the ``verified_window``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from vak_context.context.capacity.profile import (
    PROBED_CONFIDENCE,
    CacheBehaviour,
    CapacityProfile,
    Ewma,
    Horizon,
    ProbeProvenance,
    ProfileKey,
    Protocol,
    metadata_profile,
)
from vak_context.context.request.messages import ModelContext
from vak_context.context.request.toolcalls import ParsedCall
from vak_context.errors import InvalidInput

ACK_TOOL = "probe_ack"
FIRST_RUNG = 4096
GROWTH = 2.0
TOP_FRACTION = 0.9
CACHE_SPEEDUP = 5.0  # a repeat this much faster than the first call means a prefix cache
# Sampling a bisection rung (chosen from the noise figures in docs/CAPACITY.md): up to DEFAULT_CAP
# instruction samples, stopping once one answer leads by DEFAULT_LEAD.
DEFAULT_CAP = 7
DEFAULT_LEAD = 3

SampleKind = Literal["instruction", "control"]
Channel = Literal["native", "inline_fence"]



def plan_rungs(
    declared_window: int,
    *,
    floor: int = 0,
    first: int = FIRST_RUNG,
    growth: float = GROWTH,
    top_fraction: float = TOP_FRACTION,
) -> tuple[int, ...]:
    """Prompt sizes to climb: ``first`` × growth^k up to ``top_fraction`` × the window, ending at the top.

    When the window is small (the top under 4 × ``first``), the ladder starts at a quarter of the top
    instead, so a small model still gets three rungs. Nothing below ``floor`` (the smallest history
    the runner can build).
    """
    if declared_window <= 0 or growth <= 1.0 or first <= 0:
        raise InvalidInput(
            f"a ladder needs a positive window, first rung and growth > 1 (got window={declared_window}, "
            f"first={first}, growth={growth})"
        )
    top = int(declared_window * top_fraction)
    start = max(floor, min(first, top // 4))
    if start >= top:
        return (top,) if top > floor else ()
    rungs: list[int] = []
    size = float(start)
    while size < top:
        rungs.append(int(size))
        size *= growth
    if top - rungs[-1] > rungs[-1] * (growth - 1.0) / 4:  # skip a top rung almost equal to the last
        rungs.append(top)
    else:
        rungs[-1] = top
    return tuple(rungs)


def default_resolution(rungs: Sequence[int]) -> int:
    """One search step: 1/16 of the first rung, at least 64 tokens."""
    return max(64, (rungs[0] if rungs else 1024) // 16)


# ---------------------------------------------------------------------- samples and rungs


def settled(yes: int, no: int, *, cap: int, lead: int) -> bool:
    """The sampling rule of a rung: stop once one answer leads by ``lead`` or ``cap`` samples are in.

    ``lead=2, cap=3`` is majority of three stopping when two agree; the default (``DEFAULT_LEAD``,
    ``DEFAULT_CAP``) keeps sampling a split rung: see docs/CAPACITY.md "Noise" for the figures.
    """
    return abs(yes - no) >= lead or yes + no >= cap


def majority(yes: int, total: int) -> bool:
    """A strict majority; a tie is not a pass."""
    return total > 0 and 2 * yes > total


@dataclass(frozen=True)
class SampleOutcome:
    """One request of the ladder and what came back."""

    kind: SampleKind
    target: int  # the prompt size the search asked for
    prompt_tokens: int | None  # what the provider billed (None when it rejected the request)
    calls: tuple[ParsedCall, ...] = ()  # every call, native or in the text (vak_context.context.request.toolcalls)
    nonce: str = ""  # the ack value the instruction asked for
    text: str = ""
    latency_ms: float = 0.0
    cached_tokens: int = 0
    output_tokens: int = 0
    # The server's own prompt-eval and decode times (llama.cpp ``timings``), when it reports them.
    prefill_ms: float | None = None
    decode_ms: float | None = None
    overflow: bool = False
    limit_tokens: int | None = None
    error: str | None = None
    extended: int = 0  # continuations asked for because max_tokens cut the completion inside a call

    @property
    def native_calls(self) -> tuple[str, ...]:
        return tuple(c.name or "?" for c in self.calls if c.wrapping == "native")

    @property
    def inline_calls(self) -> tuple[str, ...]:
        return tuple(c.name or "?" for c in self.calls if c.wrapping != "native")

    @property
    def called(self) -> tuple[str, ...]:
        return tuple(c.name or "?" for c in self.calls)

    def _ack(self) -> ParsedCall | None:
        for call in self.calls:
            if call.name == ACK_TOOL and self.nonce and call.has_argument_value(self.nonce):
                return call
        return None

    @property
    def followed(self) -> bool:
        """Only an instruction sample can follow: it asked for probe_ack with a nonce, and a complete
        probe_ack call carried that nonce inside its arguments, however it was wrapped."""
        return self.kind == "instruction" and self._ack() is not None

    @property
    def channel(self) -> Channel | None:
        ack = self._ack()
        if ack is None:
            return None
        return "native" if ack.wrapping == "native" else "inline_fence"

    @property
    def abstained(self) -> bool:
        """A control abstains when it answered without calling any tool (errors never count)."""
        return self.kind == "control" and self.error is None and not self.overflow and not self.called

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "target": self.target,
            "prompt_tokens": self.prompt_tokens,
            "native_calls": list(self.native_calls),
            "inline_calls": list(self.inline_calls),
            "calls": [{"name": c.name, "arguments": c.arguments, "wrapping": c.wrapping, "complete": c.complete}
                      for c in self.calls],
            "nonce": self.nonce,
            "extended": self.extended,
            "followed": self.followed,
            "abstained": self.abstained,
            "text": self.text,
            "latency_ms": round(self.latency_ms, 1),
            "cached_tokens": self.cached_tokens, "output_tokens": self.output_tokens,
            "prefill_ms": None if self.prefill_ms is None else round(self.prefill_ms, 1),
            "decode_ms": None if self.decode_ms is None else round(self.decode_ms, 1),
            "overflow": self.overflow,
            "limit_tokens": self.limit_tokens,
            "error": self.error,
        }


@dataclass(frozen=True)
class RungOutcome:
    target: int
    samples: tuple[SampleOutcome, ...]

    @property
    def instructions(self) -> tuple[SampleOutcome, ...]:
        return tuple(s for s in self.samples if s.kind == "instruction")

    @property
    def controls(self) -> tuple[SampleOutcome, ...]:
        return tuple(s for s in self.samples if s.kind == "control")

    @property
    def followed(self) -> int:
        return sum(s.followed for s in self.instructions)

    @property
    def control_calls(self) -> int:
        return sum(not s.abstained for s in self.controls)

    @property
    def overflow(self) -> bool:
        return any(s.overflow for s in self.samples)

    @property
    def limit_tokens(self) -> int | None:
        limits = [s.limit_tokens for s in self.samples if s.limit_tokens is not None]
        return min(limits) if limits else None

    @property
    def prompt_tokens(self) -> int | None:
        """The billed size of this rung's instruction prompt (the median when samples differ)."""
        sizes = sorted(s.prompt_tokens for s in self.instructions if s.prompt_tokens is not None)
        return sizes[len(sizes) // 2] if sizes else None

    @property
    def passed(self) -> bool:
        controls = len(self.controls)
        controls_ok = 2 * self.control_calls < controls if controls else True
        return majority(self.followed, len(self.instructions)) and controls_ok and not self.overflow

    def as_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "prompt_tokens": self.prompt_tokens,
            "passed": self.passed,
            "followed": self.followed,
            "asked": len(self.instructions),
            "control_calls": self.control_calls,
            "controls": len(self.controls),
            "overflow": self.overflow,
            "limit_tokens": self.limit_tokens,
        }


# ---------------------------------------------------------------------- the search


@dataclass
class LadderSearch:
    """Climb the rungs, then bisect between the last pass and the first fail (see module doc).

    The bracket is in BILLED tokens (what the provider counted), not in requested sizes: ``lo`` is
    the billed size of the largest passing prompt, ``hi`` the billed size of the smallest failing
    one (or the provider's over-length limit). Bisection asks for the midpoint of the billed
    bracket and stops when it is one ``resolution`` wide. With ``second_look`` the search then
    samples both ends of the bracket once more (the same prompts, so a prefix cache serves them):
    the samples are pooled with the first look's, and an end whose pooled verdict flips reopens
    the bracket. A size is looked at no more than ``1 + second_look`` times.
    """

    rungs: tuple[int, ...]
    floor: int = 0
    resolution: int = 0
    max_sizes: int | None = None  # a budget on rungs run, second looks included (live tests on slow CPUs)
    second_look: bool = True
    outcomes: list[RungOutcome] = field(default_factory=list)
    verdicts: dict[int, RungOutcome] = field(default_factory=dict)  # target -> all its samples pooled
    looks: Counter[int] = field(default_factory=Counter)
    _stalled: bool = False

    def __post_init__(self) -> None:
        if not self.rungs:
            raise InvalidInput("a ladder needs at least one rung; is the declared window above the floor?")
        if list(self.rungs) != sorted(set(self.rungs)):
            raise InvalidInput(f"rungs must be strictly increasing, got {self.rungs}")
        self.resolution = self.resolution or default_resolution(self.rungs)

    # -------------------------------------------------------------- the bracket, from pooled verdicts

    @staticmethod
    def billed(outcome: RungOutcome) -> int:
        """Where a rung sits on the token axis: its billed size; for a rejection, the provider's limit."""
        size = outcome.prompt_tokens if outcome.prompt_tokens is not None else outcome.target
        if outcome.overflow and outcome.limit_tokens is not None:
            size = min(size, outcome.limit_tokens)
        return size

    def _fail(self) -> RungOutcome | None:
        fails = [o for o in self.verdicts.values() if not o.passed]
        return min(fails, key=self.billed) if fails else None

    def _pass(self) -> RungOutcome | None:
        hi = self.hi
        passes = [o for o in self.verdicts.values() if o.passed and (hi is None or self.billed(o) < hi)]
        return max(passes, key=self.billed) if passes else None

    @property
    def hi(self) -> int | None:
        """Billed size of the smallest failing prompt (None while every rung passed)."""
        fail = self._fail()
        return None if fail is None else self.billed(fail)

    @property
    def lo(self) -> int | None:
        """Billed size of the largest passing prompt below ``hi`` (the horizon)."""
        best = self._pass()
        return None if best is None else self.billed(best)

    # -------------------------------------------------------------- what to run next

    def next_target(self) -> int | None:
        if self._stalled or (self.max_sizes is not None and len(self.outcomes) >= self.max_sizes):
            return None
        lo, hi = self.lo, self.hi
        if hi is None:  # still climbing: the next rung above everything that passed
            above = [r for r in self.rungs if r not in self.verdicts and (lo is None or r > lo)]
            return above[0] if above else self._relook()  # the top passed: look at it again
        if lo is None:  # the first rung failed: try the smallest history once
            if 0 < self.floor < hi and self.floor not in self.verdicts:
                return self.floor
            return self._relook()
        if hi - lo > self.resolution:
            middle = (lo + hi) // 2
            if middle in self.verdicts:  # that request already landed outside the bracket
                self._stalled = True
                return None
            return middle
        return self._relook()

    def _relook(self) -> int | None:
        """The second look at the bracket's ends, each once (an over-length end needs none); when every
        rung passed, the top rung is the only end."""
        if not self.second_look:
            return None
        for end in (self._pass(), self._fail()):
            if end is not None and not end.overflow and self.looks[end.target] < 2:
                return end.target
        return None

    def record(self, outcome: RungOutcome) -> None:
        self.outcomes.append(outcome)
        self.looks[outcome.target] += 1
        earlier = self.verdicts.get(outcome.target)
        self.verdicts[outcome.target] = (
            outcome if earlier is None else RungOutcome(outcome.target, earlier.samples + outcome.samples))

    @property
    def done(self) -> bool:
        return self.next_target() is None

    @property
    def step(self) -> int | None:
        """The final bracket width in billed tokens: the horizon is known to within this many."""
        lo, hi = self.lo, self.hi
        return None if lo is None or hi is None else hi - lo

    def result(self) -> LadderResult:
        best = self._pass()
        accepted = [
            s.prompt_tokens
            for o in self.outcomes
            for s in o.samples
            if s.prompt_tokens is not None and not s.overflow
        ]
        overflowed = any(o.overflow for o in self.outcomes)
        channels = Counter(s.channel for o in self.outcomes for s in o.instructions if s.followed)
        protocol: Protocol | None = None
        if channels:
            protocol = "native" if channels["native"] >= channels["inline_fence"] else "inline_fence"
        lo, hi = self.lo, self.hi
        return LadderResult(
            outcomes=tuple(self.outcomes),
            horizon_target=best.target if best else None,
            horizon_tokens=lo if lo is not None else 0,
            passed_any=best is not None,
            verified_window=max(accepted) if overflowed and accepted else None,
            overflow_limit=min((o.limit_tokens for o in self.outcomes if o.limit_tokens), default=None),
            protocol=protocol,
            step=self.step,
            bracket=(lo, hi),
            pooled=tuple(sorted(self.verdicts.values(), key=self.billed)),
        )


@dataclass(frozen=True)
class LadderResult:
    outcomes: tuple[RungOutcome, ...]
    horizon_target: int | None
    horizon_tokens: int  # billed prompt tokens of the largest passing rung; 0 when none passed
    passed_any: bool
    verified_window: int | None
    overflow_limit: int | None
    protocol: Protocol | None
    step: int | None  # hi - lo in billed tokens
    bracket: tuple[int | None, int | None] = (None, None)  # billed (largest pass, smallest fail)
    pooled: tuple[RungOutcome, ...] = ()  # one per size tried, every look's samples together


# ---------------------------------------------------------------------- cache rung


@dataclass(frozen=True)
class CacheVerdict:
    behaviour: CacheBehaviour
    signal: str
    first_ms: float
    second_ms: float
    cached_tokens: int


def judge_cache(first: SampleOutcome, second: SampleOutcome) -> CacheVerdict:
    """Two identical requests back to back: reported cached tokens, or ≥5× faster, is PrefixStable."""
    speedup = first.latency_ms / second.latency_ms if second.latency_ms > 0 else 0.0
    if second.cached_tokens > 0:
        behaviour, signal = (
            CacheBehaviour.PREFIX_STABLE,
            f"cache: {second.cached_tokens} cached tokens reported",
        )
    elif speedup >= CACHE_SPEEDUP:
        behaviour, signal = CacheBehaviour.PREFIX_STABLE, f"cache: repeat {speedup:.1f}x faster"
    else:
        behaviour, signal = CacheBehaviour.NONE, f"cache: none seen (repeat {speedup:.1f}x, 0 cached tokens)"
    return CacheVerdict(behaviour, signal, first.latency_ms, second.latency_ms, second.cached_tokens)


# ---------------------------------------------------------------------- the profile


def profile_from_ladder(
    key: ProfileKey,
    metadata: ModelContext,
    ladder: LadderResult,
    *,
    now: float,
    tokens_per_char: Ewma,
    prefill_tps: Ewma | None,
    cache: CacheVerdict | None,
    protocol_asked: Protocol,
) -> CapacityProfile:
    """The measured profile: the metadata rung, then what the ladder and cache rung found."""
    base = metadata_profile(key, metadata, now=now)
    signals = list(base.provenance.signals)
    if ladder.passed_any:
        lo, hi = ladder.bracket
        signals.append(
            f"instruction_horizon: largest passing prompt ({ladder.horizon_tokens} billed tokens; "
            f"bracket {lo}..{hi if hi is not None else 'open above'} billed tokens)"
        )
    else:
        signals.append("instruction_horizon: the model followed the instruction at no rung")
    if ladder.verified_window is not None:
        signals.append(
            f"verified_window: largest accepted prompt before an over-length rejection"
            f" (provider limit {ladder.overflow_limit})"
        )
    if cache is not None:
        signals.append(cache.signal)
    signals.append(f"protocol asked: {protocol_asked}")
    horizon_tokens = ladder.horizon_tokens
    if ladder.verified_window is not None:
        horizon_tokens = min(horizon_tokens, ladder.verified_window)
    provenance = ProbeProvenance(
        source="probe",
        probed_at=now,
        updated_at=now,
        rungs=tuple(o.as_dict() for o in ladder.outcomes),
        signals=tuple(signals),
        metadata_digest=base.provenance.metadata_digest,
        protocol=ladder.protocol,
        passed_any=ladder.passed_any,
    )
    return CapacityProfile(
        key=key,
        declared_window=base.declared_window,
        verified_window=ladder.verified_window,
        # A model that passed no rung gets horizon 0, measured as confidently as a pass.
        instruction_horizon=Horizon(tokens=horizon_tokens, confidence=PROBED_CONFIDENCE, last_confirmed=now),
        tokens_per_char=tokens_per_char,
        prefill_tps=prefill_tps,
        cache=cache.behaviour if cache is not None else CacheBehaviour.NONE,
        output_reserve=base.output_reserve,
        provenance=provenance,
    )
