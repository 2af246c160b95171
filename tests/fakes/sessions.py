"""Sessions built entry by entry, chained as the ledger chains them: for the planner, index and render tests.

- ``SessionBuilder``: turns of directive, tool calls with evidence and results, answer and turn card,
  kept with their ``SessionView``; entries go to a ``sink`` (a real ledger) or are chained in memory.
- ``build_session``: ``turns`` such turns over five recurring topics (``TOPICS``, bodies from ``body_for``).
- ``ledger_session``: the same topics written to a real ``LedgerStore``, turn by turn, with turn cards.
- ``Chain``: bare entries chained without a ledger or a view (``add_result`` adds an evidence body and its
  tool result).
- ``profile``: a capacity profile with a given instruction horizon.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from pydantic import BaseModel

from vak_context.context.capacity.profile import CapacityProfile, Ewma, Horizon, ProfileKey
from vak_context.context.history.turncard import build_card
from vak_context.context.planner.view import SessionView
from vak_context.events.envelope import Mapper, StoredEntry
from vak_context.events.payloads import (
    AssistantStep,
    Directive,
    EvidenceBody,
    TextBlock,
    ToolResult,
    ToolUseBlock,
)
from vak_context.storage.ledger import LedgerStore

Tool = tuple[str, Mapping[str, object], str, bool]  # name, input, result body, is_error

Sink = Callable[[BaseModel, bytes | None], StoredEntry]

# Words the property tests draw directives and answers from.
WORDS = "copper ledger flight report commit cache horizon window packet turn card token price test".split()


class SessionBuilder:
    """Entries chained as the ledger chains them (with evidence blobs), and the view kept beside them.

    ``sink`` writes an entry somewhere real (a LedgerActor) and returns it as stored; without one
    the entries are chained in memory, as the ledger would chain them.
    """

    def __init__(self, session: str = "t", sink: Sink | None = None) -> None:
        self.session = session
        self.mapper = Mapper()
        self.entries: list[StoredEntry] = []
        self.view = SessionView()
        self.sink = sink

    def add(self, payload: BaseModel, blob: bytes | None = None) -> str:
        if self.sink is not None:
            e = self.sink(payload, blob)
        else:
            parent = self.entries[-1].id if self.entries else None
            e = self.mapper.entry(payload, session=self.session, seq=len(self.entries), parent=parent, time_us=0,
                                  blob=blob)
        self.entries.append(e)
        self.view.add(e)
        return e.id

    def turn(self, directive: str, tools: Sequence[Tool] = (), answer: str = "Done.", *, close: bool = True) -> str:
        turn_id = self.add(Directive(text=directive))
        n = len(self.view.index.turns)
        for k, (name, args, body, is_error) in enumerate(tools):
            call = f"call_{n}_{k}"
            self.add(AssistantStep(blocks=(ToolUseBlock(id=call, name=name, input=dict(args)),), stop_reason="tool_use"))
            data = body.encode()
            ev = self.add(
                EvidenceBody(tool_use_id=call, tool_name=name, chars=len(body), bytes=len(data), is_error=is_error),
                data,
            )
            self.add(ToolResult(tool_use_id=call, tool_name=name, content=body, is_error=is_error, evidence_id=ev))
        self.add(AssistantStep(blocks=(TextBlock(text=answer),), stop_reason="end_turn"))
        if close:
            turn = self.view.index.current
            assert turn is not None
            self.add(build_card(self.view.index, turn, self.view.turn_infos(turn)))
        return turn_id


def store_sink(store: LedgerStore, session: str) -> Sink:
    """A ``SessionBuilder`` sink that appends each entry to ``store`` and returns it as stored."""

    def sink(payload: BaseModel, blob: bytes | None) -> StoredEntry:
        return store.get(store.append(session, [payload], blobs=[blob])[0])

    return sink


def profile(horizon: int, *, out: int = 256, tpc: float = 0.25, window: int | None = None) -> CapacityProfile:
    return CapacityProfile(
        key=ProfileKey("local", f"h{horizon}"),
        declared_window=window if window is not None else max(horizon, 1),
        instruction_horizon=Horizon(horizon, 0.9, 0.0),
        tokens_per_char=Ewma(tpc, 3),
        output_reserve=out,
    )


TOPICS = [
    ("Find my reservation ABC123 and list its flights.", "get_reservation", {"id": "ABC123"}),
    ("What is the copper price trend this quarter?", "web_search", {"query": "copper price trend"}),
    ("Run the test suite and tell me what fails.", "bash", {"command": "pytest -q"}),
    ("Read storage/ledger.py and explain group commit.", "read_file", {"path": "storage/ledger.py"}),
    ("Summarise the revenue table from the quarterly report.", "get_report", {"id": "rep-7"}),
]


def body_for(tool: str, i: int) -> str:
    if tool == "get_reservation":
        return json.dumps({"reservation_id": f"ABC{i}", "flights": [{"no": f"HAT{i:03d}", "date": "2024-05-1"}]})
    if tool == "web_search":
        return "\n".join(f"{k}. Copper market note {k} https://example.org/{i}/{k}" for k in range(1, 6))
    if tool == "bash":
        return "\n".join(f"tests/test_{k}.py::case PASSED" for k in range(12)) + "\nexit code 0"
    if tool == "read_file":
        return "\n".join(f"{k:4d}  line {k} of the ledger module, with some code" for k in range(40))
    return json.dumps({"revenue": [{"q": q, "usd": 1000 * q} for q in range(1, 5)], "currency": "USD"})


def build_session(
    turns: int, *, tools_per_turn: int = 1, answer_words: int = 30, sink: Sink | None = None
) -> SessionBuilder:
    b = SessionBuilder(sink=sink)
    for i in range(turns):
        directive, tool, args = TOPICS[i % len(TOPICS)]
        calls = [(tool, args, body_for(tool, i), False)] * tools_per_turn
        b.turn(f"{directive} (turn {i + 1})", calls, " ".join(["Answer"] + ["word"] * answer_words) + ".")
    return b


def ledger_session(root: Path, turns: int) -> tuple[LedgerStore, SessionView]:
    """A session written to a real ledger, turn by turn, with turn cards. The caller closes the store."""
    store = LedgerStore(root)
    view = SessionView()

    def put(payload: BaseModel, blob: bytes | None = None) -> str:
        eid = store.append("s", [payload], blobs=[blob])[0]
        view.add(store.get(eid))
        return eid

    for i in range(turns):
        directive, tool, args = TOPICS[i % len(TOPICS)]
        put(Directive(text=f"{directive} (turn {i + 1})"))
        call = f"call_{i}"
        put(AssistantStep(blocks=(ToolUseBlock(id=call, name=tool, input=dict(args)),)))
        text = body_for(tool, i)
        ev = put(EvidenceBody(tool_use_id=call, tool_name=tool, chars=len(text), bytes=len(text)), text.encode())
        put(ToolResult(tool_use_id=call, tool_name=tool, content=text, evidence_id=ev))
        put(AssistantStep(blocks=(TextBlock(text="Here is what I found, in a few words. " * 6),)))
        turn = view.index.current
        assert turn is not None
        put(build_card(view.index, turn, view.turn_infos(turn)))
    return store, view


class Chain:
    """Entries chained as a ledger chains them, without a ledger (the index is pure)."""

    def __init__(self) -> None:
        self.mapper = Mapper()
        self.entries: list[StoredEntry] = []

    def add(self, payload: BaseModel, blob: bytes | None = None) -> str:
        parent = self.entries[-1].id if self.entries else None
        e = self.mapper.entry(
            payload, session="t", seq=len(self.entries), parent=parent, time_us=0, blob=blob
        )
        self.entries.append(e)
        return e.id


def add_result(chain: Chain, call_id: str, body: str, name: str = "tool") -> tuple[str, str]:
    """An evidence body and the tool result that points at it; their ids."""
    ev = chain.add(
        EvidenceBody(tool_use_id=call_id, tool_name=name, chars=len(body), bytes=len(body.encode())),
        body.encode(),
    )
    res = chain.add(ToolResult(tool_use_id=call_id, tool_name=name, content=body, evidence_id=ev))
    return ev, res

