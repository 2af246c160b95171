"""A long session whose older turns go to packets: the embedder's two tools (``tests.fakes.embedder``),
directives of a user's length, and a scripted OpenAI-compatible model whose summariser side (the
requests that carry no tools) answers, fails or answers junk, as the test sets it.

``PacketModel.handle`` goes behind ``httpx.MockTransport`` (in-process) or ``tests.fakes.httpserver.serve``
(a Ray actor's summariser reaches it over loopback). ``packet_figures`` reads the turn requests back:
which carried a packet, over which range, with a model-written summary or the engine's extract.
``summary_timing`` reads the ledger back: whether each summary was written between turns (ahead of the
request that carries it) or inside a turn (on a request's path)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx

from tests.fakes.embedder import completion, directive_of, text_of
from vak_context.agent.probe import SYSTEM as PROBE_SYSTEM
from vak_context.context.history.packets import SUMMARISER_SYSTEM
from vak_context.events.envelope import Mapper
from vak_context.events.payloads import Activity, Compaction, Directive, PlanRecord, TurnCard
from vak_context.storage.ledger import LedgerStore

SummaryMode = Literal["answer", "fail", "junk"]
SUMMARY_TEXT = "Model summary of turns {a}-{b}: the user asked for searches and command runs; each was done."
_RANGE = re.compile(r"Write the summary of turns (\d+)–(\d+)")


def directive(turn: int) -> str:
    """A user's directive: a search on odd turns, a command on even ones, with a reason, as people write."""
    if turn % 2 == 0:
        return (f"please run make check-{turn} and tell me whether the build of module {turn} still fails, "
                f"and on which line; I need it for the release notes of sprint {turn}")
    return (f"please search query-{turn:03d} and tell me which results mention topic {turn}; "
            f"I need their ranks and urls for the report on subsystem {turn}")


@dataclass
class PacketModel:
    """The model's side: a directive's tool first, then an answer quoting what the tool returned."""

    summaries: SummaryMode = "answer"
    requests: list[dict[str, Any]] = field(default_factory=list)  # turn requests (they carry tools)
    summary_prompts: list[str] = field(default_factory=list)  # every summariser request's prompt
    refused: int = 0  # a ProbeActor's probes (on Ray) and other requests without tools: refused with a 400

    def handle(self, request: httpx.Request) -> httpx.Response:
        if not request.url.path.endswith("/chat/completions"):
            return httpx.Response(404, json={"error": {"message": "not found", "type": "invalid_request_error"}})
        body = json.loads(request.content)
        if PROBE_SYSTEM[:40] in json.dumps(body["messages"][:1]):
            # A ProbeActor's ladder (on Ray; its requests carry tools): refused, so that no measured profile
            # replaces the caller's window and horizon mid-session, whenever the background probe finishes.
            self.refused += 1
            return httpx.Response(400, json={"error": {"message": "no probes here", "type": "invalid_request_error"}})
        if not body.get("tools"):
            if SUMMARISER_SYSTEM[:40] not in json.dumps(body["messages"][:1]):
                self.refused += 1  # the scripted model answers no probes: no measured profile replaces the window
                return httpx.Response(400, json={"error": {"message": "no probes here", "type": "invalid_request_error"}})
            return self._summary(body)
        self.requests.append(body)
        last = body["messages"][-1]
        if last["role"] == "tool":
            got = " ".join(text_of(last).split())[:220]
            return httpx.Response(200, json=completion(body, f"Here is what the tool returned: {got}"))
        words = directive_of(last) if last["role"] == "user" else ""
        if m := re.search(r"run (make check-\d+)", words):
            return httpx.Response(200, json=completion(body, call=("run_command", {"command": m.group(1)})))
        if m := re.search(r"search (query-\d+)", words):
            return httpx.Response(200, json=completion(body, call=("web_search", {"query": m.group(1)})))
        return httpx.Response(200, json=completion(body, "Noted."))  # a nudge or anything else: a plain answer

    def _summary(self, body: dict[str, Any]) -> httpx.Response:
        prompt = text_of(body["messages"][-1])
        self.summary_prompts.append(prompt)
        if self.summaries == "fail":
            return httpx.Response(400, json={"error": {"message": "summaries are down", "type": "invalid_request_error"}})
        m = _RANGE.search(prompt)
        text = "" if self.summaries == "junk" else SUMMARY_TEXT.format(a=m.group(1) if m else "?", b=m.group(2) if m else "?")
        return httpx.Response(200, json=completion(body, text))

    def summary_ranges(self) -> list[tuple[int, int]]:
        """The turn range each summariser request asked for, in order."""
        return [(int(m.group(1)), int(m.group(2))) for p in self.summary_prompts if (m := _RANGE.search(p))]


@dataclass(frozen=True)
class PacketFigures:
    requests: int  # turn requests
    ranges: list[str]  # per packet-bearing request: its packet's range ("1-16")
    packets: list[str]  # per packet-bearing request: the packet's text
    model_summary: int  # packet-bearing requests whose packet carries a model-written summary
    extract: int  # ... the engine's extract instead
    bare: int  # ... "no summary of them fits" (the pointer)


def packet_text(body: dict[str, Any]) -> str | None:
    """The ``<context_summary turns=...>`` packet a request carries, or None."""
    for message in body["messages"]:
        content = message.get("content")
        parts = content if isinstance(content, list) else [{"type": "text", "text": content or ""}]
        for part in parts:
            text = part.get("text", "") if isinstance(part, dict) else ""
            if (at := text.find('<context_summary turns="')) >= 0:
                end = text.find("</context_summary>", at)
                return text[at:end + len("</context_summary>")]
    return None


def packet_figures(model: PacketModel) -> PacketFigures:
    packets = [p for p in map(packet_text, model.requests) if p is not None]
    ranges = [re.search(r'turns="(\d+-\d+)"', p).group(1) for p in packets]  # type: ignore[union-attr]
    return PacketFigures(
        requests=len(model.requests), ranges=ranges, packets=packets,
        model_summary=sum("\nSummary:\nModel summary of turns" in p for p in packets),
        extract=sum("the engine's extract" in p for p in packets),
        bare=sum("no summary of them fits" in p for p in packets),
    )


def summarised_after_the_last_turn(folder: Path, session: str) -> list[str]:
    """The ranges summarised after the session's last turn closed: written ahead for a next request that never
    came (the session ended), so no request carried them."""
    mapper = Mapper()
    after: list[str] = []
    with LedgerStore(folder, readonly=True) as store:
        for e in store.entries(session):
            p = mapper.payload_of(e)
            if isinstance(p, Directive):
                after = []
            elif isinstance(p, Activity) and p.activity == "packet.summarise":
                a, b = p.detail["range"]
                after.append(f"{a}-{b}")
    return after


def summary_timing(folder: Path, session: str) -> tuple[list[list[int]], list[list[int]], dict[str, str]]:
    """Read the ledger in order: the ranges summarised between a turn's card and the next directive
    (ahead), those summarised inside a turn (on a request's path), and for each stored packet a request's
    plan carried, whether its compaction was in the ledger before that turn's directive ("before") or was
    written inside the turn ("inside")."""
    mapper = Mapper()
    ahead: list[list[int]] = []
    on_path: list[list[int]] = []
    written_at: dict[str, int] = {}  # compaction id -> directives in the ledger when it was appended
    carried: dict[str, str] = {}
    directives, open_turn = 0, False
    with LedgerStore(folder, readonly=True) as store:
        for e in store.entries(session):
            p = mapper.payload_of(e)
            if isinstance(p, Directive):
                directives, open_turn = directives + 1, True
            elif isinstance(p, TurnCard):
                open_turn = False
            elif isinstance(p, Activity) and p.activity == "packet.summarise":
                (on_path if open_turn else ahead).append(p.detail["range"])
            elif isinstance(p, Compaction):
                written_at[e.id] = directives
            elif isinstance(p, PlanRecord) and (stored := (p.plan.get("packet") or {}).get("stored_id")):
                assert stored in written_at, "a plan carries a packet that is not in the ledger before it"
                carried.setdefault(stored, "before" if written_at[stored] < directives else "inside")
    return ahead, on_path, carried
