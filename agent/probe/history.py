"""The probe's synthetic histories: turn-shaped filler sized in tokens, ending in one instruction.

Each turn is a user question, an assistant tool call, a digest-shaped result carrying an
``[evidence:…]`` tag and a short answer; turn ``i`` is the same in every history, so a smaller
history is a prefix of a larger one. ``build_request`` fills a history to about a target number of
prompt tokens and ends it in ONE instruction (call ``probe_ack`` with a nonce) or in the negative
control ("do not call a tool"). ``vak_context.agent.probe.runner.ProbeRunner`` sends them.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import blake3

from vak_context.context.capacity.ladder import ACK_TOOL, SampleKind
from vak_context.context.capacity.profile import Protocol, request_chars
from vak_context.context.request.messages import ChatRequest, Message, ToolSpec
from vak_context.events.blocks import ToolResultBlock, ToolUseBlock

_TOPICS = (
    "the billing service", "the search index", "quarterly revenue", "the deploy pipeline", "customer churn",
    "the cache layer", "token refresh", "latency in the EU cluster", "the import job",
    "disk usage on the builders", "the pricing table", "the onboarding emails", "failed payments",
    "the audit log", "the feature flags", "the nightly backup", "the mobile release", "support tickets",
)
_WORDS = (
    "service request config value change deploy error rate users account report data table index query "
    "cluster node region latency budget limit owner team release version build test check alert metric "
    "window retry queue worker job schedule backup restore policy access token session cache record file "
    "line entry field status result note summary review plan issue fix patch update rollout monitor trend "
    "week month daily hourly peak average median total count share growth drop spike stable normal slow "
    "fast large small first last new old main primary secondary manual automatic internal external"
).split()
_FILES = ("src/billing/api.py", "docs/runbook.md", "ops/deploy.yaml", "reports/q3.csv", "src/search/index.rs",
          "config/flags.toml", "notes/incidents.md", "src/auth/refresh.go")
_QUESTIONS = ("What do the docs say about {t}?", "Find where {t} is configured.",
              "How did {t} change last month?", "Is anything wrong with {t}?")
_TOOLS = (
    ToolSpec(name="search_docs", description="Search the team's documents. Returns a digest of matches.",
             input_schema={"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}),
    ToolSpec(name="read_file", description="Read a file from the repository. Returns a digest of its lines.",
             input_schema={"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
)
ACK_SPEC = ToolSpec(
    name=ACK_TOOL,
    description="Acknowledge an instruction. It has no side effects.",
    input_schema={"type": "object", "properties": {"ack": {"type": "string"}}, "required": ["ack"]},
)
# Every tool a probe request offers; a call to any of them is parsed from the reply.
OFFERED_TOOLS: tuple[ToolSpec, ...] = (*_TOOLS, ACK_SPEC)
SYSTEM = ("You are an assistant that works through a user's requests with tools. Answer briefly. "
          "When the user gives an instruction about tools, follow it exactly.")


def _sentence(rng: random.Random) -> str:
    words = [rng.choice(_WORDS) for _ in range(rng.randint(9, 15))]
    return " ".join(words).capitalize() + "."


@dataclass(frozen=True)
class SyntheticTurn:
    """One turn of filler: question, tool call, digest-shaped result with an evidence tag, answer."""

    question: str
    tool: str
    arguments: dict[str, str]
    result: str
    answer: str


# Every request of a probe rebuilds its history from turn 0, a dozen requests a rung: a turn is built and
# measured once per process (deterministic and immutable), not once per request it appears in.
@lru_cache(maxsize=4096)
def synthetic_turn(index: int, lines: int | None = None) -> SyntheticTurn:
    """Turn ``index`` of every probe history (deterministic, so smaller histories are prefixes)."""
    rng = random.Random(f"vak-probe-turn-{index}")
    topic = rng.choice(_TOPICS)
    tool = _TOOLS[index % 2].name
    arguments = {"query": topic} if tool == "search_docs" else {"path": rng.choice(_FILES)}
    evidence = blake3.blake3(f"evidence-{index}".encode()).hexdigest()[:12]
    total = rng.randint(20, 60)
    shown = lines if lines is not None else rng.randint(5, 9)
    body = "\n".join(f"- {rng.choice(_FILES)}:{rng.randint(1, 400)}: {_sentence(rng)}" for _ in range(shown))
    result = (f"[evidence:{evidence}] {tool} → {total} matches, showing {shown}\n{body}\n"
              f"(digest of {total} lines; recall(evidence_id=\"{evidence}\") returns the rest)")
    answer = f"{topic.capitalize()}: {_sentence(rng)} [evidence:{evidence}]"
    return SyntheticTurn(rng.choice(_QUESTIONS).format(t=topic), tool, arguments, result, answer)


@lru_cache(maxsize=4096)
def _sized_turn(index: int, protocol: Protocol, model: str, lines: int | None = None) -> tuple[tuple[Message, ...], int]:
    """Turn ``index``'s messages (``lines`` digest lines, else its own count) and their characters."""
    turn = tuple(_turn_messages(synthetic_turn(index, lines), index, protocol))
    return turn, _chars(turn, model)


def _turn_messages(turn: SyntheticTurn, index: int, protocol: Protocol) -> list[Message]:
    call_id = f"call_{index}"
    if protocol == "native":
        call = Message(role="assistant", content=(ToolUseBlock(id=call_id, name=turn.tool, input=turn.arguments),))
        result = Message(role="user", content=(ToolResultBlock(tool_use_id=call_id, content=turn.result),))
    else:
        fence = json.dumps({"name": turn.tool, "arguments": turn.arguments})
        call = Message.assistant(f"```tool_call\n{fence}\n```")
        result = Message.user(f"Tool result ({turn.tool}):\n{turn.result}")
    return [Message.user(turn.question), call, result, Message.assistant(turn.answer)]


def _inline_system(tools: Sequence[ToolSpec]) -> str:
    listing = "\n".join(json.dumps({"name": t.name, "description": t.description, "parameters": t.input_schema})
                        for t in tools)
    return (f"{SYSTEM}\n\nTools you can call:\n{listing}\n\nTo call a tool, write only this, with the tool's "
            "name and arguments:\n```tool_call\n{\"name\": \"<tool>\", \"arguments\": {...}}\n```")


def instruction_text(kind: SampleKind, nonce: str) -> str:
    if kind == "instruction":
        return f'Stop here and call the {ACK_TOOL} tool now with ack="{nonce}". Do not write any text.'
    return "Do not call any tool now. In one short sentence, say what the last question was about."


def build_request(
    target_tokens: int,
    tokens_per_char: float,
    *,
    kind: SampleKind,
    nonce: str,
    model: str,
    protocol: Protocol = "native",
    max_tokens: int = 32,
    temperature: float | None = None,
    salt: str = "",
) -> ChatRequest:
    """A synthetic history of about ``target_tokens`` prompt tokens (at ``tokens_per_char``).

    Whole turns are added while they fit; the last turn's digest shows fewer lines to land near the
    target (it is still a complete turn). ``salt`` goes first in the system prompt, so a salted
    request shares no cached prefix with an unsalted one (the cache rung).
    """
    tools = OFFERED_TOOLS
    system = (f"[session {salt}] " if salt else "") + (SYSTEM if protocol == "native" else _inline_system(tools))
    ending = Message.user(instruction_text(kind, nonce))
    base = ChatRequest(model=model, system=system, messages=(ending,), tools=tools if protocol == "native" else (),
                       max_tokens=max_tokens, temperature=temperature)
    budget = target_tokens / tokens_per_char - request_chars(base)
    messages: list[Message] = []
    index = 0
    while True:
        turn, size = _sized_turn(index, protocol, model)
        if size <= budget or index == 0:
            if size > budget:  # even one turn is over the target: shrink its digest to fit
                turn = _fit_turn(index, budget, protocol, model)
                size = _chars(turn, model)
            messages.extend(turn)
            budget -= size
            index += 1
            continue
        partial = _fit_turn(index, budget, protocol, model)
        if _chars(partial, model) <= budget:  # a shorter last turn, only when even that fits
            messages.extend(partial)
            budget -= _chars(partial, model)
        break
    # Land on the target, not up to a turn below it: what is left goes into the last answer as
    # more of its prose, cut to the exact number of characters.
    if budget >= 1 and messages:
        last = messages[-1]
        messages[-1] = Message.assistant(last.text + _padding(index, int(budget)))
    return base.model_copy(update={"messages": (*messages, ending)})


def _padding(index: int, chars: int) -> str:
    """``chars`` characters of answer-like prose (deterministic per turn)."""
    rng = random.Random(f"vak-probe-pad-{index}")
    text = ""
    while len(text) < chars:
        text += " " + _sentence(rng)
    return text[:chars]


def _chars(messages: Sequence[Message], model: str) -> int:
    return request_chars(ChatRequest(model=model, messages=tuple(messages)))


def _fit_turn(index: int, budget: float, protocol: Protocol, model: str) -> tuple[Message, ...]:
    """Turn ``index`` with as many digest lines as fit ``budget`` chars (at least one line)."""
    best, _ = _sized_turn(index, protocol, model, 1)
    for lines in range(2, 10):
        turn, size = _sized_turn(index, protocol, model, lines)
        if size > budget:
            break
        best = turn
    return best
