"""What a request pays for digests at 10, 100 and 1,000 closed turns (issue 26 item 3), beside the
throughput table of ``bench/evidence.py``.

A session chained in memory, each turn one tool call whose result is one of ``bench/evidence.py``'s
realistic bodies (JSON, search results, markdown, a build log; 8 KiB each, in turn) and the turn's card.
A warm ``SessionView`` (the one an AssemblerActor keeps) assembles each next request: it folds in the
new turn's entries, plans under the local 8k profile and projects the request (``project``: the closed
turns with their results as digests). The process's digest cache (``vak_context.context.history.render.
DIGESTS``) is emptied before each request, so the request computes every digest it does not hold itself:
the figure is what a request pays when no other holder computed them first. Beside it, what the request
would pay if it digested every closed turn's results again (the baseline the kept digests avoid).

Goal: a request digests only the results it has not seen (here one, the new turn's), whatever the
session's length, so its digest time does not grow with the session: the ratio at 1,000 turns to
10 turns is about 1.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import vak_context.context.history.render as render
from bench.evidence import command_body, json_body, search_body, text_body
from vak_context.context.capacity.profile import CapacityProfile, Ewma, Horizon, ProfileKey
from vak_context.context.history.packets import compaction_payload
from vak_context.context.history.render import DIGESTS, EvidenceInfo
from vak_context.context.history.turncard import build_card
from vak_context.context.planner.plan import Plan
from vak_context.context.planner.view import SessionView
from vak_context.context.request.assemble import prefix_tokens, project
from vak_context.events.envelope import Mapper, StoredEntry
from vak_context.events.payloads import (
    AssistantStep,
    Directive,
    EvidenceBody,
    TextBlock,
    ToolResult,
    ToolUseBlock,
)

SIZES = (10, 100, 1_000)
BODY = 8 * 1024
REQUESTS = 8  # next requests timed per size: two of each result shape (digest time: their mean; request: median)
PROFILE = CapacityProfile(ProfileKey("bench", "local-8k"), 8_192, Horizon(6_000, 0.9, 0.0), Ewma(0.27, 10), 512)
SYSTEM = "You are a careful agent. Use the tools; cite what you found."
TOOLS: tuple[tuple[str, Callable[[int, random.Random], str]], ...] = (
    ("get_flights", json_body), ("web_search", search_body), ("read_file", text_body), ("bash", command_body))


class Chain:
    """Entries chained as a ledger chains them; ``builder`` is the view that writes each turn's card."""

    def __init__(self) -> None:
        self.mapper, self.rng = Mapper(), random.Random(26)
        self.entries: list[StoredEntry] = []
        self.builder = SessionView(0.27, mapper=self.mapper)

    def add(self, payload: Any, blob: bytes | None = None) -> None:
        parent = self.entries[-1].id if self.entries else None
        e = self.mapper.entry(payload, session="bench", seq=len(self.entries), parent=parent, time_us=0, blob=blob)
        self.entries.append(e)
        self.builder.add(e, payload)

    def turn(self) -> list[StoredEntry]:
        """One more closed turn; its entries."""
        start, i = len(self.entries), len(self.builder.index.turns)
        tool, make = TOOLS[i % len(TOOLS)]
        body = make(BODY, self.rng)
        call = f"call_{i}"
        self.add(Directive(text=f"Question {i + 1}: what does the {tool} result say this time?"))
        self.add(AssistantStep(blocks=(ToolUseBlock(id=call, name=tool, input={"q": f"item {i}", "path": "notes.md"}),)))
        blob = body.encode()
        self.add(EvidenceBody(tool_use_id=call, tool_name=tool, chars=len(body), bytes=len(blob)), blob)
        self.add(ToolResult(tool_use_id=call, tool_name=tool, content=body, evidence_id=self.entries[-1].id))
        self.add(AssistantStep(blocks=(TextBlock(text=f"The {tool} result answers it; see item {i % 7}."),)))
        turn = self.builder.index.current
        assert turn is not None
        self.add(build_card(self.builder.index, turn, self.builder.turn_infos(turn)))
        return self.entries[start:]


def _planned(chain: Chain, view: SessionView, directive: str, pre: int) -> Plan:
    """The plan for the next request, with the packet summary it asks for stored first (as the summariser
    leaves one: sized to the plan's room) and folded in."""
    p = view.plan(PROFILE, directive, prefix_tokens=pre, tail_tokens=40)
    if p.packet is not None and p.packet.needs_summary:
        words = max(1, int(p.packet.summary_tokens / PROFILE.tokens_per_char.value) // 6)
        chain.add(compaction_payload(view.index, p.packet.first_ordinal, p.packet.last_ordinal, "summary " * words,
                                     model=p.model))
        view.add_all(chain.entries[-1:])
        p = view.plan(PROFILE, directive, prefix_tokens=pre, tail_tokens=40)
    return p


def _timed_compute() -> tuple[list[float], Callable[[], None]]:
    """Time every digest computed (``render.compute_evidence_info``, what a cache miss runs); undo after."""
    spent: list[float] = []
    original = render.compute_evidence_info

    def timed(*args: Any) -> EvidenceInfo:
        t = time.perf_counter()
        try:
            return original(*args)
        finally:
            spent.append(time.perf_counter() - t)

    render.compute_evidence_info = timed  # type: ignore[assignment]

    def undo() -> None:
        render.compute_evidence_info = original  # type: ignore[assignment]

    return spent, undo


class _View(SessionView):
    """The assembler's view, keeping each blob too so the baseline can digest every body again."""

    def __init__(self) -> None:
        super().__init__(0.27)
        self.blobs: dict[str, bytes] = {}

    def add(self, entry: StoredEntry, payload: Any = None) -> None:
        super().add(entry, payload)
        if entry.blob is not None:
            self.blobs[entry.id] = entry.blob


def _recompute_all(view: _View) -> float:
    """What digesting every closed turn's results again costs (the baseline): each body, uncached."""
    t = time.perf_counter()
    for turn in view.index.turns:
        for eid in turn.evidence:
            meta = view.index.evidence[eid]
            entry_blob = view.blobs[eid]
            body = EvidenceBody(tool_use_id=meta.tool_use_id, tool_name=meta.tool_name, chars=meta.chars,
                                bytes=meta.bytes, is_error=meta.is_error, encoding=meta.encoding)
            render.compute_evidence_info(body, entry_blob, {}, eid[:12])
    return time.perf_counter() - t


def request_rows(sizes: tuple[int, ...] = SIZES, requests: int = REQUESTS) -> list[tuple[str, ...]]:
    chain = Chain()
    rows: list[tuple[str, ...]] = []
    pre = prefix_tokens(PROFILE, SYSTEM)
    directive = "What did the flight search say?"
    for n in sizes:
        while len(chain.builder.index.turns) < n:
            chain.turn()
        warm = _View()
        warm.add_all(chain.entries)
        _planned(chain, warm, directive, pre)  # measured, indexed and summarised once, as a kept view is
        digest_t, request_t, counts, baseline = [], [], [], []
        for _ in range(requests):
            new = chain.turn()
            DIGESTS.clear()  # nothing computed by another holder: the request pays for what it has not seen
            spent, undo = _timed_compute()
            try:
                t = time.perf_counter()
                warm.add_all(new)
                p = _planned(chain, warm, directive, pre)
                project(warm.index, p, model="local-8k", infos=warm.infos, system=SYSTEM)
                request_t.append(time.perf_counter() - t)
            finally:
                undo()
            digest_t.append(sum(spent))
            counts.append(len(spent))
        baseline.append(_recompute_all(warm))
        digest_mean = statistics.fmean(digest_t)  # every shape's digest as often at every size
        rows.append((f"{n:,}", f"{statistics.median(counts):.0f}", f"{digest_mean * 1e3:.2f}",
                     f"{statistics.median(request_t) * 1e3:.2f}",
                     f"{digest_mean / statistics.median(request_t):.0%}",
                     f"{statistics.median(baseline) * 1e3:,.1f}"))
    return rows


HEADER = ("closed turns", "digests per request", "digest ms per request", "request ms (fold, plan, project)",
          "digest share", "ms to digest every closed turn again (avoided)")


def request_digest_benchmark(*, quick: bool, print_table: Callable[[str, tuple[str, ...], list[tuple[str, ...]]], None]) -> None:
    requests = len(TOOLS) if quick else REQUESTS
    rows = request_rows(requests=requests)
    print_table("What a request pays for digests (warm view, local 8k profile, digest cache emptied before each "
                f"request; {requests} requests, one result shape after another: digest time their mean, "
                "request time their median)", HEADER, rows)
    first, last = rows[0], rows[-1]
    ratio = float(last[2]) / max(float(first[2]), 1e-6)
    counts = ", ".join(f"{r[0]} turns: {r[1]}" for r in rows)
    print(f"goal: a request digests only the results it has not seen (1 per request here): {counts} "
          f"({'holds' if all(r[1] == '1' for r in rows) else 'does not hold'})")
    print(f"goal: digest time per request does not grow with the session: {last[0]} turns / {first[0]} turns = "
          f"{ratio:.2f}x (goal about 1; a request that digested every closed turn again would pay {last[5]} ms)")
