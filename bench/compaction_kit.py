"""The engine measured with a peer's test suite for compaction (issue 34 item 5): ``compaction-conformance-kit``.

The kit (``compaction_kit``, MIT, on the package index; a ``[test]`` dependency) plants typed canaries
(safety rules, hard constraints, facts, goal state, user preferences) in a transcript, hands it to a
compactor for five rounds at a character budget, and reports which canaries each round's text still holds.
Its reference compactors (truncation, summaries, pinned rules, checklists) are deterministic and pay no
fixed cost: their whole budget is content.

``EngineCompactor`` is the engine as a user would run it, through ``import vak_context``'s names only:
the kit's turns written into a session (its system turn as the session's identity, each user turn a
directive answered by the assistant text that follows it, through the caller's loop, ``Session.begin``),
and the engine's next request, projected at the kit's budget, returned as the compacted text. Each later
round the engine does what it does: it re-projects the session's own ledger for one more turn (it never
compacts its own output, which is all the kit hands a later round). Packet summaries are off: like the
references, no model writes anything; a packet carries the engine's deterministic extract.

Equal content budget: the engine's request also carries its fixed cost, the stable prefix (system prompt
and the engine tools' schemas) and each request's tail (``<turn_context>``, ``<stance>``, ...), measured
here on an empty session (``fixed_cost``) and printed. The engine's prompt budget is the kit's budget in
tokens (characters at the engine's rate before any receipt, ``PRIOR_TOKENS_PER_CHAR``) plus that fixed
cost. The compacted text is every message of the request but the system prompt (the tool schemas are not
text the kit could grade), so the tail is in it; the kit's own "compliant" column holds it to the bare
budget, which the tail alone may pass: the table here says whether the text is within budget plus tail.

Run: ``.venv/bin/python bench/compaction_kit.py`` (budgets 10-30 % as the kit's own benchmark, 50 % and
100 %, seeds 1-4, five rounds; a few minutes). It prints the fixed cost, the kit's ``check`` of the engine
on its seeded session (unbudgeted and at each budget), then per budget the final survival of each canary
type (the kit's median over its randomized corpus) for the engine beside every reference compactor, and
the best reference's, with the engine's overall survival and output size. ``--seeds 1 --budgets 0.3
--rounds 2`` is a quick run (tests/bench/test_bench_compaction_kit.py runs one).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import shutil
import sys
import tempfile
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Run as a script, this file's folder leads sys.path and its name would shadow the kit's package.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

import httpx  # noqa: E402 (after the path fix above)
from compaction_kit import (  # noqa: E402
    ChecklistCompactor,
    CompactedContext,
    LossyTruncationCompactor,
    NaiveSummaryCompactor,
    PinnedRulesCompactor,
    ProgressiveSummaryCompactor,
    SemanticChecklistCompactor,
    SummaryTailCompactor,
    Turn,
    UpdateAwareChecklistCompactor,
    build_seeded_session,
    check_compactor,
    run_budget_benchmark,
    run_conformance,
    seeded_canaries,
)
from compaction_kit.canaries import CanaryType  # noqa: E402

import vak_context  # noqa: E402

MODEL = "openai-compat:kit-transcript"  # no model answers: the kit's assistant turns are the replies
BASE_URL = "http://127.0.0.1:9/v1"  # never reached: the session's client is a MockTransport refusing all
ROUND_DIRECTIVE = "Continue with the plan."
ROUND_REPLY = "Acknowledged. Continuing with the plan."
OUTPUT_RESERVE = 64  # tokens kept for the reply; not content, so outside the compared budget
PRIOR_TOKENS_PER_CHAR = 0.25  # the engine's rate before any receipt (no reply here reports usage)
UNBUDGETED_WINDOW = 200_000  # the kit's unbudgeted rounds: a 200k model
REFERENCES: dict[str, Callable[[], Any]] = {
    "lossy-truncation": LossyTruncationCompactor,
    "naive-summary": NaiveSummaryCompactor,
    "summary-plus-tail": SummaryTailCompactor,
    "pinned-rules": PinnedRulesCompactor,
    "checklist-carrying": ChecklistCompactor,
    "update-aware-checklist": UpdateAwareChecklistCompactor,
    "semantic-checklist": SemanticChecklistCompactor,
    "progressive-summary": ProgressiveSummaryCompactor,
}
TYPES = [t.value for t in CanaryType]
SHORT = {"safety_rule": "safety", "hard_constraint": "constr", "fact": "fact", "goal_state": "goal",
         "user_preference": "pref"}


@dataclass(frozen=True)
class FixedCost:
    """What every request of the engine carries before any history, in the engine's tokens and in chars."""

    prefix_tokens: int  # the system prompt and the tool schemas
    tail_tokens: int  # the current turn's tail, before its directive
    tail_chars: int

    @property
    def tokens(self) -> int:
        return self.prefix_tokens + self.tail_tokens


def _refuse(request: httpx.Request) -> httpx.Response:
    return httpx.Response(404, json={"error": {"message": "no model behind the kit's transcript"}})


def _reply(text: str) -> dict[str, Any]:
    return {"id": "kit", "object": "chat.completion", "model": "kit-transcript",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}


def _tool_chars(tool: Mapping[str, Any]) -> int:
    """A tool schema's characters as the engine counts them: name, description and the JSON of its parameters."""
    import json

    fn = tool.get("function", tool)
    return len(fn.get("name", "")) + len(fn.get("description", "")) + len(
        json.dumps(fn.get("parameters", {}), ensure_ascii=False))


def _parts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    return [p.get("text", "") for p in content or () if isinstance(p, Mapping)]


def request_text(body: Mapping[str, Any]) -> str:
    """The request's messages as the kit's transcript text, ``[role] text`` a message, the system prompt left out."""
    import json

    lines = []
    for m in body.get("messages", ()):
        if m.get("role") == "system":
            continue
        text = "".join(_parts(m.get("content")))
        for call in m.get("tool_calls") or ():
            text += "\n" + json.dumps(call.get("function", call), ensure_ascii=False)
        lines.append(f"[{m.get('role')}] {text}")
    return "\n".join(lines)


def exchanges(turns: Sequence[Turn]) -> tuple[str | None, list[tuple[str, str]]]:
    """The kit's transcript as (the system text, [(user text, the reply that follows it)])."""
    system = turns[0].text if turns and turns[0].role == "system" else None
    pairs: list[tuple[str, str]] = []
    for t in turns[1:] if system is not None else turns:
        if t.role == "user" or not pairs:
            pairs.append((t.text, ""))
        else:
            asked, said = pairs[-1]
            pairs[-1] = (asked, f"{said}\n{t.text}" if said else t.text)
    return system, [(a, s or "Noted.") for a, s in pairs]


async def _turn(session: Any, directive: str, reply: str) -> dict[str, Any] | None:
    """One turn through the caller's loop: the first request's body (None when none could be sent)."""
    first: dict[str, Any] | None = None
    try:
        async with session.begin(directive) as turn:
            while (request := await turn.request()) is not None:
                if first is None:
                    first = request.body
                await turn.reply(_reply(reply))
    except vak_context.VakError:
        pass  # the turn closed failed with its card; the kit scores what the request would have held
    return first


def _window(prompt_tokens: int) -> int:
    return prompt_tokens + OUTPUT_RESERVE


async def _measure_fixed(identity: str | None) -> FixedCost:
    folder = tempfile.mkdtemp(prefix="vak-kit-")
    try:
        async with httpx.AsyncClient(transport=httpx.MockTransport(_refuse)) as client:
            with vak_context.Engine.open(Path(folder) / "ledger") as engine:
                async with engine.session("fixed", model=MODEL, base_url=BASE_URL, api_key="kit", http_client=client,
                                          window=_window(UNBUDGETED_WINDOW), output_reserve=OUTPUT_RESERVE,
                                          summaries="off", identity=identity) as session:
                    body = await _turn(session, "x", "Noted.")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert body is not None
    messages = body["messages"]
    system = sum(len(t) for m in messages if m["role"] == "system" for t in _parts(m["content"]))
    prefix = system + sum(_tool_chars(t) for t in body.get("tools", ()))
    parts = _parts(messages[-1]["content"])
    tail = len(parts[0]) if len(parts) > 1 else 0
    return FixedCost(math.ceil(prefix * PRIOR_TOKENS_PER_CHAR), math.ceil(tail * PRIOR_TOKENS_PER_CHAR), tail)


_FIXED: dict[str | None, FixedCost] = {}


def fixed_cost(identity: str | None = None) -> FixedCost:
    """The engine's fixed cost for a session with this identity (measured once per process)."""
    if identity not in _FIXED:
        _FIXED[identity] = asyncio.run(_measure_fixed(identity))
    return _FIXED[identity]


class EngineCompactor:
    """The engine as a ``compaction_kit`` compactor (module:Class for ``compaction-kit check``)."""

    name = "vak-engine"

    def __init__(self) -> None:
        self._folder: str | None = None
        self._system: str | None = None
        self.last_body: dict[str, Any] | None = None

    def compact(self, turns: list[Turn], round_num: int = 1, budget_chars: int | None = None) -> CompactedContext:
        if round_num == 1 or self._folder is None:  # a new run: the kit's transcript into a new session
            self._folder = tempfile.mkdtemp(prefix="vak-kit-")
            weakref.finalize(self, shutil.rmtree, self._folder, True)
            self._system, history = exchanges(turns)
        else:
            history = []  # the engine's own ledger holds the session; the kit's text is last round's output
        fixed = fixed_cost(self._system)
        prompt = UNBUDGETED_WINDOW if budget_chars is None else \
            math.ceil(budget_chars * PRIOR_TOKENS_PER_CHAR) + fixed.tokens
        body = asyncio.run(self._round(Path(self._folder) / "ledger", history, prompt))
        self.last_body = body
        text = request_text(body) if body is not None else ""
        return CompactedContext(text=text, compactor_name=self.name, round_num=round_num)

    async def _round(self, folder: Path, history: list[tuple[str, str]], prompt: int) -> dict[str, Any] | None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(_refuse)) as client:
            with vak_context.Engine.open(folder) as engine:
                async with engine.session("kit", model=MODEL, base_url=BASE_URL, api_key="kit", http_client=client,
                                          window=_window(prompt), output_reserve=OUTPUT_RESERVE, summaries="off",
                                          identity=self._system) as session:
                    for asked, said in history:
                        await _turn(session, asked, said)
                    return await _turn(session, ROUND_DIRECTIVE, ROUND_REPLY)


# ------------------------------------------------------------------ the script


def _table(payload: Mapping[str, Any], fixed: FixedCost) -> list[str]:
    """Per budget: each canary type's final survival, the engine beside every reference and the best."""
    lines: list[str] = []
    head = " ".join(f"{SHORT[t]:>6}" for t in TYPES)
    for budget in payload["budgets"]:
        rows = [e for e in payload["entries"] if e["budget_fraction"] == budget]
        lines += ["", f"budget {budget:.0%} of the transcript (the engine: + {fixed.tokens} tokens of fixed cost)",
                  f"{'compactor':<24} {head} {'overall':>8} {'output':>7}"]
        best = {t: max((e["randomized"]["final_median_by_type"].get(t, 0.0) for e in rows
                        if e["compactor"] != EngineCompactor.name), default=0.0) for t in TYPES}
        for e in sorted(rows, key=lambda e: (e["compactor"] != EngineCompactor.name, e["compactor"])):
            by = e["randomized"]["final_median_by_type"]
            cells = " ".join(f"{by.get(t, 0.0):>6.0%}" for t in TYPES)
            lines.append(f"{e['compactor']:<24} {cells} {e['randomized']['overall_final_survival']:>8.0%} "
                         f"{e['mean_final_output_ratio']:>7.0%}")
        lines.append(f"{'best reference':<24} " + " ".join(f"{best[t]:>6.0%}" for t in TYPES))
        engine = next((e for e in rows if e["compactor"] == EngineCompactor.name), None)
        if engine is not None:
            by = engine["randomized"]["final_median_by_type"]
            short = [SHORT[t] for t in TYPES if by.get(t, 0.0) < best[t]]
            lines.append("engine >= best reference for every type" if not short
                         else f"engine below the best reference for: {', '.join(short)}")
    return lines


def check_lines(budgets: Sequence[float], rounds: int) -> list[str]:
    """The kit's ``check`` of the engine on its seeded session: survival by type per round, then at each budget."""
    report = check_compactor(EngineCompactor(), rounds=rounds)
    lines = ["kit check (seeded session, 20 canaries), unbudgeted: final survival by type"]
    for f in report.findings:
        lines.append(f"  {f.canary_type:<16} round 1 {f.round1_survival:>5.0%}  final {f.final_survival:>5.0%}  {f.verdict}")
    for budget in budgets:
        run = run_conformance(build_seeded_session(), EngineCompactor(), rounds=rounds, canaries=seeded_canaries(),
                              budget_fraction=budget)
        final = run.rounds[-1]
        held = sum(final.survived.values())
        by = " ".join(f"{SHORT[t]} {final.survival_by_type.get(t, 0.0):.0%}" for t in TYPES)
        lines.append(f"  at {budget:.0%}: {held}/{len(final.survived)} held after round {final.round_num} ({by}); "
                     f"output {final.output_chars:,} chars of {final.budget_chars:,}")
    return lines


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--budgets", default="0.1,0.2,0.3,0.5,1.0", help="fractions of the transcript, comma-separated")
    ap.add_argument("--seeds", default="1,2,3,4", help="the kit's randomized corpus seeds, comma-separated")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--references", default=",".join(REFERENCES), help="reference compactors, comma-separated")
    ap.add_argument("--no-check", action="store_true", help="skip the kit's check on its seeded session")
    args = ap.parse_args(argv)
    budgets = [float(b) for b in args.budgets.split(",") if b.strip()]
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    fixed = fixed_cost("You are a coding assistant. Follow all rules and constraints in this session.")
    print(f"engine fixed cost: prefix {fixed.prefix_tokens} tokens (system prompt and tool schemas) + tail "
          f"{fixed.tail_tokens} tokens = {fixed.tokens} tokens, added to the engine's budget at every kit budget")
    if not args.no_check:
        for line in check_lines(budgets, args.rounds):
            print(line)
    factories: dict[str, Callable[[], Any]] = {EngineCompactor.name: EngineCompactor}
    factories.update({n: REFERENCES[n] for n in args.references.split(",") if n.strip()})
    payload = run_budget_benchmark(factories, budgets=budgets, seeds=seeds, rounds=args.rounds)
    print(f"\nkit benchmark: final survival by canary type (median over seeds {seeds}), {args.rounds} rounds; "
          "output = final text / transcript")
    for line in _table(payload, fixed):
        print(line)
    return {"fixed": fixed, "payload": payload}


if __name__ == "__main__":
    main()
