"""CapacityProfile: what one model can really use, measured (spec §1). Pure: no I/O, no clock.

A profile is keyed by ``ProfileKey(provider, model, quantisation)`` and holds every number that
shapes a request: the declared and verified windows, the instruction horizon (the largest prompt
at which the model still followed a tool instruction), tokens per character and prefill speed as
EWMAs, cache behaviour, the output reserve, and where all of it came from (``ProbeProvenance``).

Three things change a profile, each a pure function of (profile, input, ``now``):

* the probe ladder (``vak_context.context.capacity.ladder`` plans it, ``vak_context.agent.probe`` runs it) writes a whole new one;
* ``apply_feedback`` folds in one turn's receipt (spec §1 "Feedback"): tokens per char from every
  billed prompt token, cache tiers included; prefill speed on cache-miss turns only; a failed
  explicit instruction above 0.8 × horizon tightens the horizon to that request (confidence 0.6)
  and asks for a re-probe. Feedback never widens the horizon: only a probe can;
* ``profile_for`` (the bind-time read) picks the newer of the ledger record and the process cache,
  or builds a metadata-only profile with low confidence when neither exists or the model's
  metadata changed.

Times are unix seconds passed in by the caller (``now``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Literal

import blake3

from vak_context.context.capacity.tokens import (
    PRIOR_TOKENS_PER_CHAR,
)
from vak_context.context.request.messages import ChatRequest, Message, ModelContext, ToolSpec, input_json
from vak_context.errors import InvalidInput
from vak_context.events.blocks import TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock
from vak_context.events.canonical import encode
from vak_context.events.payloads import CapacityProfileRecord, EwmaRecord, HorizonRecord, Usage

ALPHA = 0.3  # EWMA weight of the newest observation (spec §1)
# ... where it bills more per char than the rate (the rate under-estimated: the dangerous side, so it is
# followed faster). A step of many small parts (34 calls and their results) bills far more per char than
# the schemas-heavy requests before it; the next request, planned at the eased-in rate, went over the
# horizon by a third (BFCL long_context at T = 4k).
ALPHA_UP = 0.7
TIGHTEN_ABOVE = 0.8  # a failed instruction above this fraction of the horizon tightens it
TIGHTENED_CONFIDENCE = 0.6
METADATA_CONFIDENCE = 0.3  # a horizon nobody measured: the declared window, believed a little
PROBED_CONFIDENCE = 0.9  # majority-of-three at every rung; feedback can only lower it
LOCAL_TTL_S = 24 * 3600.0
HOSTED_TTL_S = 7 * 24 * 3600.0
# A provider that publishes no window (OpenAI) still needs one to plan against until probed.
UNKNOWN_WINDOW = 8192
DEFAULT_OUTPUT_RESERVE = 1024

Protocol = Literal["native", "inline_fence"]
Source = Literal["metadata", "probe", "feedback"]


class CacheBehaviour(StrEnum):
    """How the provider caches a repeated prefix.

    ``PREFIX_STABLE``: the cache rung saw it (reported cached tokens, or a ≥5× faster repeat).
    ``PROVIDER_REPORTED``: real turns report cached tokens but no cache rung has confirmed it.
    """

    NONE = "none"
    PREFIX_STABLE = "prefix_stable"
    PROVIDER_REPORTED = "provider_reported"


@dataclass(frozen=True)
class ProfileKey:
    provider: str
    model: str
    quantisation: str = ""

    def __post_init__(self) -> None:
        if not self.provider or not self.model:
            raise InvalidInput(f"a ProfileKey needs a provider and a model, got {self!r}")

    def __str__(self) -> str:
        tail = f"@{self.quantisation}" if self.quantisation else ""
        return f"{self.provider}:{self.model}{tail}"


@dataclass(frozen=True)
class Ewma:
    """An exponentially weighted mean. ``samples == 0`` means the value is a prior, not a measurement."""

    value: float
    samples: int = 0

    def update(self, observed: float, alpha: float = ALPHA) -> Ewma:
        if self.samples == 0:  # the first measurement replaces the prior outright
            return Ewma(observed, 1)
        return Ewma(alpha * observed + (1.0 - alpha) * self.value, self.samples + 1)


@dataclass(frozen=True)
class Horizon:
    tokens: int
    confidence: float
    last_confirmed: float  # unix seconds


@dataclass(frozen=True)
class ProbeProvenance:
    """When and how a profile was measured. ``rungs`` summarise the ladder (the samples are in
    the probe's ledger activity); ``signals`` name every source that set a number."""

    source: Source = "metadata"
    probed_at: float | None = None  # when the ladder ran; None for metadata-only profiles
    updated_at: float | None = None  # last change of any kind (probe, feedback, bind)
    rungs: tuple[dict[str, Any], ...] = ()
    signals: tuple[str, ...] = ()
    metadata_digest: str = ""
    protocol: Protocol | None = None  # the tool-call protocol the model followed in the probe
    passed_any: bool | None = None  # None: not probed
    needs_reprobe: bool = False


@dataclass(frozen=True)
class CapacityProfile:
    key: ProfileKey
    declared_window: int
    instruction_horizon: Horizon
    tokens_per_char: Ewma
    output_reserve: int
    verified_window: int | None = None
    prefill_tps: Ewma | None = None
    cache: CacheBehaviour = CacheBehaviour.NONE
    provenance: ProbeProvenance = field(default_factory=ProbeProvenance)

    @property
    def usable_window(self) -> int:
        """The largest prompt to plan for (``request_budget``)."""
        return request_budget(self)


def request_budget(profile: CapacityProfile, *, rescue: bool = False) -> int:
    """The most tokens a request's prompt may carry: the one budget the planner, the assembler and the
    profile use. A prompt may be as large as the instruction horizon, and the prompt with the output
    reserve beside it must fit the window: ``min(h, window − out)``. The window is the verified one when
    there is one (a verified 0 is a measurement: nothing fits), else the declared one. ``rescue``: a
    profile with no usable horizon sends the current turn against the window alone, ``window − out``."""
    window = profile.verified_window if profile.verified_window is not None else profile.declared_window
    room = window - profile.output_reserve
    return max(0, room if rescue else min(profile.instruction_horizon.tokens, room))


# ---------------------------------------------------------------------- metadata


def metadata_digest(ctx: ModelContext) -> str:
    """A digest of what the catalogue says; when it changes, a measured profile is invalid."""
    value = {
        "provider": ctx.provider,
        "model": ctx.model,
        "declared_window": ctx.declared_window,
        "output_limit": ctx.output_limit,
        "detail": ctx.detail,
    }
    return blake3.blake3(encode(value)).hexdigest()[:32]


def metadata_profile(key: ProfileKey, ctx: ModelContext, *, now: float) -> CapacityProfile:
    """The metadata rung alone: declared window and output reserve, horizon = window at low confidence."""
    signals = [f"declared_window: {ctx.source or 'provider metadata'}"]
    declared = ctx.declared_window
    confidence = METADATA_CONFIDENCE
    if not declared:
        declared = UNKNOWN_WINDOW
        confidence = METADATA_CONFIDENCE / 3  # not even the provider said it
        signals = [
            f"declared_window: unknown ({ctx.source or 'no metadata'}); planning on {UNKNOWN_WINDOW} until probed"
        ]
    if ctx.output_limit:
        reserve = min(ctx.output_limit, declared // 2)
        signals.append("output_reserve: provider max output")
    else:
        reserve = min(DEFAULT_OUTPUT_RESERVE, declared // 4)
        signals.append("output_reserve: default until completions are observed")
    return CapacityProfile(
        key=key,
        declared_window=declared,
        instruction_horizon=Horizon(tokens=declared, confidence=confidence, last_confirmed=now),
        tokens_per_char=Ewma(PRIOR_TOKENS_PER_CHAR, 0),
        output_reserve=reserve,
        provenance=ProbeProvenance(
            source="metadata", updated_at=now, signals=tuple(signals), metadata_digest=metadata_digest(ctx)
        ),
    )


# ---------------------------------------------------------------------- feedback


@dataclass(frozen=True)
class TurnFeedback:
    """What one model call tells the profile (built from its receipt).

    ``request_tokens``: the size of the assembled request (the provider's prompt tokens when known).
    ``followed_instruction``: None when the turn gave no explicit instruction; False when the runtime
    classified a failure (required card not emitted, required tool not called, stop-policy block).
    ``prefill_ms``: time to first token (or the server's prompt-eval time).
    """

    usage: Usage
    chars_sent: int
    request_tokens: int | None = None
    prefill_ms: float | None = None
    followed_instruction: bool | None = None


def apply_feedback(profile: CapacityProfile, fb: TurnFeedback, *, now: float) -> CapacityProfile:
    """Fold one turn into the profile (spec §1 Feedback). Never widens the instruction horizon."""
    prompt_tokens = fb.usage.prompt_tokens  # every billed prompt token, cache tiers included
    tpc = profile.tokens_per_char
    signals: list[str] = []
    if prompt_tokens > 0 and fb.chars_sent > 0:
        observed = prompt_tokens / fb.chars_sent
        tpc = tpc.update(observed, alpha=ALPHA_UP if observed > tpc.value else ALPHA)
    tps = profile.prefill_tps
    cache_miss = fb.usage.cache_read_tokens == 0
    if cache_miss and prompt_tokens > 0 and fb.prefill_ms and fb.prefill_ms > 0:
        observed = prompt_tokens / (fb.prefill_ms / 1000.0)
        tps = tps.update(observed) if tps is not None else Ewma(observed, 1)
    cache = profile.cache
    if fb.usage.cache_read_tokens > 0 and cache is CacheBehaviour.NONE:
        cache = CacheBehaviour.PROVIDER_REPORTED
        signals.append("cache: provider reported cached tokens on a turn")
    reserve = profile.output_reserve
    if "output_reserve: provider max output" not in profile.provenance.signals:
        reserve = min(max(reserve, fb.usage.output_tokens), profile.declared_window // 2)
    horizon = profile.instruction_horizon
    needs_reprobe = profile.provenance.needs_reprobe
    size = fb.request_tokens if fb.request_tokens is not None else prompt_tokens
    if fb.followed_instruction is False and size > TIGHTEN_ABOVE * horizon.tokens:
        horizon = Horizon(
            tokens=min(horizon.tokens, size),  # "lowers": a failure above the horizon keeps it
            confidence=min(horizon.confidence, TIGHTENED_CONFIDENCE),
            last_confirmed=now,
        )
        needs_reprobe = True
        signals.append(f"horizon: tightened to {horizon.tokens} by a failed instruction at {size} tokens")
    provenance = replace(
        profile.provenance,
        updated_at=now,
        needs_reprobe=needs_reprobe,
        signals=_merge_signals(profile.provenance.signals, signals),
    )
    return replace(
        profile,
        tokens_per_char=tpc,
        prefill_tps=tps,
        cache=cache,
        output_reserve=reserve,
        instruction_horizon=horizon,
        provenance=provenance,
    )


def _merge_signals(old: tuple[str, ...], new: list[str]) -> tuple[str, ...]:
    out = list(old)
    for s in new:
        if s not in out:
            out.append(s)
    return tuple(out[-32:])  # a bounded trail: the ledger keeps the full history


# ---------------------------------------------------------------------- staleness and bind


def ttl_s(local: bool) -> float:
    return LOCAL_TTL_S if local else HOSTED_TTL_S


def probe_reason(
    profile: CapacityProfile | None, *, now: float, local: bool, digest: str | None
) -> str | None:
    """Why this profile should be (re)probed, or None when it is fresh."""
    if profile is None or profile.provenance.probed_at is None:
        return "missing"
    if (
        digest is not None
        and profile.provenance.metadata_digest
        and digest != profile.provenance.metadata_digest
    ):
        return "metadata_changed"
    if profile.provenance.needs_reprobe:
        return "needs_reprobe"
    if now - profile.provenance.probed_at > ttl_s(local):
        return "stale"
    return None


def _recency(profile: CapacityProfile) -> tuple[float, float]:
    p = profile.provenance
    return (
        p.probed_at if p.probed_at is not None else float("-inf"),
        p.updated_at if p.updated_at is not None else float("-inf"),
    )


def profile_for(
    key: ProfileKey,
    ledger_record: CapacityProfileRecord | None,
    process_cache: CapacityProfile | None,
    metadata: ModelContext,
    now: float,
) -> CapacityProfile:
    """The bind-time read: the newer (by ``provenance.probed_at``, then last update) of the ledger
    record and the process cache; a metadata-only profile when neither exists for ``key`` or the
    model's metadata changed since the chosen one was measured. Never runs the ladder."""
    candidates: list[CapacityProfile] = []
    if ledger_record is not None:
        candidates.append(from_record(ledger_record))
    if process_cache is not None:
        candidates.append(process_cache)
    candidates = [c for c in candidates if c.key == key]
    if candidates:
        best = max(candidates, key=_recency)
        recorded = best.provenance.metadata_digest
        if not recorded or recorded == metadata_digest(metadata):
            return best
    return metadata_profile(key, metadata, now=now)


# ---------------------------------------------------------------------- the ledger payload


def to_record(profile: CapacityProfile) -> CapacityProfileRecord:
    p = profile.provenance
    provenance: dict[str, Any] = {
        "source": p.source,
        "probed_at": p.probed_at,
        "updated_at": p.updated_at,
        "rungs": [dict(r) for r in p.rungs],
        "signals": list(p.signals),
        "metadata_digest": p.metadata_digest,
        "protocol": p.protocol,
        "passed_any": p.passed_any,
        "needs_reprobe": p.needs_reprobe,
    }
    h = profile.instruction_horizon
    return CapacityProfileRecord(
        provider=profile.key.provider,
        model=profile.key.model,
        quantisation=profile.key.quantisation,
        declared_window=profile.declared_window,
        verified_window=profile.verified_window,
        instruction_horizon=HorizonRecord(
            tokens=h.tokens, confidence=h.confidence, last_confirmed=h.last_confirmed
        ),
        tokens_per_char=EwmaRecord(
            value=profile.tokens_per_char.value, samples=profile.tokens_per_char.samples
        ),
        prefill_tps=(
            EwmaRecord(value=profile.prefill_tps.value, samples=profile.prefill_tps.samples)
            if profile.prefill_tps is not None
            else None
        ),
        cache=profile.cache.value,
        output_reserve=profile.output_reserve,
        provenance=provenance,
    )


def from_record(record: CapacityProfileRecord) -> CapacityProfile:
    raw = record.provenance
    protocol = raw.get("protocol")
    source = raw.get("source", "probe")
    provenance = ProbeProvenance(
        source=source if source in ("metadata", "probe", "feedback") else "probe",
        probed_at=_float_or_none(raw.get("probed_at")),
        updated_at=_float_or_none(raw.get("updated_at")),
        rungs=tuple(dict(r) for r in raw.get("rungs", ()) if isinstance(r, dict)),
        signals=tuple(str(s) for s in raw.get("signals", ())),
        metadata_digest=str(raw.get("metadata_digest", "")),
        protocol=protocol if protocol in ("native", "inline_fence") else None,
        passed_any=raw.get("passed_any") if isinstance(raw.get("passed_any"), bool) else None,
        needs_reprobe=bool(raw.get("needs_reprobe", False)),
    )
    h = record.instruction_horizon
    return CapacityProfile(
        key=ProfileKey(record.provider, record.model, record.quantisation),
        declared_window=record.declared_window,
        verified_window=record.verified_window,
        instruction_horizon=Horizon(
            tokens=h.tokens, confidence=h.confidence, last_confirmed=h.last_confirmed
        ),
        tokens_per_char=Ewma(record.tokens_per_char.value, record.tokens_per_char.samples),
        prefill_tps=(
            Ewma(record.prefill_tps.value, record.prefill_tps.samples)
            if record.prefill_tps is not None
            else None
        ),
        cache=CacheBehaviour(record.cache),
        output_reserve=record.output_reserve,
        provenance=provenance,
    )


def _float_or_none(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def describe(profile: CapacityProfile) -> str:
    """A few human lines: what the CLI and the main job print."""
    h = profile.instruction_horizon
    p = profile.provenance
    lines = [
        f"capacity profile {profile.key}",
        f"  declared window     {profile.declared_window:,} tokens",
        f"  verified window     {profile.verified_window:,} tokens"
        if profile.verified_window is not None
        else "  verified window     (no over-length seen)",
        f"  instruction horizon {h.tokens:,} tokens (confidence {h.confidence:.2f})",
        f"  tokens per char     {profile.tokens_per_char.value:.3f} ({profile.tokens_per_char.samples} samples)",
        f"  prefill             {profile.prefill_tps.value:,.0f} tok/s"
        if profile.prefill_tps is not None
        else "  prefill             (not measured)",
        f"  cache               {profile.cache.value}",
        f"  output reserve      {profile.output_reserve:,} tokens",
        f"  source              {p.source}; protocol {p.protocol or '-'}; passed any rung: "
        f"{'-' if p.passed_any is None else ('yes' if p.passed_any else 'NO')}",
    ]
    if p.needs_reprobe:
        lines.append("  needs re-probe      yes")
    return "\n".join(lines)


def request_chars(request: ChatRequest) -> int:
    """The characters a request sends: system, every message part, and the tool schemas.

    ``tokens_per_char`` divides billed prompt tokens by this, so the probe and turn feedback
    must count the same way (both call this).
    """
    hit = _CHARS.get(id(request))
    if hit is not None and hit[0] is request:
        return hit[1]
    total = len(request.system) + sum(map(_tool_chars, request.tools))
    known = _MESSAGE_CHARS.get
    for message in request.messages:  # message_chars's own lookup, inline: a call per message cost more than it
        counted = known(id(message))
        total += counted[1] if counted is not None and counted[0] is message else message_chars(message)
    if len(_CHARS) >= 64:
        _CHARS.clear()
    _CHARS[id(request)] = (request, total)
    return total


def message_chars(message: Message) -> int:
    """The characters of one message's parts as ``request_chars`` counts them, counted once per message
    (by identity: a closed turn's messages are the same objects step after step, ``closed_record``)."""
    hit = _MESSAGE_CHARS.get(id(message))
    if hit is not None and hit[0] is message:
        return hit[1]
    total = 0
    for part in message.content:
        if isinstance(part, TextBlock):
            total += len(part.text)
        elif isinstance(part, ThinkingBlock):
            total += len(part.thinking)
        elif isinstance(part, ToolUseBlock):
            total += len(part.name) + len(input_json(part))
        elif isinstance(part, ToolResultBlock):
            total += len(part.content)
    if len(_MESSAGE_CHARS) >= 16_384:  # the messages of a few sessions' windows
        _MESSAGE_CHARS.clear()
    _MESSAGE_CHARS[id(message)] = (message, total)
    return total


_MESSAGE_CHARS: dict[int, tuple[Message, int]] = {}


def _tool_chars(tool: ToolSpec) -> int:
    """A tool's name, description and schema (as JSON), counted once per (frozen) spec: a session's steps send
    the same specs, and each request's count dumped every schema again."""
    hit = _TOOL_CHARS.get(id(tool))
    if hit is not None and hit[0] is tool:
        return hit[1]
    total = len(tool.name) + len(tool.description) + len(json.dumps(tool.input_schema, ensure_ascii=False))
    if len(_TOOL_CHARS) >= 1024:
        _TOOL_CHARS.clear()
    _TOOL_CHARS[id(tool)] = (tool, total)
    return total


_TOOL_CHARS: dict[int, tuple[ToolSpec, int]] = {}

# The last requests measured, by identity (a frozen ChatRequest never changes): a step measures its request
# several times (the step policy, the receipt, the profile's feedback), each a walk of every part.
_CHARS: dict[int, tuple[ChatRequest, int]] = {}
