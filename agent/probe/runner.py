"""``ProbeRunner``: the capacity probe's requests, sent through a provider adapter (see ``vak_context.agent.probe``).

The runner owns the I/O and the bookkeeping a run learns as it goes (tokens per char, prefill and
decode rates, where each rung's history must aim to land on its target); the ladder's plan and
verdicts are ``vak_context.context.capacity.ladder``'s, the histories ``vak_context.agent.probe.history``'s.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable, Sequence
from typing import Any

import blake3

from vak_context.agent.probe.history import OFFERED_TOOLS, build_request
from vak_context.agent.probe.results import ProbeReport
from vak_context.agent.probe.settings import ProbeSettings
from vak_context.context.capacity.ladder import (
    CacheVerdict,
    LadderSearch,
    RungOutcome,
    SampleKind,
    SampleOutcome,
    judge_cache,
    plan_rungs,
    profile_from_ladder,
    settled,
)
from vak_context.context.capacity.profile import (
    PRIOR_TOKENS_PER_CHAR,
    UNKNOWN_WINDOW,
    Ewma,
    ProfileKey,
    request_chars,
)
from vak_context.context.request.messages import ChatRequest, ChatResult, Message
from vak_context.context.request.toolcalls import ends_inside_call, native_calls, parse_tool_calls
from vak_context.errors import ContextOverflow, ProviderError, ProviderRequestError
from vak_context.providers.base import Provider
from vak_context.providers.tokencount import TokenCounter

Progress = Callable[[dict[str, Any]], None]


def _nonce(target: int, salt: str) -> str:
    return blake3.blake3(f"{salt}:{target}".encode()).hexdigest()[:6]


# Requests with max_tokens=1 a rung may spend landing its prompt on the target.
SIZING_SHOTS = 4
# Fewer freshly evaluated tokens than this time mostly the request overhead, not prefill.
MIN_PREFILL_SAMPLE_TOKENS = 64


class ProbeRunner:
    """The probe runner: drives one ladder (``LadderSearch``) for one (provider, model) through its adapter,
    from synthetic histories, to a ``ProbeReport``. See ``vak_context.agent.probe``'s docstring.

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
        offered = [t.name for t in OFFERED_TOOLS]
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
