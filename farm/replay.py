"""Replay one session under one model's profile: every recorded request planned, projected and checked.

The session's original chain (up to its ``source_head``) is copied entry by entry into a session of its own.
Each ``assistant_step`` is the answer to one model request, so just before it is copied the request
that produced it is made again as a live step makes it: by the AssemblerActor and its PlannerActor, in this
process, under the model's profile, running the live step policy (``vak_context.context.planner.policy``: the
turn planned at its first step, writing the packet or reset the plan needs, and its plan kept for the turn's
later steps until the turn outgrows it), with that turn as the current one. Each request is then checked:

* no turn split: the messages pass ``vak_context.context.history.render.api_problems`` (every tool result follows its call);
* no request over the budget: its tokens plus the output reserve fit the plan's horizon;
* no cut: every tool result of the turns up to it is verbatim (the current turn's, and a closed turn's
  results of at most ``vak_context.context.history.render.VERBATIM_CHARS``, which are their own record), a window naming its
  recall calls, a digest or card naming its evidence id, or named in the packet (by id, or by its turn
  range in a pointer-level packet) or behind this model's reset;
* the two-model gate: the same request made under a contrasting profile and then under this
  model's again comes back byte-identical, and writes nothing the second time.

The replay is written as a session of its own (``<session>.<model>.<k>``), in a ledger the caller gives:
the original entries again, with this model's plans, packets and resets between them, as a live run under
this model would have written them. The farm gives each unit a ledger of its own, written by the unit alone
(``vak_context.farm.tasks.claim_replay_folder``). Packet summaries come from ``summarise`` (a local model), when a
plan needs one.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from vak_context.actors.assembler import AssemblerActor
from vak_context.actors.planner import PlannerActor, Summarise
from vak_context.agent.steps import StepRequest
from vak_context.context.capacity.profile import CapacityProfile, Ewma, Horizon, ProfileKey
from vak_context.context.capacity.tokens import estimate_tokens
from vak_context.context.history.render import SHORT_ID, api_problems
from vak_context.context.planner.plan import Plan
from vak_context.context.planner.records import Fidelity
from vak_context.context.planner.view import SessionView
from vak_context.context.request.assemble import packet_text, request_tokens
from vak_context.context.request.messages import ChatRequest
from vak_context.errors import VakError
from vak_context.events.blocks import TextBlock, ToolResultBlock
from vak_context.events.envelope import StoredEntry
from vak_context.farm.rows import UnitKey, make_row
from vak_context.farm.spec import ModelEntry
from vak_context.storage.contract import Ledger
from vak_context.storage.ledger_copy import IdRemap, copy_entries


class ReplayLedger(Ledger, Protocol):
    """Where a replay writes: a LedgerStore in process, or a LedgerClient over the session's LedgerActor
    (the one contract, ``vak_context.storage.contract.Ledger``, blobs included)."""

GATE_LARGE = 200_000
GATE_SMALL = 16_384


def model_profile(model: ModelEntry) -> CapacityProfile:
    """The profile replay projects under: the spec's horizon, else the declared window (metadata only)."""
    return CapacityProfile(
        key=ProfileKey(model.provider, model.name),
        declared_window=model.declared_window,
        instruction_horizon=Horizon(model.replay_horizon, 0.9, 0.0),
        tokens_per_char=Ewma(model.tokens_per_char, 5),
        output_reserve=model.output_reserve,
    )


def gate_partner(profile: CapacityProfile) -> CapacityProfile:
    """The contrasting profile of the two-model gate: a frontier-sized window for a small model, a
    small one for a large model."""
    size = GATE_SMALL if profile.instruction_horizon.tokens >= GATE_LARGE // 2 else GATE_LARGE
    return CapacityProfile(
        key=ProfileKey("farm-gate", f"window-{size}"),
        declared_window=size,
        instruction_horizon=Horizon(size, 0.9, 0.0),
        tokens_per_char=profile.tokens_per_char,
        output_reserve=min(profile.output_reserve, size // 8),
    )


@dataclass
class Prepared:
    """One replayed request: the plan it was projected from, the request, and the entries written on the way
    (packet, reset)."""

    plan: Plan
    request: ChatRequest
    written: list[str] = field(default_factory=list)


def request_bytes(prep: Prepared) -> bytes:
    return json.dumps(prep.request.model_dump(mode="json"), sort_keys=True, ensure_ascii=False).encode()


def _common_prefix(a: bytes, b: bytes) -> int:
    n = min(len(a), len(b))
    lo, hi = 0, n  # binary search on slices: fast in C, unlike a byte loop
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def result_fidelity(view: SessionView, plan: Plan, prep: Prepared, text: str) -> dict[str, int]:
    """How each tool result of the planned turns is carried by the request (see the module docstring)."""
    counts = dict.fromkeys(("verbatim", "windowed", "digested", "packeted", "reset", "missing"), 0)
    shown = {p.tool_use_id: p.content for m in prep.request.messages for p in m.content
             if isinstance(p, ToolResultBlock)}
    pointed = _pointed(view, plan, prep)
    for pt in plan.turns:
        turn = view.index.turn(pt.ordinal)
        for ex in turn.exchanges:
            eid = ex.evidence_id
            if eid is None or ex.result is None:
                continue
            named = eid[:SHORT_ID] in text
            if pt.fidelity == Fidelity.BEHIND_RESET:
                counts["reset"] += 1
            elif shown.get(ex.tool_use_id) == ex.result.content:  # as sent: the current turn's results, and
                # a closed turn's short ones (at most vak_context.context.history.render.VERBATIM_CHARS: their own record)
                ok = not ex.result.windowed or eid in ex.result.content  # a window names its recall calls
                counts["windowed" if ex.result.windowed and ok else "verbatim" if ok else "missing"] += 1
            elif not named and pt.ordinal not in pointed:
                counts["missing"] += 1
            elif pt.fidelity == Fidelity.PACKET:
                counts["packeted"] += 1
            else:  # a digest (a closed turn at Full, a digested current step) or a card naming the id
                counts["digested"] += 1
    return counts


def _pointed(view: SessionView, plan: Plan, prep: Prepared) -> range:
    """The turns a pointer-level packet in the request names by their range, not their ids (docs/PLANNER.md:
    when no list of ids fits, the packet says how many results the turns hold and how to recall them)."""
    pk = plan.packet
    if pk is None or pk.level != "pointer":
        return range(0)
    text = packet_text(view.index, plan)
    if not any(isinstance(p, TextBlock) and p.text == text for m in prep.request.messages for p in m.content):
        return range(0)  # a pointer the request does not carry covers nothing
    return range(pk.first_ordinal, pk.last_ordinal + 1)


def replay_name(session: str, model: str, taken: Sequence[str]) -> str:
    """The ledger session a replay writes: ``<session>.<model>.<k>``, k the first number not taken (a retried
    unit starts a fresh one); a digest when that would be over the 128-character name limit."""
    stem = f"{session}.{model}"
    if len(stem) > 120:
        stem = "replay-" + hashlib.sha256(stem.encode()).hexdigest()[:24]
    k = 0
    while f"{stem}.{k}" in taken:
        k += 1
    return f"{stem}.{k}"


async def replay_session(
    unit: UnitKey, run_id: str, node: str, model: ModelEntry, chain: list[StoredEntry], *, ledger: ReplayLedger,
    decode: Callable[[StoredEntry], Any], target: str, system: str, summarise: Summarise,
) -> list[dict[str, Any]]:
    """One row per recorded request of ``chain`` (the session's original entries, root first).

    The replay is written as it would have run under this model: the original entries are appended again
    to the session ``target`` of the same ledger, with this model's plans, packets and resets between
    them where its requests asked for them (a view is one hash chain, so they cannot go to the original).
    """
    profile = model_profile(model)
    partner = gate_partner(profile)
    root = str(getattr(ledger, "root", ""))
    # The live step's actors, in this process, over the replay's ledger: the planner writes packets with
    # ``summarise``, the assembler runs the step policy and records each plan it sends.
    planner = PlannerActor(root, ledger, model.tokens_per_char, summarise=summarise)
    assembler = AssemblerActor(root, ledger, tokens_per_char=model.tokens_per_char, planner=planner)
    rows: list[dict[str, Any]] = []
    previous = b""
    remap = IdRemap()

    async def prep(prof: CapacityProfile) -> Prepared:
        step = StepRequest(model=prof.key.model, system=system, tools=(), tail="", max_tokens=1024)
        made = await assembler.assemble(target, prof, step)
        frozen = assembler.state(target, str(prof.key)).frozen
        assert frozen is not None and frozen.plan.digest == made.plan_digest  # the plan the request was made from
        return Prepared(frozen.plan, made.request, made.written)

    copied: list[str] = []

    def copy(session: str, payload: Any, blob: bytes | None) -> str:
        (entry_id,) = ledger.append(session, [payload], blobs=[blob])
        copied.append(entry_id)
        return entry_id

    for entry in chain:
        if entry.kind == "assistant_step" and copied and (view := assembler.view(target)).index.turns:
            current = view.index.turns[-1].ordinal
            n = len(rows)
            started = time.perf_counter()
            try:
                first = await prep(profile)
                await prep(partner)
                again = await prep(profile)
            except VakError as exc:
                rows.append(make_row(unit, "replay", run_id, n, passed=False, node=node,
                                     reason=f"{type(exc).__name__}: {exc}",
                                     wall_ms=(time.perf_counter() - started) * 1000, detail={"turn": current}))
            else:
                rows.append(_check(unit, run_id, node, n, view, profile, first, again, previous, current,
                                   (time.perf_counter() - started) * 1000))
                previous = request_bytes(first)
        copy_entries([entry], decode, target, copy, remap)  # the recorded step, after the request that made it
    return rows


def _check(unit: UnitKey, run_id: str, node: str, n: int, view: SessionView, profile: CapacityProfile,
           first: Prepared, again: Prepared, previous: bytes, current: int, wall_ms: float) -> dict[str, Any]:
    plan = first.plan
    body = request_bytes(first)
    text = body.decode()
    tokens = request_tokens(profile, first.request)
    budget = plan.budget.horizon - plan.budget.output_reserve
    counts = result_fidelity(view, plan, first, text)
    problems: list[str] = []
    if split := api_problems(first.request.messages):
        problems.append(f"turn split: {split[0]}")
    if tokens > budget:
        problems.append(f"over budget: {tokens} tokens > {budget}")
    if counts["missing"]:
        problems.append(f"{counts['missing']} tool result(s) in no form (no-cut violation)")
    if request_bytes(again) != body:
        problems.append("gate: re-projection after the other model's is not byte-identical")
    elif again.written:
        problems.append("gate: re-projection wrote entries again")
    fid = {f: len(plan.with_fidelity(f)) for f in (Fidelity.FULL, Fidelity.CARD, Fidelity.PACKET, Fidelity.BEHIND_RESET)}
    packet = plan.packet_range
    return make_row(
        unit, "replay", run_id, n, passed=not problems, reason="; ".join(problems), node=node,
        horizon=profile.instruction_horizon.tokens, window=profile.declared_window, budget=budget,
        request_tokens=tokens, turns=len(plan.turns),
        full_turns=fid[Fidelity.FULL], card_turns=fid[Fidelity.CARD], packet_turns=fid[Fidelity.PACKET],
        reset_turns=fid[Fidelity.BEHIND_RESET],
        verbatim_results=counts["verbatim"], windowed_results=counts["windowed"],
        digested_results=counts["digested"], packeted_results=counts["packeted"], reset_results=counts["reset"],
        missing_results=counts["missing"], packet_first=packet[0] if packet else None,
        packet_last=packet[1] if packet else None,
        cache_tokens=(estimate_tokens(_common_prefix(previous, body), profile.tokens_per_char.value, rounding=int)
                      if previous else 0),
        wall_ms=wall_ms, detail={"turn": current, "plan": plan.digest[:16], "written": len(first.written)},
    )
