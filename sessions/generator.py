"""The project's own session generator: realistic agent sessions, deterministic from a seed.

Turns carry web-search results, file reads, command output (some over the 30,000-character window),
JSON API responses, tool errors and emitted cards, with receipts, turn cards and control messages
between them, at the sizes real sessions show (see the recorded sessions' README in shared/data).
Every entry kind of the event model appears at least once in a session of six or more turns.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field

import blake3
from pydantic import BaseModel

from vak_context.context.evidence.digest import window
from vak_context.events import canonical
from vak_context.events.envelope import Mapper
from vak_context.events.payloads import (
    Activity,
    Answer,
    AssistantStep,
    CapacityProfileRecord,
    Compaction,
    CoveredEvidence,
    Directive,
    EvidenceBody,
    EwmaRecord,
    HorizonRecord,
    IntentNote,
    Nudge,
    Presentation,
    PresentationFeedback,
    PresentationRef,
    PresentationSelection,
    PresentationSource,
    ReadingKey,
    Receipt,
    ResetWithHandoff,
    TextBlock,
    ThinkingBlock,
    Thread,
    ToolResult,
    ToolUseBlock,
    TraceLine,
    TurnCard,
    Usage,
    WorkContract,
)

AppendFn = Callable[[BaseModel, bytes | None], str]

_TOPICS = [
    ("copper prices", "commodities", "What is the copper price trend this quarter and what drives it?"),
    ("the ledger module", "code", "Read storage/ledger.py and explain how group commit works."),
    ("flaky tests", "code", "Run the test suite and tell me which tests fail and why."),
    ("airline booking", "travel", "Find my reservation ABC123 and list the flights in it."),
    ("Rust vs Go for a queue", "engineering", "Compare Rust and Go for building a message queue."),
    ("the quarterly report", "finance", "Summarise the revenue table from the quarterly report JSON."),
    ("a failing deploy", "ops", "Why did the last deploy fail? Check the logs."),
    ("vector databases", "research", "Research open-source vector databases and give me a comparison table."),
]
_WORDS = ("ledger segment commit batch model token window horizon probe cache prefix digest evidence "
          "turn card packet planner actor session arrow schema replay budget latency throughput").split()


@dataclass
class GeneratedSession:
    ids: list[str] = field(default_factory=list)
    items: list[tuple[BaseModel, bytes | None]] = field(default_factory=list)
    turns: int = 0


def _sentence(rng: random.Random, n: int = 12) -> str:
    words = [rng.choice(_WORDS) for _ in range(n)]
    return " ".join(words).capitalize() + "."


def _search_results(rng: random.Random, topic: str) -> str:
    hits = []
    for i in range(rng.randint(6, 10)):
        slug = "-".join(topic.lower().split()[:3])
        hits.append({
            "title": f"{topic.title()}: {_sentence(rng, 5)[:-1]}",
            "url": f"https://example{i}.org/{slug}/{rng.randint(1000, 9999)}",
            "content": " ".join(_sentence(rng, 20) for _ in range(rng.randint(4, 10))),
            "score": round(rng.random(), 3),
        })
    return json.dumps({"query": topic, "results": hits}, indent=2)


def _file_read(rng: random.Random, lines: int) -> str:
    out = ['"""Module docstring: ' + _sentence(rng, 8) + '"""', "", "import os", "import threading", ""]
    for i in range(lines):
        if i % 25 == 0:
            out += ["", f"def function_{i}(value: int) -> int:", f'    """{_sentence(rng, 9)}"""']
        out.append(f"    value = value * {rng.randint(2, 9)} + {rng.randint(0, 99)}  # {rng.choice(_WORDS)}")
    return "\n".join(f"{n + 1:>6}\t{line}" for n, line in enumerate(out))


def _command_output(rng: random.Random, lines: int, exit_code: int) -> str:
    out = ["============================= test session starts =============================="]
    for i in range(lines):
        status = "FAILED" if exit_code and i % 97 == 13 else "PASSED"
        out.append(f"tests/test_{rng.choice(_WORDS)}.py::test_{rng.choice(_WORDS)}_{i} {status} [{i * 100 // lines:>3}%]")
    out.append(f"==================== {lines} passed in {rng.uniform(1, 90):.2f}s ====================")
    out.append(f"exit code: {exit_code}")
    return "\n".join(out)


def _json_body(rng: random.Random) -> str:
    rows = [{"quarter": f"Q{q}", "region": rng.choice(["EU", "US", "APAC"]), "revenue": rng.randint(10**5, 10**7),
             "growth": round(rng.uniform(-0.2, 0.4), 3), "notes": _sentence(rng, 10)} for q in range(1, 60)]
    return json.dumps({"report": "quarterly", "currency": "EUR", "rows": rows, "meta": {"generated": "2026-10-01"}})


class _Writer:
    def __init__(self, append: AppendFn, out: GeneratedSession) -> None:
        self.append, self.out = append, out

    def __call__(self, payload: BaseModel, blob: bytes | None = None) -> str:
        eid = self.append(payload, blob)
        self.out.ids.append(eid)
        self.out.items.append((payload, blob))
        return eid


def standalone_append() -> AppendFn:
    """An append that computes real ids as a ledger would (one chain, seq from 0), without storing."""
    mapper = Mapper()
    state: dict[str, str | int | None] = {"seq": 0, "head": None}

    def append(payload: BaseModel, blob: bytes | None) -> str:
        seq = int(state["seq"] or 0)
        e = mapper.entry(payload, session="generated", seq=seq, parent=state["head"], time_us=seq, blob=blob)  # type: ignore[arg-type]
        state["seq"], state["head"] = seq + 1, e.id
        return e.id

    return append


def generate_session(seed: int = 0, turns: int = 12, append: AppendFn | None = None,
                     model: str = "local:smollm2") -> GeneratedSession:
    """Write a realistic session through ``append`` (payload, blob) -> id, and return what was written."""
    rng = random.Random(seed)
    out = GeneratedSession()
    put = _Writer(append or standalone_append(), out)
    _preamble(put)
    turn_ids: list[str] = []
    turn_evidence: list[list[str]] = []
    for t in range(turns):
        topic, domain, question = _TOPICS[(seed + t) % len(_TOPICS)]
        turn_id = put(Directive(text=question))
        turn_ids.append(turn_id)
        kinds = rng.sample(["search", "read", "command", "json", "error"], k=rng.randint(1, 3))
        evidence, trace = _tool_steps(put, rng, t, kinds, topic, model)
        turn_evidence.append(evidence)
        refs: list[PresentationRef] = []
        if t % 2 == 0:
            refs.append(_emit_card(put, rng, t, turn_id, topic, evidence, model))
        _answer(put, rng, turn_id, question, domain, topic, trace, refs, degraded="error" in kinds, model=model)
        _controls(put, rng, t, turns, question, refs, turn_ids, turn_evidence, model)
        out.turns += 1
    return out


def _preamble(put: _Writer) -> None:
    """What a session holds before its first turn: intent, work contract and a capacity profile."""
    put(IntentNote(text="Help the user with research and code tasks; prefer cards for answers."))
    put(WorkContract(text="Answer each directive with evidence; cite sources."))
    put(CapacityProfileRecord(
        provider="local", model="smollm2", quantisation="Q4_1", declared_window=8192, verified_window=8192,
        instruction_horizon=HorizonRecord(tokens=4096, confidence=0.6, last_confirmed=0.0),
        tokens_per_char=EwmaRecord(value=0.29, samples=3), prefill_tps=EwmaRecord(value=180.0, samples=2),
        cache="prefix_stable", output_reserve=512, provenance={"source": "generated"},
    ))


def _tool_steps(put: _Writer, rng: random.Random, t: int, kinds: list[str], topic: str,
                model: str) -> tuple[list[str], list[TraceLine]]:
    """One tool call per kind: the step, its receipt, the evidence body and the result the model reads.
    Returns the turn's evidence ids and its trace lines."""
    evidence: list[str] = []
    trace: list[TraceLine] = []
    for k, kind in enumerate(kinds):
        call_id = f"call_{t}_{k}"
        name, args, body, is_error = _tool_call(rng, kind, topic)
        step = put(AssistantStep(blocks=(ThinkingBlock(thinking=_sentence(rng, 15)),
                                         ToolUseBlock(id=call_id, name=name, input=args)),
                                 model=model, provider="local", stop_reason="tool_use"))
        put(_receipt(rng, model, step))
        data = body.encode()
        ev = put(EvidenceBody(tool_use_id=call_id, tool_name=name, chars=len(body), bytes=len(data),
                              is_error=is_error, media_type="application/json" if kind in {"json", "search"}
                              else "text/plain"), data)
        carried = window(body, ev)  # as the EvidenceActor carries it: no blind cut (issue 9 item 1)
        put(ToolResult(tool_use_id=call_id, tool_name=name, content=carried.text, is_error=is_error,
                       evidence_id=ev, windowed=carried.windowed))
        evidence.append(ev)
        trace.append(TraceLine(tool=name, args_digest=canonical.encode(args).decode()[:80], evidence_id=ev,
                               shape=kind))
    return evidence, trace


def _answer(put: _Writer, rng: random.Random, turn_id: str, question: str, domain: str, topic: str,
            trace: list[TraceLine], refs: list[PresentationRef], *, degraded: bool, model: str) -> None:
    """The turn's final step (narration), its receipt and its turn card."""
    narration = " ".join(_sentence(rng, rng.randint(8, 20)) for _ in range(rng.randint(1, 5)))
    final = put(AssistantStep(blocks=(TextBlock(text=narration),), model=model, provider="local",
                              stop_reason="end_turn"))
    put(_receipt(rng, model, final))
    put(TurnCard(turn_id=turn_id, asked=question, did=tuple(trace),
                 answered=Answer(presentations=tuple(refs), narration=narration),
                 outcome="degraded" if degraded else "completed",
                 reading=ReadingKey(act="answer", domains=(domain,), entities=(topic,)),
                 tokens_full=rng.randint(800, 9000), tokens_card=rng.randint(40, 120)))


def _controls(put: _Writer, rng: random.Random, t: int, turns: int, question: str, refs: list[PresentationRef],
              turn_ids: list[str], turn_evidence: list[list[str]], model: str) -> None:
    """After some turns, the other entry kinds: feedback, a nudge and a thread, a reset, a compaction."""
    turn_id = turn_ids[-1]
    if refs and t % 4 == 0:
        put(PresentationFeedback(presentation_id=refs[0].id, action="helpful"))
        put(PresentationSelection(presentation_ids=(refs[0].id,), turn_id=turn_id))
    if t == 2:
        put(Nudge(tag="presentation-check", text="A card type fits this answer; use emit_metric_card."))
        put(Thread(items=(question,)))
    if t == 0 and turns >= 6:
        # A reset early on: turn 1 stays behind it (recallable, never planned), the rest plan normally.
        put(ResetWithHandoff(handoff="Context reset: " + _sentence(rng, 20), last_turn_id=turn_id,
                             reason="no usable horizon"))
    if t == turns // 2 and turns >= 4:
        put(Compaction(first_turn_id=turn_ids[1], last_turn_id=turn_ids[2],
                       summary="Turns 2-3: " + _sentence(rng, 25),
                       covered_evidence=tuple(CoveredEvidence(id=e, description=f"a result of turn {n + 2}")
                                              for n, ids in enumerate(turn_evidence[1:3]) for e in ids),
                       model=model))
        put(Activity(activity="capacity.probe", detail={"rungs": [1024, 2048, 4096], "verdicts": [1, 1, 0]}))


def _tool_call(rng: random.Random, kind: str, topic: str) -> tuple[str, dict[str, object], str, bool]:
    if kind == "search":
        return "web_search", {"query": topic, "max_results": 8}, _search_results(rng, topic), False
    if kind == "read":
        path = f"src/{rng.choice(_WORDS)}/{rng.choice(_WORDS)}.py"
        return "read_file", {"path": path}, _file_read(rng, rng.choice([60, 300, 900])), False
    if kind == "command":
        code = rng.choice([0, 0, 1])
        lines = rng.choice([40, 200, 900])  # 900 lines is ~60k characters: over the window
        return "bash", {"command": "pytest -q"}, _command_output(rng, lines, code), code != 0
    if kind == "json":
        return "get_report", {"id": f"rep-{rng.randint(1, 99)}"}, _json_body(rng), False
    return "get_reservation", {"id": "ZZZ999"}, "Error: reservation ZZZ999 not found", True


def _receipt(rng: random.Random, model: str, step: str) -> Receipt:
    cached = rng.randint(0, 3000)
    return Receipt(provider="local", model=model,
                   usage=Usage(input_tokens=rng.randint(200, 4000), cache_read_tokens=cached,
                               output_tokens=rng.randint(10, 400)),
                   latency_ms=rng.uniform(150, 4000), first_token_ms=rng.uniform(50, 900),
                   prefix_digest="9" * 64, request_chars=rng.randint(2000, 40000), step_id=step)


def _emit_card(put: _Writer, rng: random.Random, t: int, turn_id: str, topic: str, evidence: list[str],
               model: str) -> PresentationRef:
    payload = {"title": f"{topic.title()} at a glance", "label": "value", "value": round(rng.uniform(1, 99), 2),
               "unit": "%", "note": _sentence(rng, 8)}
    call_id = f"card_{t}"
    put(AssistantStep(blocks=(ToolUseBlock(id=call_id, name="emit_metric_card", input=payload),),
                      model=model, provider="local", stop_reason="tool_use"))
    digest = canonical.encode(payload)
    pid = put(Presentation(turn_id=turn_id, source=PresentationSource(type="tool_call", tool_use_id=call_id),
                           semantic_type="metric", skill_id="cards", skill_version="1", payload=payload,
                           payload_digest=blake3.blake3(digest).hexdigest(), derived_from=tuple(evidence),
                           title=str(payload["title"]), identity_digest=digest.decode()))
    put(ToolResult(tool_use_id=call_id, tool_name="emit_metric_card",
                   content=json.dumps({"presentation": pid, "ok": True})))
    return PresentationRef(id=pid, semantic_type="metric", title=str(payload["title"]),
                           digest=digest.decode(), derived_from=tuple(evidence))
