"""The tool surface (spec §5): which tools are loaded, the catalogue of the rest, and ``find_tools``. Pure.

* **Loaded (core)**: tools that declare ``always_loaded`` (recall, find_tools, the workspace tools, the
  card tools), in one fixed order. Their schemas are the request's ``tools`` on every turn.
* **Catalogue**: one line per admitted tool that is not always loaded (``name — first sentence``),
  sorted by name. It depends on the admitted set only, so it sits in the stable prefix and never moves.
* **find_tools({query})** ranks the deferred tools with the project's one BM25 (``vak_context.bm25``: the one
  the planner and the card index rank turns with, one tokeniser for all three), returns their full
  schemas *in its own result*, and loads them for the rest of the turn: a call to a promoted tool is
  accepted by name.

Why the schema rides in the result instead of the request's ``tools``: llama.cpp and most local chat
templates render tool schemas into the system prompt, so a schema added mid-turn changes the first
bytes of the request and the whole turn is prefilled again. Keeping ``tools`` fixed ("mask, don't
remove") keeps the prefix byte-identical across every step and turn (spec P4, P5) on every provider.

Every admitted tool stays callable: a deferred tool called without a ``find_tools`` that returned it
runs all the same, and the loop records the call as the measured misread.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vak_context.bm25 import Bm25Index, best_first
from vak_context.context.request.messages import ToolSpec
from vak_context.context.request.toolrefs import FIND_TOOLS_NAME, LOADED_MARK
from vak_context.errors import InvalidInput

FIND_TOOLS_LIMIT = 5
# Tools an embedder hands over in bulk (a client of ``vak serve``, an agent framework) are deferred when
# their schemas would take more than this share of the bound model's instruction horizon on every request:
# BFCL's entries offer 28 functions, ~5.7k tokens, most of a small model's horizon before the first message.
DEFER_SHARE = 0.25

FIND_TOOLS = ToolSpec(
    name=FIND_TOOLS_NAME,
    description=(
        "Find more tools. The system prompt lists them under 'More tools'. find_tools({\"query\": \"...\"}) "
        "returns the full schemas of the best matches; each one returned can be called by name for the "
        "rest of this turn."
    ),
    input_schema={
        "type": "object",
        "properties": {"query": {"type": "string", "description": "what the tool should do, in a few words"}},
        "required": ["query"],
        "additionalProperties": False,
    },
)


@dataclass(frozen=True)
class ToolDecl:
    """A tool as it declares itself: its schema, whether it is always loaded, whether it observes the
    world as it is now (a search, reading a file, listing a folder, running a command), and whether it is
    read-only (its result cannot change within a turn unless a world-changing call runs: the repeated-call
    rule answers a repeat with the earlier result instead of running it). ``observes`` None: the tool did
    not say (a client's tool under ``vak serve``, an embedder's that sets no flag); its successful call
    counts as an observation for the freshness rule, as True does; only False never counts."""

    spec: ToolSpec
    always_loaded: bool = False
    observes: bool | None = None
    read_only: bool = False

    @property
    def name(self) -> str:
        return self.spec.name


_SENTENCE = re.compile(r"^(.+?[.!?])(?:\s|$)", re.DOTALL)


def schema_chars(tools: Iterable[ToolSpec]) -> int:
    """What the tools' schemas cost a request in characters, as a provider renders them (name, description,
    parameters as JSON)."""
    return sum(len(t.name) + len(t.description) + len(json.dumps(t.input_schema, separators=(",", ":")))
               for t in tools)


def should_defer(tools: Sequence[ToolSpec], horizon_tokens: int, tokens_per_char: float,
                 share: float = DEFER_SHARE) -> bool:
    """Whether tools handed over in bulk go behind ``find_tools`` (listed in the catalogue, every one still
    callable by name) rather than ride every request: their schemas over ``share`` of the horizon."""
    return bool(tools) and schema_chars(tools) * tokens_per_char > share * horizon_tokens


def first_sentence(text: str) -> str:
    """The description's first sentence on one line (the whole text when it has no full stop)."""
    flat = " ".join(text.split())
    m = _SENTENCE.match(flat)
    return m.group(1) if m else flat


@dataclass(frozen=True)
class Surface:
    """The admitted tools, split into the loaded core (fixed order) and the deferred rest (sorted)."""

    core: tuple[ToolDecl, ...]
    deferred: tuple[ToolDecl, ...]

    @classmethod
    def build(cls, tools: Iterable[ToolDecl]) -> Surface:
        """Core tools keep the order given (``find_tools`` is added after recall when missing); deferred
        tools are sorted by name so the catalogue depends on the admitted set only."""
        admitted = list(tools)
        names = [t.name for t in admitted]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise InvalidInput(f"tool names admitted twice: {', '.join(dupes)}; admit each tool once")
        core = [t for t in admitted if t.always_loaded]
        if FIND_TOOLS.name not in names:
            at = next((i + 1 for i, t in enumerate(core) if t.name == "recall"), 0)
            core.insert(at, ToolDecl(FIND_TOOLS, always_loaded=True, observes=False, read_only=True))
        deferred = sorted((t for t in admitted if not t.always_loaded), key=lambda t: t.name)
        return cls(core=tuple(core), deferred=tuple(deferred))

    @property
    def schemas(self) -> tuple[ToolSpec, ...]:
        """The request's ``tools``: the core schemas in their fixed order, the same on every step."""
        return tuple(t.spec for t in self.core)

    def catalogue(self) -> str:
        """The 'More tools' block of the system prompt, or '' when every tool is loaded."""
        if not self.deferred:
            return ""
        lines = [f"- {t.name} — {first_sentence(t.spec.description)}" for t in self.deferred]
        return "More tools (call find_tools to load one):\n" + "\n".join(lines)

    def declared(self, name: str) -> ToolDecl | None:
        for t in (*self.core, *self.deferred):
            if t.name == name:
                return t
        return None

    def observes(self, name: str) -> bool:
        """Whether ``name`` declared that it reads the world as it is now (never guessed from its name; an
        undeclared flag, which the freshness rule counts all the same, is not a declaration)."""
        decl = self.declared(name)
        return bool(decl and decl.observes)

    def read_only(self) -> frozenset[str]:
        """The names of the admitted tools that declared themselves read-only (the repeated-call rule's set)."""
        return frozenset(t.name for t in (*self.core, *self.deferred) if t.read_only)

    def find(self, query: str, limit: int = FIND_TOOLS_LIMIT) -> tuple[ToolDecl, ...]:
        """The deferred tools that best match ``query`` (BM25 over name and description), best first; ties
        keep the catalogue's order. A query that names a tool exactly returns it first."""
        if not self.deferred or limit <= 0:
            return ()
        index: Bm25Index[int] = Bm25Index()
        for i, t in enumerate(self.deferred):
            index.add(i, tool_document(t))
        exact = [i for i, t in enumerate(self.deferred) if t.name == query.strip()]
        order = exact + [i for i, score in best_first(index.search(query)) if i not in exact and score > 0]
        return tuple(self.deferred[i] for i in order[:limit])


def tool_document(tool: ToolDecl) -> str:
    """What ``find_tools`` searches for a tool: its name, the name's words, and its description."""
    return f"{tool.name} {tool.name.replace('_', ' ')} {tool.spec.description}"


def find_tools_result(found: Sequence[ToolDecl], query: str) -> str:
    """What ``find_tools`` returns to the model: each match's full schema, as JSON, one per line."""
    if not found:
        return f"no tool matches {query!r}; the 'More tools' list in the system prompt names every tool"
    lines = [f"{len(found)} tool(s) {LOADED_MARK}; call them by name:"]
    for t in found:
        lines.append(json.dumps({"name": t.name, "description": t.spec.description,
                                 "parameters": t.spec.input_schema}, ensure_ascii=False, sort_keys=True))
    return "\n".join(lines)


def parse_find_tools_args(args: Mapping[str, Any]) -> str | None:
    """The query of a ``find_tools`` call, or None when the arguments carry none."""
    query = args.get("query") if isinstance(args, Mapping) else None
    return query.strip() if isinstance(query, str) and query.strip() else None


def uniqueness_violations(system: str, tools: Sequence[ToolSpec], catalogue: str) -> list[str]:
    """Spec P5: every tool name appears once across the schemas and the catalogue, and no loaded
    schema's name is listed in the catalogue or repeated in the system prompt's own text."""
    problems: list[str] = []
    names = [t.name for t in tools]
    for n in sorted({n for n in names if names.count(n) > 1}):
        problems.append(f"{n}: schema listed twice")
    listed = [line[2:].split(" — ", 1)[0] for line in catalogue.splitlines() if line.startswith("- ")]
    for n in sorted({n for n in listed if listed.count(n) > 1}):
        problems.append(f"{n}: catalogue line listed twice")
    for n in sorted(set(listed) & set(names)):
        problems.append(f"{n}: both a loaded schema and a catalogue line")
    body = system.replace(catalogue, "") if catalogue else system
    for n in sorted(set(names) | set(listed)):
        if re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", body):
            problems.append(f"{n}: named in the system prompt outside the catalogue")
    return problems
