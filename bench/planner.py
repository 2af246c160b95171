"""Planner latency against its floor, at 10, 100, 1,000 and 10,000 turns.

For each session size and each of three profiles (a small local model, a mid-sized one and a
frontier model) it times ``SessionView.plan`` (the pure planner with exact sizes, BM25 relevance
and the model's state) and, in the same run, the floor: serializing the request that plan produces
to the JSON that goes on the wire (``OpenAICompatProvider.render`` then ``json.dumps``). Goal: at
most 3x the floor at 1,000 turns. The growth exponent is the slope of log(latency) over log(turns).

A second table is the real per-request cost. The warm re-plan above replans an unchanged session
(every cache warm); a request comes after a new turn. So a warm ``SessionView`` (the one a
PlannerActor keeps) folds in the next turn's entries (``SessionView.add_all`` and ``sizes()``) and
then makes the first plan after it, with that turn's caches cold: "next request" is both, per
profile (medians over a few turns, so a size grows by those few turns while it is measured). Beside
it, the baseline a kept index avoids: rebuilding the TurnIndex from the whole chain. Every other round
of next requests is timed with Python's cycle collector paused (``gc.disable`` around the request, the
collections it owes run after): the planner's own work, apart from the collector's passes, which grow with
the number of objects a long session keeps in the process. Each row's step exponents end with the last
step (1,000 to 10,000 turns) against the goal of 0.1 (issue 26 item 4) and the ratio.

Then the goals of issue 37 item 6, measured so that load on the machine weighs on both sizes alike: a
session of 1,000 turns and the one of 10,000, each with a warm view, make their next requests in turn
(alternating sizes and profiles, medians), timed as CPU time (``time.process_time``) with wall time beside
it. The last step's exponent (local 8k and mid 32k: at most 0.1) and, for frontier 200k, which shows
thousands of turns, the next request at 10,000 turns as a ratio to its floor, the request it plans
serialized as wire JSON (at most 3x), each printed against its goal (``--interleaved`` runs this part alone).

A third mode, ``--long-turn``, plans every request of one 140-step coding turn (``vak_context.sessions.longturn``,
about 120–150k tokens as carried) under each profile, after its directive and after each step, and
prints the largest request against the budget (horizon − output reserve), how many were over it (the
planner refuses those: none may be), how often the plan's shape moved (a compaction: the prefix
cache breaks there) and the plan's median time.

Run: ``.venv/bin/python bench/planner.py`` (``--quick`` stops at 1,000 turns; ``--long-turn``;
``--interleaved [ROUNDS]``).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx

from vak_context.context.capacity.profile import CapacityProfile, Ewma, Horizon, ProfileKey
from vak_context.context.history.packets import compaction_payload
from vak_context.context.history.turncard import build_card
from vak_context.context.history.turns import TurnIndex
from vak_context.context.planner.plan import Plan, PlannerState
from vak_context.context.planner.records import Fidelity
from vak_context.context.planner.view import SessionView
from vak_context.context.request.assemble import prefix_tokens, project, request_tokens
from vak_context.context.request.messages import ChatRequest
from vak_context.events.envelope import Mapper, StoredEntry
from vak_context.events.payloads import (
    AssistantStep,
    Directive,
    EvidenceBody,
    TextBlock,
    ToolResult,
    ToolUseBlock,
)
from vak_context.providers.openai_compat import OpenAICompatProvider
from vak_context.sessions.longturn import LongTurn

SIZES = (10, 100, 1_000, 10_000)
STEP_GOAL = 0.1  # issue 26 item 4: the next request's step exponent from 1,000 to 10,000 turns, at most
FLOOR_GOAL = 3.0  # issue 37 item 6: frontier 200k's next request at 10,000 turns over its floor, at most
STEP_PROFILES = ("local 8k", "mid 32k")  # held to STEP_GOAL; frontier 200k, which shows every turn it can, to FLOOR_GOAL
DIRECTIVE = "What changed about copper prices again?"
# turns folded in per profile to time the next request: few next to the session, enough for a median
NEXT_TURNS = {10: 2, 100: 5, 1_000: 7, 10_000: 5}
SYSTEM = "You are a careful agent. Follow the policy; use the tools; cite what you found. " * 60
SUBJECTS = ("copper prices", "the ledger module", "flaky tests", "airline booking", "vector databases",
            "the quarterly report", "a failing deploy", "Rust vs Go for a queue")


def _profile(name: str, horizon: int, window: int, out: int) -> CapacityProfile:
    return CapacityProfile(ProfileKey("bench", name), window, Horizon(horizon, 0.9, 0.0), Ewma(0.27, 10), out)


PROFILES = {
    "local 8k": _profile("local-8k", 6_000, 8_192, 512),
    "mid 32k": _profile("mid-32k", 32_000, 32_768, 2_048),
    "frontier 200k": _profile("frontier-200k", 200_000, 200_000, 8_192),
}


class Session:
    """A realistic session chained in memory: each turn a directive, a tool call and its result
    (search results, file reads or JSON), an answer and its turn card."""

    def __init__(self) -> None:
        self.mapper = Mapper()
        self.entries: list[StoredEntry] = []
        self.view = SessionView(0.27)

    def add(self, payload: object, blob: bytes | None = None) -> None:
        parent = self.entries[-1].id if self.entries else None
        e = self.mapper.entry(payload, session="bench", seq=len(self.entries), parent=parent, time_us=0, blob=blob)  # type: ignore[arg-type]
        self.entries.append(e)
        self.view.add(e)

    def turn(self, i: int) -> None:
        subject = SUBJECTS[i % len(SUBJECTS)]
        self.add(Directive(text=f"Question {i + 1}: what changed about {subject} since last time?"))
        call = f"call_{i}"
        tool, body = _tool(i, subject)
        self.add(AssistantStep(blocks=(ToolUseBlock(id=call, name=tool, input={"q": subject, "n": i}),)))
        self.add(EvidenceBody(tool_use_id=call, tool_name=tool, chars=len(body), bytes=len(body)), body.encode())
        ev = self.entries[-1].id
        self.add(ToolResult(tool_use_id=call, tool_name=tool, content=body, evidence_id=ev))
        self.add(AssistantStep(blocks=(TextBlock(text=f"For {subject}, three things changed; the main one is "
                                                      f"item {i % 7} in the results."),)))
        turn = self.view.index.current
        assert turn is not None
        self.add(build_card(self.view.index, turn, self.view.turn_infos(turn)))


def _tool(i: int, subject: str) -> tuple[str, str]:
    if i % 3 == 0:
        return "web_search", "\n".join(f"{k}. {subject} note {k} https://example.org/{i}/{k}" for k in range(1, 9))
    if i % 3 == 1:
        return "read_file", "\n".join(f"{k:4d}  code line {k} about {subject}" for k in range(60))
    return "get_record", json.dumps({"id": i, "subject": subject, "rows": [{"k": k, "v": k * i} for k in range(12)]})


def _time(repeat: int, fn: Callable[..., object], *args: Any, **kw: Any) -> list[float]:
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn(*args, **kw)
        out.append(time.perf_counter() - t)
    return out


def _wire(provider: OpenAICompatProvider, request: ChatRequest) -> str:
    return json.dumps(provider.render(request))


def _p95(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, math.ceil(0.95 * len(xs)) - 1)]


def _slope(xs: list[float], ys: list[float]) -> float:
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = statistics.fmean(lx), statistics.fmean(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly, strict=True)) / sum((a - mx) ** 2 for a in lx)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="stop at 1,000 turns")
    parser.add_argument("--long-turn", action="store_true", help="every request of one 140-step turn, per profile")
    parser.add_argument("--interleaved", type=int, nargs="?", const=30, metavar="ROUNDS",
                        help="only the goals: 1,000 and 10,000 turns interleaved, ROUNDS next requests each (30)")
    args = parser.parse_args()
    if args.long_turn:
        long_turn()
        return
    if args.interleaved:
        interleaved({n: _warm(_grown(Session(), n)) for n in (1_000, 10_000)}, args.interleaved)
        return
    sizes = SIZES[:-1] if args.quick else SIZES
    client = httpx.AsyncClient()
    provider = OpenAICompatProvider(client, base_url="http://127.0.0.1:9/v1")  # render only: nothing is sent
    session = Session()
    rows: list[tuple[int, str, float, float, float, str]] = []
    growth: list[tuple[int, float, float, int, dict[str, float], dict[str, float]]] = []
    states = {name: PlannerState() for name in PROFILES}
    directive = "What changed about copper prices again?"
    print(f"{'turns':>6}  {'profile':<14} {'plan med':>9} {'plan p95':>9} {'floor med':>10} {'ratio':>6}  plan")
    for n in sizes:
        while len(session.view.index.turns) < n:
            session.turn(len(session.view.index.turns))
        view = session.view
        repeat = 60 if n <= 1_000 else 12
        for name, prof in PROFILES.items():
            pre = prefix_tokens(prof, SYSTEM)
            p = view.plan(prof, directive, prefix_tokens=pre, tail_tokens=40)
            state = states[name] = p.state
            if p.packet is not None and p.packet.needs_summary:  # a stored summary, as the summariser leaves it
                words = max(1, int(p.packet.summary_tokens / prof.tokens_per_char.value) // 6)
                session.add(compaction_payload(view.index, p.packet.first_ordinal, p.packet.last_ordinal,
                                               "summary " * words, model=p.model))
            p = view.plan(prof, directive, prefix_tokens=pre, tail_tokens=40, state=state)
            request = project(view.index, p, model=prof.key.model, infos=view.infos, system=SYSTEM)
            plan_t, floor_t = [], []
            for _ in range(repeat):  # interleaved, so load on the machine weighs on both alike
                plan_t += _time(1, view.plan, prof, directive, prefix_tokens=pre, tail_tokens=40, state=state)
                floor_t += _time(1, _wire, provider, request)
            med, floor = statistics.median(plan_t), statistics.median(floor_t)
            shape = (f"{len(p.with_fidelity(Fidelity.FULL))} full, {len(p.with_fidelity(Fidelity.CARD))} cards, "
                     f"packet {p.packet_range[0]}-{p.packet_range[1]}" if p.packet_range else
                     f"{len(p.with_fidelity(Fidelity.FULL))} full, {len(p.with_fidelity(Fidelity.CARD))} cards, no packet")
            rows.append((n, name, med, _p95(plan_t), floor, shape))
            print(f"{n:>6}  {name:<14} {med * 1e3:>7.2f}ms {_p95(plan_t) * 1e3:>7.2f}ms {floor * 1e3:>8.2f}ms "
                  f"{med / floor:>5.1f}x  {shape}")
        # the per-request cost: fold the next turn into a warm view, then its first plan
        warm = SessionView(0.27)  # the view a PlannerActor keeps: built once, outside the timing
        warm.add_all(session.entries)
        for name, prof in PROFILES.items():  # measured, indexed and planned once, as a kept view is
            warm.plan(prof, directive, prefix_tokens=prefix_tokens(prof, SYSTEM), tail_tokens=40, state=states[name])
        fold_t: list[float] = []
        next_t: dict[str, list[float]] = {name: [] for name in PROFILES}
        paused_t: dict[str, list[float]] = {name: [] for name in PROFILES}
        for k in range(2 * NEXT_TURNS[n]):
            paused = k % 2 == 1  # every other round with Python's cycle collector paused while it is timed
            for name, prof in PROFILES.items():  # each profile in turn makes the first plan after a turn
                pre = prefix_tokens(prof, SYSTEM)
                start = len(session.entries)
                session.turn(len(session.view.index.turns))
                new = session.entries[start:]
                if paused:
                    gc.disable()
                t0 = time.perf_counter()
                _fold(warm, new)
                t1 = time.perf_counter()
                warm.plan(prof, directive, prefix_tokens=pre, tail_tokens=40, state=states[name])
                t2 = time.perf_counter()
                gc.enable()
                if paused:
                    paused_t[name].append(t2 - t0)
                else:
                    fold_t.append(t1 - t0)
                    next_t[name].append(t2 - t0)
        rebuild_t = statistics.median(_time(3 if n < 10_000 else 1, TurnIndex.build, session.entries, 0.27))
        growth.append((n, statistics.median(fold_t), rebuild_t, len(session.entries),
                       {name: statistics.median(ts) for name, ts in next_t.items()},
                       {name: statistics.median(ts) for name, ts in paused_t.items()}))
    client_close(client)
    if not args.quick:
        late = _warm(session)
        interleaved({1_000: _warm(_grown(Session(), 1_000)), 10_000: late}, 30)
    print()
    for name in PROFILES:
        xs = [float(r[0]) for r in rows if r[1] == name]
        ys = [r[2] for r in rows if r[1] == name]
        at_1k = next((r for r in rows if r[1] == name and r[0] == 1_000), None)
        goal = f"; at 1,000 turns {at_1k[2] / at_1k[4]:.1f}x the floor (goal <= 3x)" if at_1k else ""
        steps = ", ".join(f"{_slope(xs[i:i + 2], ys[i:i + 2]):.2f}" for i in range(len(xs) - 1))
        print(f"growth exponent {name:<14} {_slope(xs, ys):.2f} overall (steps {steps}){goal}")
    print()
    names = list(PROFILES)
    print(f"{'turns':>6} {'entries':>8} {'fold next turn':>15} " + " ".join(f"{'next: ' + m:>20}" for m in names)
          + f" {'rebuild (baseline)':>19}")
    for n, add_t, rebuild_t, entries, next_by, _paused in growth:
        print(f"{n:>6} {entries:>8} {add_t * 1e3:>13.3f}ms " + " ".join(f"{next_by[m] * 1e3:>18.3f}ms" for m in names)
              + f" {rebuild_t * 1e3:>17.2f}ms")
    print(f"{'':>6} {'':>8} {'collector paused:':>15} " + " ".join(f"{'next: ' + m:>20}" for m in names))
    for n, _add, _rebuild, _entries, _next, paused_by in growth:
        print(f"{n:>6} {'':>8} {'':>15} " + " ".join(f"{paused_by[m] * 1e3:>18.3f}ms" for m in names))
    xs = [float(g[0]) for g in growth]
    for column, label in ((4, "next request"), (5, "next request, collector paused")):
        for m in names:
            ys = [g[column][m] for g in growth]
            steps = [_slope(xs[i:i + 2], ys[i:i + 2]) for i in range(len(xs) - 1)]
            last = steps[-1] if steps else 0.0
            goal = (f"; last step ({int(xs[-2]):,} to {int(xs[-1]):,} turns) {last:.2f} against the goal "
                    f"{STEP_GOAL} ({last / STEP_GOAL:.1f}x)") if steps else ""
            print(f"growth exponent {label} {m:<14} {_slope(xs, ys):.2f} overall "
                  f"(steps {', '.join(f'{x:.2f}' for x in steps)}){goal}")
    ys = [g[2] for g in growth]
    print(f"growth exponent rebuild (baseline)    {_slope(xs, ys):.2f} overall")


Warm = tuple["Session", SessionView, dict[str, PlannerState]]


def _grown(session: Session, n: int) -> Session:
    while len(session.view.index.turns) < n:
        session.turn(len(session.view.index.turns))
    return session


def _warm(session: Session) -> Warm:
    """The session with each profile's stored packet summary (as a summariser leaves one), and a warm view
    of it (the one a PlannerActor keeps: built and planned once, outside any timing) with each profile's state."""
    states: dict[str, PlannerState] = {}
    for name, prof in PROFILES.items():
        p = session.view.plan(prof, DIRECTIVE, prefix_tokens=prefix_tokens(prof, SYSTEM), tail_tokens=40)
        states[name] = p.state
        if p.packet is not None and p.packet.needs_summary:
            words = max(1, int(p.packet.summary_tokens / prof.tokens_per_char.value) // 6)
            session.add(compaction_payload(session.view.index, p.packet.first_ordinal, p.packet.last_ordinal,
                                           "summary " * words, model=p.model))
    warm = SessionView(0.27)
    warm.add_all(session.entries)
    for name, prof in PROFILES.items():
        warm.plan(prof, DIRECTIVE, prefix_tokens=prefix_tokens(prof, SYSTEM), tail_tokens=40, state=states[name])
    return session, warm, states


def interleaved(sessions: dict[int, Warm], rounds: int) -> None:
    """The goals, sizes and profiles alternating (see the module's docstring): CPU and wall time per next request."""
    client = httpx.AsyncClient()
    provider = OpenAICompatProvider(client, base_url="http://127.0.0.1:9/v1")  # render only: nothing is sent
    cpu: dict[tuple[int, str], list[float]] = {(n, m): [] for n in sessions for m in PROFILES}
    wall: dict[tuple[int, str], list[float]] = {(n, m): [] for n in sessions for m in PROFILES}
    for _ in range(rounds):
        for n, (session, warm, states) in sessions.items():
            for name, prof in PROFILES.items():
                pre = prefix_tokens(prof, SYSTEM)
                start = len(session.entries)
                session.turn(len(session.view.index.turns))
                c0, w0 = time.process_time(), time.perf_counter()
                _fold(warm, session.entries[start:])
                warm.plan(prof, DIRECTIVE, prefix_tokens=pre, tail_tokens=40, state=states[name])
                cpu[n, name].append(time.process_time() - c0)
                wall[n, name].append(time.perf_counter() - w0)
    lo, hi = min(sessions), max(sessions)
    print(f"\nnext request, {lo:,} and {hi:,} turns interleaved ({rounds} rounds; CPU time, wall beside it; "
          f"load average {' '.join(f'{x:.1f}' for x in _load())}):")
    for name, prof in PROFILES.items():
        c = {n: statistics.median(cpu[n, name]) for n in sessions}
        w = {n: statistics.median(wall[n, name]) for n in sessions}
        sizes = "  ".join(f"{n:>6,}: {c[n] * 1e3:6.3f} ms cpu ({w[n] * 1e3:6.3f} wall)" for n in sessions)
        step = _slope([lo, hi], [c[lo], c[hi]])
        if name in STEP_PROFILES:
            goal = (f"last step {step:.2f} (wall {_slope([lo, hi], [w[lo], w[hi]]):.2f}) against the goal "
                    f"{STEP_GOAL}: {step / STEP_GOAL:.1f}x, {'met' if step <= STEP_GOAL else 'NOT met'}")
        else:
            session, warm, states = sessions[hi]
            p = warm.plan(prof, DIRECTIVE, prefix_tokens=prefix_tokens(prof, SYSTEM), tail_tokens=40, state=states[name])
            if p.packet is not None and p.packet.needs_summary:  # the range moved: its summary, as one is left
                start = len(session.entries)
                words = max(1, int(p.packet.summary_tokens / prof.tokens_per_char.value) // 6)
                session.add(compaction_payload(session.view.index, p.packet.first_ordinal, p.packet.last_ordinal,
                                               "summary " * words, model=p.model))
                _fold(warm, session.entries[start:])
                p = warm.plan(prof, DIRECTIVE, prefix_tokens=prefix_tokens(prof, SYSTEM), tail_tokens=40,
                              state=states[name])
            request = project(warm.index, p, model=prof.key.model, infos=warm.infos, system=SYSTEM)
            floor = statistics.median(_cpu_time(7, _wire, provider, request))
            ratio = c[hi] / floor
            goal = (f"last step {step:.2f}; at {hi:,} turns {ratio:.2f}x its floor ({floor * 1e3:.2f} ms cpu, "
                    f"{len(p.shown())} turns shown) against the goal {FLOOR_GOAL:g}x: "
                    f"{'met' if ratio <= FLOOR_GOAL else 'NOT met'}")
        print(f"  {name:<14} {sizes}  {goal}")
    client_close(client)


def _cpu_time(repeat: int, fn: Callable[..., object], *args: Any) -> list[float]:
    out = []
    for _ in range(repeat):
        t = time.process_time()
        fn(*args)
        out.append(time.process_time() - t)
    return out


def _load() -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return ()


def long_turn(steps: int = 140) -> None:
    """The largest request of a long turn per profile, against its budget (``docs/PLANNER.md``)."""
    lt = LongTurn(steps=steps, tokens_per_char=0.27)
    largest = dict.fromkeys(PROFILES, 0)
    over = dict.fromkeys(PROFILES, 0)
    moves = dict.fromkeys(PROFILES, 0)
    times: dict[str, list[float]] = {name: [] for name in PROFILES}
    shapes: dict[str, tuple[object, ...]] = {}
    last: dict[str, Plan] = {}
    requests = 0
    for _ in lt.steps():
        current = len(lt.view.index.turns)
        requests += 1
        for name, prof in PROFILES.items():
            pre = prefix_tokens(prof, SYSTEM)
            t = time.perf_counter()
            p = lt.view.plan(prof, "", prefix_tokens=pre, tail_tokens=40, current=current)
            times[name].append(time.perf_counter() - t)
            request = project(lt.view.index, p, model=prof.key.model, infos=lt.view.infos, system=SYSTEM,
                              tail="<turn_context>2026-11-30T14:00Z</turn_context>")
            size = request_tokens(prof, request)
            largest[name] = max(largest[name], size)
            over[name] += size + prof.output_reserve > p.budget.horizon
            ct = p.current_turn
            assert ct is not None
            shape = (p.fidelities, p.packet, ct.packet_through, ct.digest_through, ct.level)
            moves[name] += name in shapes and shapes[name] != shape
            shapes[name], last[name] = shape, p
    turn = lt.view.index.turns[-1]
    print(f"one turn of {steps} steps, {requests} requests; as carried it grows to "
          f"{math.ceil(turn.chars * 0.27):,} tokens at 0.27 tokens/char")
    print(f"{'profile':<14} {'horizon':>8} {'budget':>8} {'largest':>8} {'over':>5} {'moves':>6} {'plan med':>9}  "
          "at the last step")
    for name, prof in PROFILES.items():
        p = last[name]
        ct = p.current_turn
        assert ct is not None
        end = (f"steps 1-{ct.packet_through} in a {ct.level} packet, " if ct.packet_through else "") + (
            f"to {ct.digest_through} digested, " if ct.digest_through > ct.packet_through else "") + (
            f"{ct.steps - ct.digest_through} as carried")
        budget = p.budget.horizon - prof.output_reserve  # request_budget: min(horizon, window − output reserve)
        print(f"{name:<14} {prof.instruction_horizon.tokens:>8,} {budget:>8,} {largest[name]:>8,} {over[name]:>5} {moves[name]:>6} "
              f"{statistics.median(times[name]) * 1e3:>7.1f}ms  {end}")


def _fold(view: SessionView, entries: list[StoredEntry]) -> None:
    view.add_all(entries)
    view.sizes()  # the newly closed turn is measured once, here


def client_close(client: httpx.AsyncClient) -> None:
    import asyncio

    asyncio.run(client.aclose())


if __name__ == "__main__":
    main()
