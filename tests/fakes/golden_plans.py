"""The planner's golden plans: every request of the planner benchmark's sessions and of recorded
sessions, planned under five profiles, must give the same plans byte for byte as the committed
``tests/unit/planner_golden.json`` (issue 13: a refactor of the planner keeps every plan it made).

The corpus (``corpus_digests``):

- the benchmark's synthetic session (``bench/planner.py``'s ``Session``), grown turn by turn, each new
  directive planned before it is added and each step after; a stored summary is written whenever the
  small profile's plan asks for one (as the summariser would), and the tiny profile's first rescue
  writes its reset-with-handoff (``vak_context.context.planner.policy.reset_entry``), so stored and seeded
  packets, per-model resets and turns behind them are planned too;
- the benchmark's long turn (``vak_context.sessions.longturn.LongTurn``), every step: current-turn compaction;
- recorded sessions from ``../shared/data/trajectories`` through the project's importers (a few
  tau-bench conversations, an OpenHands run, the spotter subagent session with its web results).

Each plan's digest is sha256 over a canonical JSON of every field it carries (``plan_bytes``).
The test is tests/unit/test_planner_golden.py; regenerate the file (only from code whose plans are known
good) with ``.venv/bin/python -m tests.unit.test_planner_golden``.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from vak_context.context.capacity.profile import CapacityProfile, Ewma, Horizon, ProfileKey
from vak_context.context.history.packets import compaction_payload
from vak_context.context.planner.plan import Plan, PlannerState
from vak_context.context.planner.records import Fidelity
from vak_context.context.planner.view import SessionView, handoff_text
from vak_context.errors import RequestTooLarge
from vak_context.events.envelope import Mapper, StoredEntry
from vak_context.events.payloads import AssistantStep, Directive, ResetWithHandoff

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parents[1] / "unit" / "planner_golden.json"
# The same place the rest of the suite reads them from (tests/conftest.py): $VAK_SHARED, else ../shared.
TRAJECTORIES = Path(os.environ.get("VAK_SHARED", ROOT.parent / "shared")) / "data" / "trajectories"
TPC = 0.27
PREFIX, TAIL = 300, 40


def _profile(name: str, horizon: int, window: int, out: int) -> CapacityProfile:
    return CapacityProfile(ProfileKey("golden", name), window, Horizon(horizon, 0.9, 0.0), Ewma(TPC, 10), out)


PROFILES = {
    "none": _profile("none", 0, 8_192, 512),  # no usable horizon: every plan a rescue
    "tiny": _profile("tiny", 1_500, 4_096, 256),  # pointer and list packets, rescues
    "short": _profile("short", 3_000, 8_192, 512),  # summary packets, stored and seeded
    "small": _profile("small", 6_000, 8_192, 512),
    "medium": _profile("medium", 32_000, 32_768, 2_048),
    "large": _profile("large", 200_000, 200_000, 8_192),
}


def plan_bytes(p: Plan) -> bytes:
    """Every field of the plan as canonical JSON: its JSON (turns included), its inputs, both digests,
    and the rows it renders from."""
    r = p.rows
    end = r.history_end
    record = {
        "json": p.to_json(),
        "inputs": p.inputs,
        "digest": p.digest,
        "codes": r.codes,
        "rows": [list(r.ids[: len(r.codes)]), list(r.full[:end]), list(r.card[:end]), r.history_start, end,
                 sorted(r.relevance.items()), r.anaphora, sorted(r.retrieved), r.current_tokens],
    }
    return json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


class _Walk:
    """Feeds a session's entries to a SessionView and plans every request under every profile."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.mapper = Mapper()
        self.view = SessionView(TPC)
        self.head: str | None = None
        self.last: StoredEntry | None = None
        self.seq = 0
        self.states = {k: PlannerState() for k in PROFILES}
        self.digests: dict[str, list[str]] = {k: [] for k in PROFILES}
        self.plans: list[Plan] = []
        self.requests = 0

    def add(self, payload: Any, blob: bytes | None = None) -> str:
        e = self.mapper.entry(payload, session="golden", seq=self.seq, parent=self.head, time_us=0, blob=blob)
        self.add_entry(e)
        return e.id

    def add_entry(self, e: StoredEntry) -> None:
        self.head, self.seq, self.last = e.id, self.seq + 1, e
        self.view.add(e)

    def plan_all(self, directive: str, current: int | None) -> dict[str, Plan]:
        self.requests += 1
        terms = ("ledger", "tests") if self.requests % 3 == 0 else ()
        out = {}
        for key, prof in PROFILES.items():
            try:
                p = self.view.plan(prof, directive, prefix_tokens=PREFIX, tail_tokens=TAIL, state=self.states[key],
                                   reading_terms=terms, current=current)
            except RequestTooLarge as exc:
                self.digests[key].append("too-large:" + hashlib.sha256(str(exc).encode()).hexdigest()[:16])
                continue
            self.states[key] = p.state
            self.digests[key].append(hashlib.sha256(plan_bytes(p)).hexdigest()[:16])
            self.plans.append(p)
            out[key] = p
        return out

    def feed(self, entry: StoredEntry) -> None:
        """Plan the request an entry answers (a new directive, or a step of the current turn), then add it."""
        payload = self.view.mapper.payload_of(entry)
        if isinstance(payload, Directive) and payload.text.strip():
            self.plan_all(payload.text, None)
        elif isinstance(payload, AssistantStep) and self.view.index.turns:
            self.plan_all("", len(self.view.index.turns))
        self.add_entry(entry)


def _bench_session(turns: int) -> _Walk:
    """``bench/planner.py``'s session, grown turn by turn, with the summaries and the reset its plans ask for."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from planner import Session  # bench/planner.py
    finally:
        sys.path.remove(str(ROOT / "bench"))
    w = _Walk("bench")
    session = Session()
    session.view = w.view  # the session's turns go into the walk's chain (``_bench_turn``)
    reset_written = False
    for i in range(turns):
        directive = "What changed about copper prices again?" if i % 4 == 3 else f"Tell me about turn {i} results."
        plans = w.plan_all(directive, None)
        asks = [p for p in plans.values() if p.packet is not None and p.packet.needs_summary]
        if asks and i % 2 == 0:  # every other time: plans between find a seed, not the stored packet
            p = asks[0].packet
            assert p is not None
            words = max(1, int(p.summary_tokens / TPC) // 6)
            w.add(compaction_payload(w.view.index, p.first_ordinal, p.last_ordinal, "summary " * words,
                                     model=asks[0].model))
        rescue = plans.get("none")
        if not reset_written and rescue is not None and i >= turns // 2:
            history = [t for t in rescue.turns if t.fidelity == Fidelity.BEHIND_RESET]
            w.add(ResetWithHandoff(handoff=handoff_text(rescue), last_turn_id=history[-1].turn_id,
                                   reason=rescue.rescue_reason, model=rescue.model))
            reset_written = True
        _bench_turn(session, w, len(w.view.index.turns))
    return w


def _bench_turn(session: Any, w: _Walk, i: int) -> None:
    """One of the bench session's turns, its steps planned before each is added."""
    original = session.add

    def add(payload: object, blob: bytes | None = None) -> None:
        if isinstance(payload, AssistantStep):
            w.plan_all("", len(w.view.index.turns))
        w.add(payload, blob)
        session.entries.append(w.last)  # the bench reads the evidence body's id off its last entry

    session.add = add
    try:
        session.turn(i)
    finally:
        session.add = original


def _long_turn(steps: int) -> _Walk:
    from vak_context.sessions.longturn import LongTurn

    lt = LongTurn(steps=steps, tokens_per_char=TPC)
    w = _Walk("longturn")
    w.view = lt.view
    for k in lt.steps():
        current = len(lt.view.index.turns)
        if k == steps // 2:  # a recorded mid-turn compaction over every turn and the steps so far
            lt.add(compaction_payload(lt.view.index, 1, current, "summary " * 300, model="golden:small"))
        w.plan_all("", current)
    return w


class _KeepingSink:
    """An EntrySink that chains entries in memory (time 0), as a ledger would."""

    def __init__(self) -> None:
        self.mapper = Mapper()
        self.entries: list[StoredEntry] = []

    def append(self, session: str, payloads: Any, *, blobs: Any = None) -> list[str]:
        ids = []
        for payload, blob in zip(payloads, blobs or [None] * len(payloads), strict=True):
            parent = self.entries[-1].id if self.entries else None
            e = self.mapper.entry(payload, session=session, seq=len(self.entries), parent=parent, time_us=0, blob=blob)
            self.entries.append(e)
            ids.append(e.id)
        return ids


def _recorded(file: str, picks: tuple[int, ...]) -> Iterator[tuple[str, list[StoredEntry]]]:
    from vak_context.importers import SessionOutcome, SessionWriter, read_recordings

    fmt, recordings, _ = read_recordings(TRAJECTORIES / file)
    for i in picks:
        rec = recordings[i]
        sink = _KeepingSink()
        writer = SessionWriter(sink, "golden", SessionOutcome(session="golden", format=fmt), tokens_per_char=TPC)
        for event in rec.events:
            writer.write(event)
        writer.finish()
        yield f"{file.split('__')[0]}#{i}", sink.entries


RECORDED = (("tau-bench__gpt-4o-airline.json", (0, 159, 196)), ("OpenHands__output.jsonl", (0,)),
            ("spotter__subagent.jsonl", (0,)))


def corpus() -> Iterator[_Walk]:
    yield _bench_session(50)
    yield _long_turn(80)
    for file, picks in RECORDED:
        for name, entries in _recorded(file, picks):
            w = _Walk(name)
            for e in entries:
                w.feed(e)
            w.plan_all("Do that again, as before.", None)
            yield w


def coverage(plans: list[Plan]) -> Counter[str]:
    """What the corpus exercises: fidelities, packet levels and sources, rescues, current-turn compaction."""
    seen: Counter[str] = Counter()
    for p in plans:
        seen.update(f"code {c}" for c in set(p.rows.codes))
        if p.packet is not None:
            seen[f"packet {p.packet.level}"] += 1
            seen["packet stored"] += p.packet.stored_id is not None
            seen["packet seeded"] += p.packet.seed_id is not None
            seen["packet needs summary"] += p.packet.needs_summary
            seen["packet mid-turn"] += p.packet.through_step is not None
        seen["rescue"] += p.rescue
        seen["retrieved"] += bool(p.rows.retrieved)
        seen["refers back"] += p.refers_back
        seen["reset"] += p.reset is not None
        ct = p.current_turn
        if ct is not None:
            seen["current digested"] += ct.digest_through > ct.packet_through
            seen[f"current step packet {ct.level}"] += ct.packet_through > ct.covered
    return seen


def corpus_digests() -> tuple[dict[str, list[str]], Counter[str]]:
    digests: dict[str, list[str]] = {}
    seen: Counter[str] = Counter()
    for w in corpus():
        for key, ds in w.digests.items():
            digests[f"{w.name}/{key}"] = ds
        seen += coverage(w.plans)
        w.plans.clear()
    return digests, seen


REQUIRED = ("code F", "code c", "code p", "code x", "code *", "packet pointer", "packet list", "packet summary",
            "packet brief",
            "packet stored", "packet seeded", "packet mid-turn", "rescue", "retrieved", "refers back", "reset", "current digested",
            "current step packet list", "current step packet ids")


