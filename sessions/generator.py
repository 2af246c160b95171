"""The project's own session generator: realistic agent sessions, deterministic from a seed.

Each turn asks about a file of this repository and carries what the tools return over the real files
(``vak_context.sessions.text``): docs-search results, file reads and listings, command output (some
over the 30,000-character window), JSON, tool errors and an emitted card, then an answer that quotes
them, with receipts, turn cards and control messages between, at the sizes real sessions show (see the
recorded sessions' README in shared/data). Every entry kind of the event model appears at least once in
a session of six or more turns.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

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
from vak_context.sessions.text import (
    Corpus,
    Topic,
    WorkspaceCall,
    quote,
    said,
    session_corpus,
    thought,
    topics,
)

AppendFn = Callable[[BaseModel, bytes | None], str]

# sessions/longturn.py's synthetic coding turn (the planner bench's, pinned by tests/unit/planner_golden.json and
# sized by the current-turn budget tests) still builds its steps from these; generate_session does not.
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
                     model: str = "local:smollm2", workspace: Path | None = None) -> GeneratedSession:
    """Write a realistic session through ``append`` (payload, blob) -> id, and return what was written.

    Its text is about this repository (``vak_context.sessions.text``): read from ``workspace`` when it
    holds the files the directives ask about, else from the snapshot shipped with the package (the
    default, which never changes with the repository)."""
    rng = random.Random(seed)
    corpus = session_corpus(workspace)
    out = GeneratedSession()
    put = _Writer(append or standalone_append(), out)
    _preamble(put)
    turn_ids: list[str] = []
    turn_evidence: list[list[str]] = []
    answers: list[str] = []
    for t in range(turns):
        topic = topics()[(seed + t) % len(topics())]
        turn_id = put(Directive(text=topic.question))
        turn_ids.append(turn_id)
        kinds = rng.sample(["search", "read", "command", "json", "error"], k=rng.randint(1, 3))
        steps = _tool_steps(put, rng, corpus, t, kinds, topic, model)
        turn_evidence.append([s.evidence_id for s in steps])
        refs: list[PresentationRef] = []
        if t % 2 == 0:
            refs.append(_emit_card(put, t, turn_id, topic, steps, model))
        answers.append(_answer(put, rng, turn_id, topic, steps, refs, model=model))
        _controls(put, t, turns, topic.question, refs, turn_ids, turn_evidence, answers, model)
        out.turns += 1
    return out


def _preamble(put: _Writer) -> None:
    """What a session holds before its first turn: intent, work contract and a capacity profile."""
    put(IntentNote(text="Help the user understand and change this repository; prefer cards for answers."))
    put(WorkContract(text="Answer each directive from the workspace's files; quote what you cite."))
    put(CapacityProfileRecord(
        provider="local", model="smollm2", quantisation="Q4_1", declared_window=8192, verified_window=8192,
        instruction_horizon=HorizonRecord(tokens=4096, confidence=0.6, last_confirmed=0.0),
        tokens_per_char=EwmaRecord(value=0.29, samples=3), prefill_tps=EwmaRecord(value=180.0, samples=2),
        cache="prefix_stable", output_reserve=512, provenance={"source": "generated"},
    ))


@dataclass(frozen=True)
class _Step:
    """One tool call of a turn, what it returned and where that is stored."""

    kind: str
    call: WorkspaceCall
    body: str
    is_error: bool
    evidence_id: str


def _tool_steps(put: _Writer, rng: random.Random, corpus: Corpus, t: int, kinds: list[str], topic: Topic,
                model: str) -> list[_Step]:
    """One tool call per kind: the step, its receipt, the evidence body and the result the model reads."""
    steps: list[_Step] = []
    for k, kind in enumerate(kinds):
        call_id = f"call_{t}_{k}"
        call = topic.call(kind, results=rng.randint(6, 10))
        body, is_error = corpus.run(call)
        step = put(AssistantStep(blocks=(ThinkingBlock(thinking=thought(call, topic)),
                                         ToolUseBlock(id=call_id, name=call.name, input=call.args)),
                                 model=model, provider="local", stop_reason="tool_use"))
        put(_receipt(rng, model, step))
        data = body.encode()
        ev = put(EvidenceBody(tool_use_id=call_id, tool_name=call.name, chars=len(body), bytes=len(data),
                              is_error=is_error, media_type="application/json" if kind in {"json", "search"}
                              else "text/plain"), data)
        carried = window(body, ev)  # as the EvidenceActor carries it: no blind cut (issue 9 item 1)
        put(ToolResult(tool_use_id=call_id, tool_name=call.name, content=carried.text, is_error=is_error,
                       evidence_id=ev, windowed=carried.windowed))
        steps.append(_Step(kind, call, body, is_error, ev))
    return steps


def _narration(rng: random.Random, topic: Topic, steps: list[_Step]) -> str:
    """The answer: a lead, then what each result said, quoted verbatim."""
    lead = rng.choice(("Here is what the workspace says.", "From what I read:", "Quoting the results:"))
    return " ".join((lead, *(said(s.call, quote(s.call, s.body, topic.term, is_error=s.is_error), is_error=s.is_error)
                             for s in steps)))


def _answer(put: _Writer, rng: random.Random, turn_id: str, topic: Topic, steps: list[_Step],
            refs: list[PresentationRef], *, model: str) -> str:
    """The turn's final step (narration), its receipt and its turn card; returns the narration."""
    narration = _narration(rng, topic, steps)
    final = put(AssistantStep(blocks=(TextBlock(text=narration),), model=model, provider="local",
                              stop_reason="end_turn"))
    put(_receipt(rng, model, final))
    trace = tuple(TraceLine(tool=s.call.name, args_digest=canonical.encode(s.call.args).decode()[:80],
                            evidence_id=s.evidence_id, shape=s.kind) for s in steps)
    put(TurnCard(turn_id=turn_id, asked=topic.question, did=trace,
                 answered=Answer(presentations=tuple(refs), narration=narration),
                 outcome="degraded" if any(s.is_error for s in steps) else "completed",
                 reading=ReadingKey(act="answer", domains=(topic.domain,), entities=(topic.entity,)),
                 tokens_full=rng.randint(800, 9000), tokens_card=rng.randint(40, 120)))
    return narration


def _controls(put: _Writer, t: int, turns: int, question: str, refs: list[PresentationRef], turn_ids: list[str],
              turn_evidence: list[list[str]], answers: list[str], model: str) -> None:
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
        put(ResetWithHandoff(handoff=f"Context reset. Turn 1 asked: {question} {answers[0]}", last_turn_id=turn_id,
                             reason="no usable horizon"))
    if t == turns // 2 and turns >= 4:
        put(Compaction(first_turn_id=turn_ids[1], last_turn_id=turn_ids[2],
                       summary=f"Turns 2-3. Turn 2: {answers[1]} Turn 3: {answers[2]}",
                       covered_evidence=tuple(CoveredEvidence(id=e, description=f"a result of turn {n + 2}")
                                              for n, ids in enumerate(turn_evidence[1:3]) for e in ids),
                       model=model))
        put(Activity(activity="capacity.probe", detail={"rungs": [1024, 2048, 4096], "verdicts": [1, 1, 0]}))


def _receipt(rng: random.Random, model: str, step: str) -> Receipt:
    cached = rng.randint(0, 3000)
    return Receipt(provider="local", model=model,
                   usage=Usage(input_tokens=rng.randint(200, 4000), cache_read_tokens=cached,
                               output_tokens=rng.randint(10, 400)),
                   latency_ms=rng.uniform(150, 4000), first_token_ms=rng.uniform(50, 900),
                   prefix_digest="9" * 64, request_chars=rng.randint(2000, 40000), step_id=step)


def _emit_card(put: _Writer, t: int, turn_id: str, topic: Topic, steps: list[_Step], model: str) -> PresentationRef:
    """A metric card counted from the turn's results: how many of their lines name the topic's term."""
    lines = sum(1 for s in steps if not s.is_error for line in s.body.split("\n") if topic.term.lower() in line.lower())
    payload = {"label": f"Lines naming {topic.term!r} in what this turn read", "value": lines, "unit": "lines",
               "source": {"title": topic.entity}}
    call_id = f"card_{t}"
    put(AssistantStep(blocks=(ToolUseBlock(id=call_id, name="emit_metric_card", input=payload),),
                      model=model, provider="local", stop_reason="tool_use"))
    digest = canonical.encode(payload)
    evidence = tuple(s.evidence_id for s in steps)
    pid = put(Presentation(turn_id=turn_id, source=PresentationSource(type="tool_call", tool_use_id=call_id),
                           semantic_type="metric", skill_id="cards", skill_version="1", payload=payload,
                           payload_digest=blake3.blake3(digest).hexdigest(), derived_from=evidence,
                           title=str(payload["label"]), identity_digest=digest.decode()))
    put(ToolResult(tool_use_id=call_id, tool_name="emit_metric_card",
                   content=json.dumps({"presentation": pid, "ok": True})))
    return PresentationRef(id=pid, semantic_type="metric", title=str(payload["label"]),
                           digest=digest.decode(), derived_from=evidence)
