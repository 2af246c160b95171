"""The prefix cache on the real local server: P4 within a turn, P5 across turns, and what a tool promotion costs.

One run, one llama.cpp server (``vak_context.providers.local.server``; Qwen2.5-Coder-0.5B by default, ``--model
smollm2`` for a fast one), one session driven by the real :class:`vak_context.agent.loop.TurnLoop`:

1. A workspace of small modules is written to a temp folder. The session is seeded with earlier
   turns (a directive, a ``read_file`` call and its real result, an answer, a closed TurnCard: the
   entries the loop itself writes) up to about ``--session-tokens`` of history.
2. ``--turns`` live turns run through the loop. Each directive asks for two files, one per step, as
   the seeded turns did, so a turn has several steps; the model decides its own calls, and only turns with two steps or
   more give P4 pairs. Every request and the server's usage and ``timings`` are recorded.
3. **P4, within a turn**: for each step pair, ``min(cached(k+1), prompt(k)) / prompt(k)`` (the share of
   step k's prompt that step k+1 found in the cache; cached tokens past ``prompt(k)`` are the step's
   own generation), pooled over every pair. The spec's harness assertions are checked on every step:
   ``cached(k+1) >= prompt(k) - tail_tokens`` within a turn, ``cached >= prefix_tokens`` on each
   turn's first step (``prefix_tokens``: the cached count of a second usage-only request that shares
   only system + tools with the first; ``tail_tokens``: the server's ``/tokenize`` of the tail).
   Each pair's rendered prompt (``/apply-template``) is checked to be a byte prefix of the next one.
   A pair whose next step the assembler planned again (the turn outgrew its budget: the step
   compaction the spec allows mid-turn) is shown apart and left out of the P4 figure.
4. **P5, across turns**: the recorded requests are replayed twice in order (``max_tokens: 1``, so
   only prefill differs): as sent (the tail in the directive message) and as the baseline, the same
   requests with the tail block moved to the end of the system prompt. Per turn, the server's
   ``timings.prompt_ms`` and ``prompt_n`` are summed over the turn's steps; the figure is the
   baseline's sum over the chosen design's, over every turn after the first (the first turn is cold
   in both arms).
5. **Promotion**: the last recorded request, followed by a ``find_tools`` call and its result, sent
   twice after the same warm-up: with the found schema only in the result (the chosen design, the
   request's ``tools`` unchanged) and with the schema also appended to ``tools``.

    .venv/bin/python bench/cache.py                    # Qwen, n_ctx 16384, ~8k tokens of history, 3 turns
    .venv/bin/python bench/cache.py --model smollm2    # SmolLM2 (n_ctx 8192, ~4k tokens of history)
    .venv/bin/python bench/cache.py --quick            # the smoke test's size: SmolLM2, one seeded turn, 2 turns

P4 as a client of ``vak serve`` sees it (the ``openai`` client's own tools through ``vak serve --upstream
local:MODEL``, prompt and cached tokens per upstream call from the ledger's receipts): ``bench/serve_live.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from itertools import pairwise
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from vak_context.actors.local_services import InProcessServices
from vak_context.agent.loop import TurnConfig, TurnLoop
from vak_context.agent.workspace import Workspace
from vak_context.context.capacity.profile import CapacityProfile, Ewma, Horizon
from vak_context.context.request.assemble import system_prompt
from vak_context.context.request.messages import ChatRequest, ChatResult, Message, ToolSpec
from vak_context.context.request.surface import ToolDecl, find_tools_result
from vak_context.engine.binding import default_surface
from vak_context.events.blocks import TextBlock, ToolResultBlock, ToolUseBlock
from vak_context.events.payloads import AssistantStep, Directive
from vak_context.providers.base import RetryPolicy
from vak_context.providers.local.catalogue import canonical_model, local_profile_key, local_protocol
from vak_context.providers.local.server import LocalModelServer
from vak_context.providers.openai_compat import OpenAICompatProvider
from vak_context.storage.ledger import LedgerStore

P4_GOAL = 0.995
P5_GOAL = 10.0
TAIL_OPEN = "<turn_context>"
# A deferred tool for the promotion measurement: its schema is what find_tools would return.
PROMOTED = ToolSpec(
    name="git_log",
    description="Show the commit history of a path in the workspace: hash, author, date and subject per line.",
    input_schema={"type": "object", "properties": {
        "path": {"type": "string", "description": "a path relative to the workspace root"},
        "limit": {"type": "integer", "description": "how many commits, newest first", "default": 10},
    }, "required": ["path"], "additionalProperties": False},
)


# ---------------------------------------------------------------------- what was sent (pure)


@dataclass(frozen=True)
class Sent:
    """One request the loop sent and what the server said about its prompt."""

    turn: int
    step: int
    request: ChatRequest
    prompt_tokens: int
    cached_tokens: int
    prompt_ms: float | None
    prompt_n: int | None
    replanned: bool = False  # the assembler planned again at this step (a turn's first step, or a compaction)


@dataclass(frozen=True)
class Pair:
    """Step k and step k+1 of one turn."""

    turn: int
    step: int  # k
    prompt_k: int
    cached_next: int
    compacted: bool = False  # step k+1 was planned again mid-turn: the turn outgrew its budget

    @property
    def reused(self) -> int:
        return min(self.cached_next, self.prompt_k)


def step_pairs(sent: Sequence[Sent]) -> list[Pair]:
    """Every consecutive pair of steps within one turn, in order."""
    return [Pair(a.turn, a.step, a.prompt_tokens, b.cached_tokens, b.replanned)
            for a, b in pairwise(sent) if a.turn == b.turn]


def p4_ratio(pairs: Sequence[Pair]) -> float | None:
    """Pooled share of step k's prompt found cached at step k+1 (None without a pair)."""
    total = sum(p.prompt_k for p in pairs)
    return sum(p.reused for p in pairs) / total if total else None


def harness_violations(sent: Sequence[Sent], tail_tokens: int, prefix_tokens: int) -> list[str]:
    """The spec's harness assertions: within a turn ``cached(k+1) >= prompt(k) - tail_tokens``; on a
    turn's first step ``cached >= prefix_tokens``."""
    out: list[str] = []
    for prev, cur in zip([None, *sent], sent, strict=False):
        if prev is None or prev.turn != cur.turn:
            if cur.cached_tokens < prefix_tokens:
                out.append(f"turn {cur.turn} step 1: cached {cur.cached_tokens} < prefix {prefix_tokens}")
        elif cur.cached_tokens < prev.prompt_tokens - tail_tokens:
            out.append(f"turn {cur.turn} step {cur.step + 1}: cached {cur.cached_tokens} < prompt(k) "
                       f"{prev.prompt_tokens} - tail {tail_tokens}"
                       + (" (the turn outgrew its budget: compacted at this step)" if cur.replanned else ""))
    return out


def is_tail(part: object) -> bool:
    return isinstance(part, TextBlock) and part.text.startswith(TAIL_OPEN)


def tail_of(request: ChatRequest) -> str:
    """The current turn's tail block: the last one the request carries ('' when none). Closed turns
    carry the tails they were sent with (``turn_tail``), before their own directives."""
    tails = [part.text for message in request.messages for part in message.content if is_tail(part)]
    return tails[-1] if tails else ""  # type: ignore[union-attr]


def baseline(request: ChatRequest) -> ChatRequest:
    """The same request with the per-turn material in the system prompt: the current turn's tail moved
    to its end, and no tail in any directive message (closed turns' included, since in that design no
    turn carries one): the placement P5 compares against, nothing else changed."""
    tail = tail_of(request)
    if not tail:
        return request
    messages = tuple(
        Message(role=m.role, content=tuple(p for p in m.content if not is_tail(p))) if any(map(is_tail, m.content))
        else m for m in request.messages)
    return request.model_copy(update={"system": f"{request.system}\n\n{tail.rstrip()}", "messages": messages})


def promoted(request: ChatRequest, spec: ToolSpec, *, in_tools: bool) -> ChatRequest:
    """``request`` followed by a find_tools call that returns ``spec``; with ``in_tools`` the schema is
    also appended to the request's tools (promotion into the prefix)."""
    query = spec.name.replace("_", " ")
    call = Message(role="assistant", content=(ToolUseBlock(id="call_promote", name="find_tools",
                                                          input={"query": query}),))
    result = Message(role="user", content=(ToolResultBlock(
        tool_use_id="call_promote", content=find_tools_result((ToolDecl(spec),), query)),))
    tools = (*request.tools, spec) if in_tools else request.tools
    return request.model_copy(update={"messages": (*request.messages, call, result), "tools": tools})


def first_difference(a: str, b: str) -> int | None:
    """The first index where ``a`` is not a prefix of ``b`` (None when it is)."""
    if b.startswith(a):
        return None
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), len(b))


def per_turn(sent: Sequence[Sent]) -> dict[int, tuple[float, int]]:
    """(sum of prompt_ms, sum of prompt_n) per turn."""
    out: dict[int, tuple[float, int]] = {}
    for s in sent:
        ms, n = out.get(s.turn, (0.0, 0))
        out[s.turn] = (ms + (s.prompt_ms or 0.0), n + (s.prompt_n or 0))
    return out


def p5_ratios(stable: Sequence[Sent], base: Sequence[Sent]) -> tuple[float | None, float | None]:
    """(baseline ms / stable ms, baseline tokens / stable tokens) over every turn after the first."""
    a, b = per_turn(stable), per_turn(base)
    later = [t for t in a if t != min(a)]
    ms_a, ms_b = sum(a[t][0] for t in later), sum(b[t][0] for t in later)
    n_a, n_b = sum(a[t][1] for t in later), sum(b[t][1] for t in later)
    return (ms_b / ms_a if ms_a else None), (n_b / n_a if n_a else None)


# ---------------------------------------------------------------------- the session


def write_workspace(root: Path, files: int) -> list[str]:
    """``files`` small Python modules, each with a distinct CODE_WORD line; returns their names."""
    words = ["amber", "basalt", "cobalt", "dune", "ember", "fjord", "garnet", "harbor", "indigo", "jasper",
             "kelp", "lagoon", "marble", "nectar", "onyx", "pebble", "quartz", "russet", "sierra", "tundra"]
    names = []
    for i in range(files):
        name = f"module_{i:02d}.py"
        body = [f'"""Module {i}: helpers for stage {i} of the pipeline."""', "",
                f'CODE_WORD = "{words[i % len(words)]}-{i}"', ""]
        for j in range(6):
            body += [f"def stage_{i}_step_{j}(items: list[int]) -> list[int]:",
                     f'    """Scale every item by {j + 2} and drop those under {i * 3 + j}."""',
                     f"    return [x * {j + 2} for x in items if x * {j + 2} >= {i * 3 + j}]", ""]
        (root / name).write_text("\n".join(body) + "\n")
        names.append(name)
    return names


def directive(a: str, b: str) -> str:
    return f"What do {a} and {b} define? Read each with read_file, one file per step, then answer."


async def seed_history(services: InProcessServices, workspace: Workspace, names: Sequence[str], turns: int,
                       model: str) -> None:
    """Earlier turns, written as the loop writes them: the directive, two read_file steps with their
    real results, the answer, the TurnCard. The live directives read the same way, so even a small
    model has the pattern in front of it."""
    for i in range(turns):
        a, b = names[(2 * i) % len(names)], names[(2 * i + 1) % len(names)]
        await services.append([Directive(text=directive(a, b))])
        for k, name in enumerate((a, b)):
            call_id = f"seed_{i}_{k}"
            await services.append([AssistantStep(blocks=(ToolUseBlock(id=call_id, name="read_file",
                                                                      input={"path": name}),),
                                                 model=model, provider="local", stop_reason="tool_calls")])
            await services.store_result(call_id, "read_file", workspace.call("read_file", {"path": name}), False)
        await services.append([AssistantStep(blocks=(TextBlock(
            text=f"{a} and {b} each define a CODE_WORD and six stage functions that scale and filter lists."),),
            model=model, provider="local", stop_reason="stop")])
        await services.close_turn("completed")


def note(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


class Recorder:
    """The provider, recording each request with the server's usage and timings."""

    def __init__(self, inner: OpenAICompatProvider) -> None:
        self.inner, self.sent, self.turn, self._step = inner, [], 0, 0  # type: OpenAICompatProvider, list[Sent], int, int

    def mark(self, replanned: bool) -> None:
        """The loop's report of the step just sent: whether the assembler planned again for it."""
        self.sent[-1] = replace(self.sent[-1], replanned=replanned)
        if replanned and self._step > 1:  # a turn's first step is always planned
            note("    (the assembler planned this step again: step compaction)")

    def next_turn(self) -> None:
        self.turn, self._step = self.turn + 1, 0

    async def complete(self, request: ChatRequest) -> ChatResult:
        result = await self.inner.complete(request)
        self.sent.append(sent_of(self.turn, self._step, request, result))
        s = self.sent[-1]
        note(f"  step {self._step + 1}: prompt {s.prompt_tokens}, cached {s.cached_tokens}, "
             f"{result.usage.output_tokens} out, calls {[c.name for c in result.tool_calls] or result.text[:60]!r}")
        self._step += 1
        return result


def sent_of(turn: int, step: int, request: ChatRequest, result: ChatResult) -> Sent:
    t = result.timings or {}
    ms, n = t.get("prompt_ms"), t.get("prompt_n")
    return Sent(turn, step, request, result.usage.prompt_tokens, result.usage.cache_read_tokens,
                float(ms) if isinstance(ms, int | float) else None, int(n) if isinstance(n, int) else None)


@dataclass
class Run:
    model: str
    sent: list[Sent] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)
    prefix_tokens: int = 0
    tail_tokens: int = 0
    not_prefix: list[str] = field(default_factory=list)
    across: list[str] = field(default_factory=list)  # where each new turn's rendered prompt leaves the last
    stable: list[Sent] = field(default_factory=list)
    base: list[Sent] = field(default_factory=list)
    promotion: dict[str, Sent] = field(default_factory=dict)


async def prefix_tokens(provider: OpenAICompatProvider, system: str, tools: tuple[ToolSpec, ...], model: str) -> int:
    """Tokens of the stable prefix as the server counts them: two usage-only requests that share only
    system + tools; the second's cached count is the shared prefix."""
    cached = 0
    for text in ("Say A.", "Reply with the single word: B"):
        result = await provider.complete(ChatRequest(model=model, system=system, tools=tools,
                                                     messages=(Message.user(text),), max_tokens=1, temperature=0.0))
        cached = result.usage.cache_read_tokens
    return cached


async def replay(provider: OpenAICompatProvider, sent: Sequence[Sent], change: Any = None) -> list[Sent]:
    out = []
    for s in sent:
        request = (change(s.request) if change else s.request).model_copy(update={"max_tokens": 1})
        out.append(sent_of(s.turn, s.step, request, await provider.complete(request)))
    return out


async def run_bench(model: str, n_ctx: int, session_tokens: int, turns: int, max_tokens: int,
                    threads: int | None = None, server: LocalModelServer | None = None,
                    ledger: Path | None = None) -> Run:
    """One run; ``server``: a running server to use (the smoke test's shared one), else one is started;
    ``ledger``: where to keep the session's ledger for reading afterwards (else a temp folder)."""
    model = canonical_model(model)
    run = Run(model)
    with ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="vak-cache-"))
        if server is None:
            server = stack.enter_context(LocalModelServer(model, n_ctx=n_ctx, threads=threads))
        store = stack.enter_context(LedgerStore(ledger or Path(tmp) / "ledger"))
        root = Path(tmp) / "ws"
        root.mkdir()
        names = write_workspace(root, 16)
        workspace = Workspace(root)
        async with httpx.AsyncClient(trust_env=False, timeout=3_600.0) as client:  # a loaded 2-core machine took over 900 s for one cold 12k prefill
            inner = OpenAICompatProvider(client, base_url=server.base_url, api_key=server.api_key,
                                         retry=RetryPolicy(attempts=1), timeout_s=3_600.0)
            recorder = Recorder(inner)
            surface = default_surface()
            system = system_prompt(surface.catalogue())
            services = InProcessServices(store, "bench")
            # A seeded turn renders to about 700 tokens (two results and the exchange around them).
            seeded = max(1, round(session_tokens / 700))
            await seed_history(services, workspace, names, seeded, model)
            profile = CapacityProfile(local_profile_key(model), n_ctx,
                                      Horizon(n_ctx - max_tokens - 256, 0.9, time.time()), Ewma(0.30, 1), max_tokens)
            config = TurnConfig(model=model, provider="local", system=system, surface=surface, max_steps=5,
                                max_tokens=max_tokens, temperature=0.0, session_key="bench",
                                text_calls=local_protocol(model) == "inline_fence")  # Qwen writes its calls as text
            loop = TurnLoop(services, recorder, profile, config, workspace=workspace,
                            on_step=lambda step: recorder.mark(step.replanned))
            run.prefix_tokens = await prefix_tokens(inner, system, surface.schemas, model)
            for t in range(turns):
                recorder.next_turn()
                note(f"turn {t + 1}")
                a, b = (names[(2 * (seeded + t) + k) % len(names)] for k in range(2))
                report = await loop.run(directive(a, b))
                run.answers.append(f"turn {t + 1}: {len(report.steps)} steps, {report.outcome}")
            run.sent = list(recorder.sent)
            headers = server.auth_headers()
            tail = tail_of(run.sent[0].request)
            tok = await client.post(f"{server.root_url}/tokenize", json={"content": tail}, headers=headers)
            run.tail_tokens = len(tok.json().get("tokens", []))
            note("checking rendered prompts")
            run.not_prefix, run.across = await byte_prefix_failures(client, server, inner, run.sent)
            note("P5: replaying as sent")
            run.stable = await replay(inner, run.sent)
            note("P5: replaying with the tail in the system prompt")
            # The first turn is cold in both arms and left out of P5, so the baseline skips it.
            run.base = await replay(inner, [s for s in run.sent if s.turn != run.sent[0].turn], baseline)
            note("promotion")
            last = run.sent[-1].request.model_copy(update={"max_tokens": 1})
            for label, in_tools in (("in the result", False), ("in tools", True)):
                warm = sent_of(0, 0, last, await inner.complete(last))  # the same warm cache before each
                run.promotion.setdefault("before", warm)
                request = promoted(last, PROMOTED, in_tools=in_tools)
                run.promotion[label] = sent_of(0, 0, request, await inner.complete(request))
    return run


async def byte_prefix_failures(client: httpx.AsyncClient, server: LocalModelServer, provider: OpenAICompatProvider,
                               sent: Sequence[Sent]) -> tuple[list[str], list[str]]:
    """Each step's prompt as the server renders it (``/apply-template``) must be a prefix of the next's
    within a turn: (those that are not, and where each new turn's prompt leaves the previous one)."""
    prompts = []
    for s in sent:
        r = await client.post(f"{server.root_url}/apply-template", json=provider.render(s.request),
                              headers=server.auth_headers())
        prompts.append(str(r.json().get("prompt", "")))
    out, across = [], []
    for (a, pa), (b, pb) in pairwise(zip(sent, prompts, strict=True)):
        at = first_difference(pa, pb)
        if a.turn != b.turn:
            kept = len(pa) if at is None else at
            across.append(f"turn {a.turn}->{b.turn}: keeps {kept} of {len(pa)} chars of the last step's prompt"
                          + ("" if at is None else f"; then {pa[at:at + 50]!r} became {pb[at:at + 50]!r}"))
        elif at is not None:
            out.append(f"turn {a.turn} step {a.step + 1}->{a.step + 2}: differs at char {at}: "
                       f"{pa[at:at + 60]!r} vs {pb[at:at + 60]!r}")
    return out, across


# ---------------------------------------------------------------------- report


def pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2%}"


def report(run: Run) -> dict[str, Any]:
    pairs = step_pairs(run.sent)
    p4 = p4_ratio([p for p in pairs if not p.compacted])
    compacted = [p for p in pairs if p.compacted]
    violations = harness_violations(run.sent, run.tail_tokens, run.prefix_tokens)
    p5_ms, p5_tok = p5_ratios(run.stable, run.base)
    multi = len({p.turn for p in pairs})
    print(f"model {run.model}; {len(run.sent)} requests in {len({s.turn for s in run.sent})} turns "
          f"({'; '.join(run.answers)}); first prompt {run.sent[0].prompt_tokens} tokens, "
          f"prefix {run.prefix_tokens}, tail {run.tail_tokens}")
    print(f"P4 within a turn: {pct(p4)} of step k's prompt cached at step k+1 (goal >= {P4_GOAL:.1%}; "
          f"spec observed 99.66%) over {len(pairs)} step pairs in {multi} multi-step turns; "
          f"worst pair {pct(min((p.reused / p.prompt_k for p in pairs if not p.compacted), default=None))}; "
          f"pairs where the turn outgrew its budget and was compacted (left out): {len(compacted)}, "
          f"{pct(p4_ratio(compacted))} cached")
    for p in pairs:
        print(f"  turn {p.turn} step {p.step + 1}->{p.step + 2}: prompt(k) {p.prompt_k}, "
              f"cached(k+1) {p.cached_next} ({pct(p.reused / p.prompt_k if p.prompt_k else None)})"
              f"{' (compacted)' if p.compacted else ''}")
    print(f"  harness assertions: {len(violations)} violations")
    for v in violations:
        print(f"    {v}")
    print(f"  rendered prompt a byte prefix of the next step's: {len(pairs) - len(run.not_prefix)}/{len(pairs)}")
    for v in run.not_prefix:
        print(f"    {v}")
    a, b = per_turn(run.stable), per_turn(run.base)
    for line in run.across:
        print(f"  {line}")
    print(f"P5 across turns: baseline / stable-prefix prefill = "
          f"{'n/a' if p5_ms is None else f'{p5_ms:.1f}x'} by timings.prompt_ms, "
          f"{'n/a' if p5_tok is None else f'{p5_tok:.1f}x'} by tokens prefilled (goal >= {P5_GOAL:.0f}x; "
          f"turns after the first)")
    for t in sorted(a):
        base = f"{b[t][0]:.0f} ms / {b[t][1]} tok" if t in b else "not replayed (the first turn is cold in both)"
        print(f"  turn {t}: stable prefix {a[t][0]:.0f} ms / {a[t][1]} tok; baseline (tail in system) {base}")
    before = run.promotion["before"]
    print(f"promotion: previous step {before.prompt_tokens} prompt tokens")
    for label in ("in the result", "in tools"):
        s = run.promotion[label]
        share = min(s.cached_tokens, before.prompt_tokens) / before.prompt_tokens if before.prompt_tokens else None
        print(f"  schema {label}{' (chosen)' if label == 'in the result' else ''}: cached {s.cached_tokens} "
              f"({pct(share)} of the previous step), prefilled {s.prompt_n} tok in {s.prompt_ms or 0:.0f} ms")
    return {"p4": p4, "pairs": len(pairs), "compacted": len(compacted), "violations": violations, "not_prefix": run.not_prefix,
            "p5_ms": p5_ms, "p5_tokens": p5_tok,
            "promotion": {k: (v.cached_tokens, v.prompt_n) for k, v in run.promotion.items()}}


def main(argv: list[str] | None = None, server: LocalModelServer | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="qwen (default), smollm2, or a .gguf path")
    parser.add_argument("--n-ctx", type=int, default=None)
    parser.add_argument("--session-tokens", type=int, default=None, help="history seeded before the live turns")
    parser.add_argument("--turns", type=int, default=None)
    parser.add_argument("--max-tokens", type=int, default=160)
    parser.add_argument("--threads", type=int, default=None, help="server threads (1 holds up best on a loaded machine)")
    parser.add_argument("--quick", action="store_true", help="the smoke test's size (SmolLM2, small session)")
    parser.add_argument("--ledger", type=Path, default=None, help="keep the session's ledger here (session 'bench')")
    args = parser.parse_args(argv)
    model = server.model if server else args.model or ("smollm2" if args.quick else "qwen")
    small = canonical_model(model) == "smollm2"
    n_ctx = server.n_ctx if server else args.n_ctx or (8192 if small else 16384)
    session = args.session_tokens or (600 if args.quick else 4000 if small else 8000)
    turns = args.turns or (2 if args.quick else 3)
    max_tokens = 64 if args.quick and args.max_tokens == 160 else args.max_tokens
    started = time.monotonic()
    run = asyncio.run(run_bench(model, n_ctx, session, turns, max_tokens, args.threads, server,
                                   args.ledger))
    out = report(run)
    print(f"({time.monotonic() - started:.0f} s)")
    return out


if __name__ == "__main__":
    main()
