"""The capacity probe's I/O: synthetic turn-shaped histories, sent through a provider adapter.

``ProbeRunner(provider, key).run()`` does the three rungs of spec §1 and returns a ``ProbeReport``:

1. metadata: ``provider.model_context()`` (declared window, output limit);
2. cache: two identical requests behind a fresh prefix (reported cached tokens, or ≥5× faster);
3. horizon: the search of ``context.probe.LadderSearch``. Each size gets a synthetic history shaped
   like real turns (a user question, an assistant tool call, a digest-shaped result carrying an
   ``[evidence:…]`` tag, a short answer), ending in ONE instruction: call ``probe_ack`` with a
   nonce. The same history ending in "do not call a tool" is the negative control. A rung first
   sends its prompt with max_tokens=1 to see its billed size and re-aims until it lands on the
   target; each sample is then one request with ``max_tokens`` ≈ 32, sending the same bytes, so
   they hit the prefix cache and cost decode time only. A reply cut inside a call is continued.

Histories are sized in tokens through the tokens-per-char ratio the provider's own usage reports,
re-measured after every request, and filled to the character (the last answer is padded). Two protocols: ``native`` sends the tools in the request and reads
``tool_calls`` (an inline fence in the text also counts, and the profile records which one the model
used); ``inline_fence`` lists the tools in the system prompt and asks for a fenced call in the text,
for models whose template has no tool support.

``ProbeReport.ledger_payloads()`` is what every probe writes: an ``activity`` entry
(``capacity.probe``: rungs, samples, verdicts) and then the ``capacity_profile`` entry.
"""

from __future__ import annotations

import asyncio
import json
import random
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import blake3
import httpx

from context.capacity import (
    PRIOR_TOKENS_PER_CHAR,
    UNKNOWN_WINDOW,
    CapacityProfile,
    Ewma,
    ProfileKey,
    Protocol,
    request_chars,
    to_record,
)
from context.messages import (
    ChatRequest,
    ChatResult,
    Message,
    ModelContext,
    ToolResultPart,
    ToolSpec,
    ToolUsePart,
)
from context.probe import (
    ACK_TOOL,
    DEFAULT_CAP,
    DEFAULT_LEAD,
    CacheVerdict,
    LadderResult,
    LadderSearch,
    RungOutcome,
    SampleKind,
    SampleOutcome,
    judge_cache,
    plan_rungs,
    profile_from_ladder,
    settled,
)
from context.toolcalls import ends_inside_call, native_calls, parse_tool_calls
from events.payloads import Activity, CapacityProfileRecord
from providers.base import Provider
from providers.tokencount import TokenCounter
from vak.errors import ContextOverflow, InvalidInput, ProviderError, ProviderRequestError

Progress = Callable[[dict[str, Any]], None]

# ---------------------------------------------------------------------- synthetic turns

_TOPICS = (
    "the billing service", "the search index", "quarterly revenue", "the deploy pipeline", "customer churn",
    "the cache layer", "token refresh", "latency in the EU cluster", "the import job",
    "disk usage on the builders", "the pricing table", "the onboarding emails", "failed payments",
    "the audit log", "the feature flags", "the nightly backup", "the mobile release", "support tickets",
)
_WORDS = (
    "service request config value change deploy error rate users account report data table index query "
    "cluster node region latency budget limit owner team release version build test check alert metric "
    "window retry queue worker job schedule backup restore policy access token session cache record file "
    "line entry field status result note summary review plan issue fix patch update rollout monitor trend "
    "week month daily hourly peak average median total count share growth drop spike stable normal slow "
    "fast large small first last new old main primary secondary manual automatic internal external"
).split()
_FILES = ("src/billing/api.py", "docs/runbook.md", "ops/deploy.yaml", "reports/q3.csv", "src/search/index.rs",
          "config/flags.toml", "notes/incidents.md", "src/auth/refresh.go")
_QUESTIONS = ("What do the docs say about {t}?", "Find where {t} is configured.",
              "How did {t} change last month?", "Is anything wrong with {t}?")
_TOOLS = (
    ToolSpec(name="search_docs", description="Search the team's documents. Returns a digest of matches.",
             input_schema={"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}),
    ToolSpec(name="read_file", description="Read a file from the repository. Returns a digest of its lines.",
             input_schema={"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
)
ACK_SPEC = ToolSpec(
    name=ACK_TOOL,
    description="Acknowledge an instruction. It has no side effects.",
    input_schema={"type": "object", "properties": {"ack": {"type": "string"}}, "required": ["ack"]},
)
SYSTEM = ("You are an assistant that works through a user's requests with tools. Answer briefly. "
          "When the user gives an instruction about tools, follow it exactly.")


def _sentence(rng: random.Random) -> str:
    words = [rng.choice(_WORDS) for _ in range(rng.randint(9, 15))]
    return " ".join(words).capitalize() + "."


@dataclass(frozen=True)
class SyntheticTurn:
    """One turn of filler: question, tool call, digest-shaped result with an evidence tag, answer."""

    question: str
    tool: str
    arguments: dict[str, str]
    result: str
    answer: str


def synthetic_turn(index: int, lines: int | None = None) -> SyntheticTurn:
    """Turn ``index`` of every probe history (deterministic, so smaller histories are prefixes)."""
    rng = random.Random(f"vak-probe-turn-{index}")
    topic = rng.choice(_TOPICS)
    tool = _TOOLS[index % 2].name
    arguments = {"query": topic} if tool == "search_docs" else {"path": rng.choice(_FILES)}
    evidence = blake3.blake3(f"evidence-{index}".encode()).hexdigest()[:12]
    total = rng.randint(20, 60)
    shown = lines if lines is not None else rng.randint(5, 9)
    body = "\n".join(f"- {rng.choice(_FILES)}:{rng.randint(1, 400)}: {_sentence(rng)}" for _ in range(shown))
    result = (f"[evidence:{evidence}] {tool} → {total} matches, showing {shown}\n{body}\n"
              f"(digest of {total} lines; recall(evidence_id=\"{evidence}\") returns the rest)")
    answer = f"{topic.capitalize()}: {_sentence(rng)} [evidence:{evidence}]"
    return SyntheticTurn(rng.choice(_QUESTIONS).format(t=topic), tool, arguments, result, answer)


def _turn_messages(turn: SyntheticTurn, index: int, protocol: Protocol) -> list[Message]:
    call_id = f"call_{index}"
    if protocol == "native":
        call = Message(role="assistant", content=(ToolUsePart(id=call_id, name=turn.tool, input=turn.arguments),))
        result = Message(role="user", content=(ToolResultPart(tool_use_id=call_id, content=turn.result),))
    else:
        fence = json.dumps({"name": turn.tool, "arguments": turn.arguments})
        call = Message.assistant(f"```tool_call\n{fence}\n```")
        result = Message.user(f"Tool result ({turn.tool}):\n{turn.result}")
    return [Message.user(turn.question), call, result, Message.assistant(turn.answer)]


def _inline_system(tools: Sequence[ToolSpec]) -> str:
    listing = "\n".join(json.dumps({"name": t.name, "description": t.description, "parameters": t.input_schema})
                        for t in tools)
    return (f"{SYSTEM}\n\nTools you can call:\n{listing}\n\nTo call a tool, write only this, with the tool's "
            "name and arguments:\n```tool_call\n{\"name\": \"<tool>\", \"arguments\": {...}}\n```")


def instruction_text(kind: SampleKind, nonce: str) -> str:
    if kind == "instruction":
        return f'Stop here and call the {ACK_TOOL} tool now with ack="{nonce}". Do not write any text.'
    return "Do not call any tool now. In one short sentence, say what the last question was about."


def build_request(
    target_tokens: int,
    tokens_per_char: float,
    *,
    kind: SampleKind,
    nonce: str,
    model: str,
    protocol: Protocol = "native",
    max_tokens: int = 32,
    temperature: float | None = None,
    salt: str = "",
) -> ChatRequest:
    """A synthetic history of about ``target_tokens`` prompt tokens (at ``tokens_per_char``).

    Whole turns are added while they fit; the last turn's digest shows fewer lines to land near the
    target (it is still a complete turn). ``salt`` goes first in the system prompt, so a salted
    request shares no cached prefix with an unsalted one (the cache rung).
    """
    tools = (*_TOOLS, ACK_SPEC)
    system = (f"[session {salt}] " if salt else "") + (SYSTEM if protocol == "native" else _inline_system(tools))
    ending = Message.user(instruction_text(kind, nonce))
    base = ChatRequest(model=model, system=system, messages=(ending,), tools=tools if protocol == "native" else (),
                       max_tokens=max_tokens, temperature=temperature)
    budget = target_tokens / tokens_per_char - request_chars(base)
    messages: list[Message] = []
    index = 0
    while True:
        turn = _turn_messages(synthetic_turn(index), index, protocol)
        size = _chars(turn, model)
        if size <= budget or index == 0:
            if size > budget:  # even one turn is over the target: shrink its digest to fit
                turn = _fit_turn(index, budget, protocol, model)
                size = _chars(turn, model)
            messages.extend(turn)
            budget -= size
            index += 1
            continue
        partial = _fit_turn(index, budget, protocol, model)
        if _chars(partial, model) <= budget:  # a shorter last turn, only when even that fits
            messages.extend(partial)
            budget -= _chars(partial, model)
        break
    # Land on the target, not up to a turn below it: what is left goes into the last answer as
    # more of its prose, cut to the exact number of characters.
    if budget >= 1 and messages:
        last = messages[-1]
        messages[-1] = Message.assistant(last.text + _padding(index, int(budget)))
    return base.model_copy(update={"messages": (*messages, ending)})


def _padding(index: int, chars: int) -> str:
    """``chars`` characters of answer-like prose (deterministic per turn)."""
    rng = random.Random(f"vak-probe-pad-{index}")
    text = ""
    while len(text) < chars:
        text += " " + _sentence(rng)
    return text[:chars]


def _chars(messages: Sequence[Message], model: str) -> int:
    return request_chars(ChatRequest(model=model, messages=tuple(messages)))


def _fit_turn(index: int, budget: float, protocol: Protocol, model: str) -> list[Message]:
    """Turn ``index`` with as many digest lines as fit ``budget`` chars (at least one line)."""
    best = _turn_messages(synthetic_turn(index, lines=1), index, protocol)
    for lines in range(2, 10):
        turn = _turn_messages(synthetic_turn(index, lines=lines), index, protocol)
        if _chars(turn, model) > budget:
            break
        best = turn
    return best


# ---------------------------------------------------------------------- the runner


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


def _nonce(target: int, salt: str) -> str:
    return blake3.blake3(f"{salt}:{target}".encode()).hexdigest()[:6]


# Requests with max_tokens=1 a rung may spend landing its prompt on the target.
SIZING_SHOTS = 4
# Fewer freshly evaluated tokens than this time mostly the request overhead, not prefill.
MIN_PREFILL_SAMPLE_TOKENS = 64


class ProbeRunner:
    """Runs the probe for one (provider, model) through its adapter. See the module docstring.

    ``salt`` goes at the head of every prompt and into the nonces, so this run shares no cached prefix
    with any earlier probe of the same server: each rung's first sample is a true cache miss (that is
    where prefill speed is learned) and only samples 2 and 3 ride the cache. None draws a fresh one;
    the cost benchmark passes its own to run ladders side by side.
    """

    def __init__(
        self,
        provider: Provider,
        key: ProfileKey,
        *,
        settings: ProbeSettings | None = None,
        on_progress: Progress | None = None,
        clock: Callable[[], float] = time.time,
        salt: str | None = None,
        counter: TokenCounter | None = None,
    ) -> None:
        self.provider = provider
        # An exact counter (the server's own template and tokenizer) sizes each rung without sending it;
        # the quick ladder uses one. Without it a rung is sized by billed max_tokens=1 shots.
        self.counter = counter
        self.key = key
        self.settings = settings or ProbeSettings()
        self.on_progress = on_progress or (lambda _event: None)
        self.clock = clock
        self.salt = secrets.token_hex(4) if salt is None else salt
        self.tpc = Ewma(PRIOR_TOKENS_PER_CHAR, 0)  # for this content, from the provider's usage
        self.prefill: Ewma | None = None
        self.requests = 0
        # (chars sent, prompt tokens billed) of every answered request: the sizing fit's data.
        self.observations: list[tuple[int, int]] = []
        # Requested size -> the size to ask the history builder for, corrected by billed counts.
        self.aim: dict[int, int] = {}
        self.tolerance = 4  # billed tokens a rung may land from its target (set from the step in run())
        self.decode_tps: Ewma | None = None
        self.last_billed = 0  # the previous request's prompt: most of it is in the server's prefix cache
        self.sent: list[SampleOutcome] = []  # every request's outcome, sizing shots included (for cost benches)

    async def run(self) -> ProbeReport:
        started = self.clock()
        metadata = await self.provider.model_context(self.key.model)
        window = self.settings.window or metadata.declared_window or UNKNOWN_WINDOW
        self.on_progress({"stage": "metadata", "declared_window": metadata.declared_window,
                          "probing_window": window, "source": metadata.source})
        cache = None
        if self.settings.cache_rung:
            cache = await self.cache_rung(min(self.settings.cache_tokens, window // 4))
        floor = await self._measure_floor()
        rungs = plan_rungs(window, floor=floor, first=self.settings.first_rung)
        search = LadderSearch(rungs, floor=floor, resolution=self.settings.resolution or 0,
                              max_sizes=self.settings.max_sizes, second_look=self.settings.second_look)
        self.tolerance = max(4, search.resolution // 8)
        self.on_progress({"stage": "plan", "rungs": list(rungs), "floor": floor, "resolution": search.resolution})
        while (target := search.next_target()) is not None:
            outcome = await self.rung(target, earlier=search.verdicts.get(target))
            search.record(outcome)
            pooled = search.verdicts[target]
            self.on_progress({"stage": "rung", "outcome": outcome.as_dict(), "pooled": pooled.as_dict(),
                              "look": search.looks[target], "lo": search.lo, "hi": search.hi})
        ladder = search.result()
        now = self.clock()
        profile = profile_from_ladder(
            self.key, metadata, ladder, now=now, tokens_per_char=self.tpc, prefill_tps=self.prefill,
            cache=cache, protocol_asked=self.settings.protocol,
        )
        self.on_progress({"stage": "done", "horizon": ladder.horizon_tokens, "passed_any": ladder.passed_any})
        return ProbeReport(self.key, profile, metadata, ladder, cache, self.settings, started, now, self.requests,
                           self.salt)

    def sizing(self) -> tuple[float, float]:
        """(overhead tokens, tokens per char) for sizing histories: a least-squares line through the
        observed (chars, tokens) pairs once two sizes are known, since chat templates add a fixed cost
        that a plain ratio spreads over small and large prompts alike; the plain ratio before that."""
        sizes = {c for c, _ in self.observations}
        if len(sizes) >= 2:
            n = len(self.observations)
            mean_c = sum(c for c, _ in self.observations) / n
            mean_t = sum(t for _, t in self.observations) / n
            var = sum((c - mean_c) ** 2 for c, _ in self.observations)
            slope = sum((c - mean_c) * (t - mean_t) for c, t in self.observations) / var
            if slope > 0:
                return max(0.0, mean_t - slope * mean_c), slope
        return 0.0, self.tpc.value

    def _request(self, target: int, kind: SampleKind, *, salt: str = "", max_tokens: int | None = None,
                 aim: int | None = None) -> ChatRequest:
        overhead, slope = self.sizing()
        return build_request(
            max(0, round((aim if aim is not None else target) - overhead)), slope, kind=kind,
            nonce=_nonce(target, self.salt),
            model=self.key.model, protocol=self.settings.protocol,
            max_tokens=max_tokens or self.settings.max_tokens, temperature=self.settings.temperature,
            salt=salt or self.salt,
        )

    async def _measure_floor(self) -> int:
        """The billed size of the smallest history (one short turn and the instruction): one request
        with max_tokens=1. It is the ladder's floor and a second point for the sizing fit."""
        # The control ending (no tool asked for) keeps this request out of any verdict; it is a few
        # tokens shorter than the instruction ending, well inside one search step.
        request = build_request(0, self.tpc.value, kind="control", nonce=_nonce(0, self.salt),
                                model=self.key.model, protocol=self.settings.protocol, max_tokens=1,
                                temperature=self.settings.temperature, salt=self.salt)
        sample = await self._sample(request, "control", 0)
        if sample.prompt_tokens is None:
            raise ProviderRequestError(
                f"{self.key}: the smallest probe history (one turn) was not accepted ({sample.error}). "
                "The model's window is too small to probe, or the server is failing; check it directly.",
                provider=self.provider.name,
            )
        return sample.prompt_tokens

    async def rung(self, target: int, earlier: RungOutcome | None = None) -> RungOutcome:
        """Run one rung at ``target`` billed prompt tokens: size it, then the instruction samples,
        then the controls.

        Sizing: the instruction prompt is sent once with max_tokens=1 and its billed size compared
        with the target; when it is off by more than ``tolerance`` the history is rebuilt aiming
        that much further (a Newton step on the provider's own count) and sent again, at most three
        times. The samples then send those exact bytes, so a prefix cache serves them.

        Sampling (``settled``): a kind stops once one answer leads by ``lead`` or ``samples`` are in.
        A second look (``earlier``: this size's first look) counts the first look's answers too and
        samples until the pooled answers lead by ``lead``: two flipped samples that settled the first
        look cannot leave the pooled verdict on a tie.
        """
        samples: list[SampleOutcome] = []
        started = time.perf_counter()
        instruction, billed = await self._sized(target, started)
        if instruction is None:  # the sizing request was rejected as over-length
            assert billed is not None
            return RungOutcome(target, (billed,))
        requests = {"instruction": instruction, "control": self._request(target, "control",
                                                                       aim=self.aim.get(target))}
        plan: tuple[tuple[SampleKind, int], ...] = (
            ("instruction", self.settings.samples), ("control", self.settings.controls))
        for kind, count in plan:
            yes = no = 0
            before = (earlier.instructions if kind == "instruction" else earlier.controls) if earlier else ()
            for s in before:
                hit = s.followed if kind == "instruction" else not s.abstained
                yes, no = yes + hit, no + (not hit)
            cap = len(before) + count
            for index in range(count):
                sample = await self._sample(requests[kind], kind, target, started=started,
                                            label=f"{kind} {index + 1}/{count}")
                samples.append(sample)
                hit = sample.followed if kind == "instruction" else not sample.abstained
                yes, no = yes + hit, no + (not hit)
                self.on_progress({"stage": "sample", "target": target, "kind": kind, "index": index + 1,
                                  "of": count, "hit": hit, "elapsed_s": round(time.perf_counter() - started, 1)})
                if sample.overflow:
                    return RungOutcome(target, tuple(samples))  # the same prompt would be rejected again
                lead = self.settings.lead if kind == "instruction" else 2
                if self.settings.decide_early and settled(yes, no, cap=cap, lead=lead):
                    break
        return RungOutcome(target, tuple(samples))

    async def _sized(self, target: int, started: float) -> tuple[ChatRequest | None, SampleOutcome | None]:
        """The instruction request for ``target``, built to land within ``tolerance`` billed tokens.

        Up to ``SIZING_SHOTS`` shots; when none lands (a turn boundary: the next turn's messages
        cost template tokens of their own, so some sizes cannot be built), the closest one is used.
        """
        counted = await self._counted(target, started) if self.counter is not None else None
        if counted is not None:
            return counted
        aim = self.aim.get(target, target)
        best: tuple[int, int, ChatRequest, SampleOutcome] | None = None  # (|miss|, aim, request, shot)
        tried: list[tuple[int, int]] = []  # (aim, billed)
        for attempt in range(SIZING_SHOTS):
            request = self._request(target, "instruction", aim=aim)
            shot = await self._sample(request.model_copy(update={"max_tokens": 1}), "instruction", target,
                                      started=started, label=f"sizing {attempt + 1}", judge=False)
            if shot.prompt_tokens is None:
                if shot.overflow:
                    return None, shot
                return request, shot  # an error: sample anyway, the samples will say what happens
            self.on_progress({"stage": "sizing", "target": target, "billed": shot.prompt_tokens,
                              "attempt": attempt + 1, "elapsed_s": round(time.perf_counter() - started, 1)})
            miss = target - shot.prompt_tokens
            tried.append((aim, shot.prompt_tokens))
            if best is None or abs(miss) < best[0]:
                best = (abs(miss), aim, request, shot)
            if abs(miss) <= self.tolerance:
                break
            aim = _next_aim(tried, target)
        assert best is not None
        _, self.aim[target], request, shot = best
        return request, shot

    async def _counted(self, target: int, started: float) -> tuple[ChatRequest, SampleOutcome] | None:
        """``_sized`` through the exact counter: the same Newton steps on the server's own count, with
        nothing sent to the model (no prefill), so more shots are affordable. None once the counter has
        fallen back to an estimate (a server without the endpoints): billed shots size the rung then."""
        assert self.counter is not None
        aim = self.aim.get(target, target)
        best: tuple[int, int, ChatRequest, int] | None = None  # (|miss|, aim, request, tokens)
        tried: list[tuple[int, int]] = []
        for attempt in range(2 * SIZING_SHOTS):
            request = self._request(target, "instruction", aim=aim)
            tokens = await self.counter.count(request)
            if getattr(self.counter, "exact", True) is False:
                return None
            self.on_progress({"stage": "sizing", "target": target, "billed": tokens, "counted": True,
                              "attempt": attempt + 1, "elapsed_s": round(time.perf_counter() - started, 1)})
            tried.append((aim, tokens))
            if best is None or abs(target - tokens) < best[0]:
                best = (abs(target - tokens), aim, request, tokens)
            if abs(target - tokens) <= self.tolerance:
                break
            aim = _next_aim(tried, target)
        assert best is not None
        _, self.aim[target], request, tokens = best
        return request, SampleOutcome("instruction", target, tokens)

    def _estimate_s(self, request: ChatRequest, judge: bool) -> float | None:
        """Seconds this request should take: its uncached prompt at the measured prefill rate, plus
        decoding ``max_tokens`` at the measured decode rate."""
        if self.prefill is None:
            return None
        overhead, slope = self.sizing()
        tokens = overhead + slope * request_chars(request)
        fresh = max(float(MIN_PREFILL_SAMPLE_TOKENS), tokens - 0.95 * min(tokens, self.last_billed))
        decode = request.max_tokens / self.decode_tps.value if self.decode_tps and judge else 0.0
        return fresh / self.prefill.value + decode

    async def _complete(self, request: ChatRequest, target: int, label: str, started: float,
                        judge: bool) -> ChatResult:
        """``provider.complete``, with a "waiting" progress event every ``progress_every_s``."""
        task = asyncio.ensure_future(self.provider.complete(request))
        estimate = self._estimate_s(request, judge)
        begun = time.perf_counter()
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=self.settings.progress_every_s)
                if done:
                    return task.result()
                self.on_progress({"stage": "waiting", "target": target, "what": label,
                                  "request_s": round(time.perf_counter() - begun, 1),
                                  "elapsed_s": round(time.perf_counter() - started, 1),
                                  "estimate_s": None if estimate is None else round(estimate, 1)})
        finally:
            if not task.done():
                task.cancel()

    async def _sample(self, request: ChatRequest, kind: SampleKind, target: int, *, started: float | None = None,
                      label: str = "", judge: bool = True) -> SampleOutcome:
        """One request and what it called. A completion cut by max_tokens inside a call is continued."""
        self.requests += 1
        begun = time.perf_counter()
        nonce = _nonce(target, self.salt) if kind == "instruction" else ""
        try:
            result = await self._complete(request, target, label or kind, started or begun, judge)
        except ContextOverflow as exc:
            return SampleOutcome(kind, target, None, overflow=True, limit_tokens=exc.limit_tokens, nonce=nonce,
                                 latency_ms=(time.perf_counter() - begun) * 1000.0, error=str(exc)[:300])
        except ProviderRequestError:
            raise  # a malformed request or a wrong model: every rung would fail the same way
        except ProviderError as exc:  # retryable errors that outlived their retries
            return SampleOutcome(kind, target, None, error=str(exc)[:300], nonce=nonce,
                                 latency_ms=(time.perf_counter() - begun) * 1000.0)
        self._learn(request, result)
        first = result  # the prompt's own figures; a continuation's prompt also holds the reply so far
        text, output_tokens, extended = result.text, result.usage.output_tokens, 0
        offered = [t.name for t in (*_TOOLS, ACK_SPEC)]
        calls = parse_tool_calls(text, offered)
        while (judge and result.stop_reason in ("length", "max_tokens") and ends_inside_call(calls)
               and extended < self.settings.max_extensions):
            extended += 1
            more = await self._continue(request, text, target, label, started or begun)
            if more is None:
                break
            # llama.cpp returns the prefilled start with the continuation; others only the new text.
            text = more.text if more.text.startswith(text) else text + more.text
            output_tokens += more.usage.output_tokens
            calls = parse_tool_calls(text, offered)
            result = more
        native = native_calls((c.name, c.arguments) for c in first.tool_calls)
        if extended:
            native += native_calls((c.name, c.arguments) for c in result.tool_calls)
        outcome = SampleOutcome(
            kind, target, first.usage.prompt_tokens, calls=native + calls, nonce=nonce,
            text=text, latency_ms=(time.perf_counter() - begun) * 1000.0,
            cached_tokens=first.usage.cache_read_tokens, output_tokens=output_tokens,
            prefill_ms=_timing(first, "prompt_ms"), decode_ms=_timing(first, "predicted_ms"), extended=extended,
        )
        self.sent.append(outcome)
        return outcome

    async def _continue(self, request: ChatRequest, text: str, target: int, label: str,
                        started: float) -> ChatResult | None:
        """Ask for more of a reply cut inside a call: the reply so far is sent as the assistant's turn."""
        more = request.model_copy(update={"messages": (*request.messages, Message.assistant(text)),
                                          "max_tokens": 2 * self.settings.max_tokens})
        self.requests += 1
        try:
            return await self._complete(more, target, f"{label} (continued)", started, True)
        except ProviderRequestError:
            raise
        except ProviderError:
            return None

    def _learn(self, request: ChatRequest, result: ChatResult) -> None:
        prompt = result.usage.prompt_tokens
        chars = request_chars(request)
        self.last_billed = max(prompt, 0)
        decoded, decode_ms = result.usage.output_tokens, _timing(result, "predicted_ms")
        if decoded >= 4 and decode_ms:
            rate = decoded / (decode_ms / 1000.0)
            self.decode_tps = self.decode_tps.update(rate) if self.decode_tps else Ewma(rate, 1)
        if prompt > 0 and chars > 0:
            self.tpc = self.tpc.update(prompt / chars)
            self.observations.append((chars, prompt))
        tps: float | None = None
        evaluated, eval_ms = _timing(result, "prompt_n"), _timing(result, "prompt_ms")
        if evaluated is not None and evaluated >= MIN_PREFILL_SAMPLE_TOKENS and eval_ms:
            # The server says how many tokens it actually prefilled and how long that took: exact
            # even when a few leading template tokens came from its cache.
            tps = evaluated / (eval_ms / 1000.0)
        elif result.usage.cache_read_tokens == 0 and prompt > 0:
            prefill_ms = _prefill_ms(result)  # otherwise only cache-miss requests say anything (spec §1)
            if prefill_ms:
                tps = prompt / (prefill_ms / 1000.0)
        if tps is not None:
            self.prefill = self.prefill.update(tps) if self.prefill else Ewma(tps, 1)

    async def cache_rung(self, target: int) -> CacheVerdict:
        """Two identical requests behind a fresh (salted) prefix; also calibrates tokens per char."""
        salt = blake3.blake3(f"cache-{self.salt}-{self.clock()}".encode()).hexdigest()[:8]
        request = self._request(max(target, 256), "control", salt=salt, max_tokens=1)
        first = await self._sample(request, "control", target)
        second = await self._sample(request, "control", target)
        verdict = judge_cache(first, second)
        self.on_progress({"stage": "cache", "behaviour": verdict.behaviour.value, "signal": verdict.signal})
        return verdict


def _next_aim(tried: Sequence[tuple[int, int]], target: int) -> int:
    """The next size to ask the history builder for: a Newton step from the closest shot so far;
    once shots landed on both sides of the target, kept strictly between the closest two (a turn
    boundary makes billing jump, and a plain Newton step would bounce across it)."""
    aim, billed = min(tried, key=lambda t: abs(target - t[1]))
    step = aim + (target - billed)
    below = [t for t in tried if t[1] < target]
    above = [t for t in tried if t[1] > target]
    if below and above:
        a_lo, a_hi = max(below, key=lambda t: t[1])[0], min(above, key=lambda t: t[1])[0]
        low, high = min(a_lo, a_hi), max(a_lo, a_hi)
        if not low < step < high or any(step == a for a, _ in tried):
            step = (low + high) // 2
    return step


def _timing(result: ChatResult, name: str) -> float | None:
    """One of llama.cpp's ``timings`` (``prompt_ms``, ``predicted_ms``), when the server reports it."""
    value = result.timings.get(name)
    return float(value) if isinstance(value, int | float) else None


def _prefill_ms(result: ChatResult) -> float | None:
    """Prompt-eval time: llama.cpp's ``timings.prompt_ms``, else first-token latency, else nothing."""
    prompt_ms = result.timings.get("prompt_ms")
    if isinstance(prompt_ms, int | float) and prompt_ms > 0:
        return float(prompt_ms)
    return result.first_token_ms


# ---------------------------------------------------------------------- the local model, end to end


@dataclass(frozen=True)
class LocalProbe:
    """What ``measure_local_profile`` measured, with the server settings it used."""

    report: ProbeReport
    n_ctx: int
    model: str
    extra: dict[str, Any] = field(default_factory=dict)


# The main job's quick ladder (a few minutes on 2 cores): four sizes, majority of three stopping when
# two agree, no second look. A full `vak probe` uses the defaults (docs/CAPACITY.md "Noise").
QUICK = ProbeSettings(samples=3, lead=2, second_look=False, controls=1, first_rung=1024, max_sizes=4)
# SmolLM2 is served with the project's tool template; Gemma keeps its own, which has no tools.
# Qwen2.5-Coder keeps its own template: asked plainly it writes its call in a ```json fence in the text.
LOCAL_PROTOCOL: dict[str, Protocol] = {"smollm2": "native", "gemma3-270m": "inline_fence",
                                       "qwen2.5-coder-0.5b": "inline_fence", "qwen": "inline_fence"}
LOCAL_QUANTISATION = {"smollm2": "Q4_1", "gemma3-270m": "Q4_K_M", "qwen2.5-coder-0.5b": "Q4_K_M", "qwen": "Q4_K_M"}


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
    import os

    from providers.localserver import LocalModelServer
    from providers.openai_compat import OpenAICompatProvider
    from providers.tokencount import CharRatioCounter, LlamaCppTokenCounter

    chosen = settings or ProbeSettings(
        samples=QUICK.samples, lead=QUICK.lead, second_look=QUICK.second_look, controls=QUICK.controls,
        first_rung=QUICK.first_rung, max_sizes=QUICK.max_sizes,
        protocol=LOCAL_PROTOCOL.get(model, "native"),
    )
    key = ProfileKey("local", model, LOCAL_QUANTISATION.get(model, ""))

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
    import asyncio

    report = asyncio.run(probe_local(model, n_ctx=n_ctx, settings=settings, on_progress=on_progress,
                                     base_url=base_url, api_key=api_key))
    return report.profile
