"""A long coding turn, deterministic from a seed: the shape that outgrows a small model's horizon.

A few ordinary turns (``vak_context.sessions.generator.generate_session``), then one directive and ``steps`` steps
(140 by default), each an assistant step with a tool call, its receipt, the evidence body and the
tool result as the request carried it (windowed over 30,000 characters): file reads, test runs,
greps and edits at the sizes a real coding turn shows (a recorded 140-step turn grew to 139k
tokens; this one grows to about 140–170k at 0.25 tokens per character). ``LongTurn.steps()`` yields
after the directive (0) and after each step (1..steps), so a caller can plan every request of the turn.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator

from pydantic import BaseModel

from vak_context.context.capacity.tokens import PRIOR_TOKENS_PER_CHAR, estimate_tokens
from vak_context.context.evidence.digest import window
from vak_context.context.planner.view import SessionView
from vak_context.events.envelope import Mapper, StoredEntry
from vak_context.events.payloads import (
    AssistantStep,
    Directive,
    EvidenceBody,
    Receipt,
    TextBlock,
    ToolResult,
    ToolUseBlock,
    Usage,
)
from vak_context.sessions.generator import _WORDS, _command_output, _file_read, _sentence, generate_session

DIRECTIVE = (
    "The ledger tests fail after the segment refactor. Find out why, fix storage/ledger.py and "
    "storage/segments.py, and run the whole suite until it passes."
)
MODEL = "local:coder"


class LongTurn:
    """A session kept in memory (entries chained as a ledger chains them) and its ``SessionView``."""

    def __init__(self, *, seed: int = 0, prior_turns: int = 4, steps: int = 140,
                 tokens_per_char: float = PRIOR_TOKENS_PER_CHAR) -> None:
        self.seed, self.prior_turns, self.n_steps = seed, prior_turns, steps
        self.mapper = Mapper()
        self.entries: list[StoredEntry] = []
        self.view = SessionView(tokens_per_char)
        self.evidence: list[str] = []  # the long turn's evidence ids, in order

    def add(self, payload: BaseModel, blob: bytes | None = None) -> str:
        parent = self.entries[-1].id if self.entries else None
        e = self.mapper.entry(payload, session="longturn", seq=len(self.entries), parent=parent, time_us=0,
                              blob=blob)
        self.entries.append(e)
        self.view.add(e)
        return e.id

    def steps(self) -> Iterator[int]:
        """Write the session; yield 0 after the long turn's directive, then k after its step k."""
        generate_session(self.seed, self.prior_turns, append=self.add)
        rng = random.Random(self.seed + 1)
        self.add(Directive(text=DIRECTIVE))
        yield 0
        prompt = 6_000
        for k in range(1, self.n_steps + 1):
            name, args, body, is_error = _call(rng, k)
            call = f"toolu_{k:03d}"
            blocks: list[TextBlock | ToolUseBlock] = []
            if k % 3 == 1:
                blocks.append(TextBlock(text=_sentence(rng, rng.randint(8, 30))))
            blocks.append(ToolUseBlock(id=call, name=name, input=args))
            step = self.add(AssistantStep(blocks=tuple(blocks), model=MODEL, provider="local", stop_reason="tool_use"))
            out = rng.randint(40, 400)
            self.add(Receipt(provider="local", model=MODEL, usage=Usage(input_tokens=prompt, output_tokens=out),
                             latency_ms=900.0, step_id=step))
            data = body.encode()
            ev = self.add(EvidenceBody(tool_use_id=call, tool_name=name, chars=len(body), bytes=len(data),
                                       is_error=is_error), data)
            carried = window(body, ev)
            self.add(ToolResult(tool_use_id=call, tool_name=name, content=carried.text, is_error=is_error,
                                evidence_id=ev, windowed=carried.windowed))
            self.evidence.append(ev)
            prompt += out + estimate_tokens(len(carried.text), PRIOR_TOKENS_PER_CHAR, rounding=math.floor)  # len // 4, as before
            yield k


def _call(rng: random.Random, k: int) -> tuple[str, dict[str, object], str, bool]:
    kind = rng.choices(["read", "bash", "grep", "edit"], weights=[35, 25, 20, 20])[0]
    path = f"storage/{rng.choice(['ledger', 'segments', 'verify', 'cardindex'])}.py"
    if kind == "read":
        return "Read", {"file_path": path}, _file_read(rng, rng.choice([40, 80, 160])), False
    if kind == "bash":
        code = rng.choice([0, 1, 1])
        lines = rng.choice([20, 60, 200])
        return "Bash", {"command": "pytest -q tests/unit/test_ledger_store.py"}, _command_output(rng, lines, code), code != 0
    if kind == "grep":
        word = rng.choice(_WORDS)
        hits = "\n".join(f"{path}:{rng.randint(1, 900)}:    {word} = {_sentence(rng, 6)}" for _ in range(rng.randint(3, 25)))
        return "Grep", {"pattern": word, "path": "storage"}, hits, False
    old = f"    value = value * {rng.randint(2, 9)} + {rng.randint(0, 99)}"
    new = f"    value = value * {rng.randint(2, 9)} + {rng.randint(0, 99)}  # fixed in step {k}"
    return "Edit", {"file_path": path, "old_string": old, "new_string": new}, f"The file {path} has been updated.", False
