"""``session_search``: the engine's full-text search of what the session saw (spec §5, issue 25), as a tool.

Its declaration (always loaded, read-only) and the text its call returns. The search itself runs where
the session's writer is (``TurnServices.session_search``: ``storage/sessionsearch.py`` in this process, or
the LedgerActor on Ray); the answer is a tool result like any other (stored whole as evidence by the
turn), so what a search found stays recallable after the turn closes.

Each hit names its turn, where it is (an evidence id and line range, a card, a presentation or a
directive), a snippet (the first line holding a query term) and the exact ``recall`` call that returns
its text: ``recall({"id": "<12 hex>", "range": [a, b]})`` for a result window, ``recall({"turn": N})``
for a card or directive, ``recall({"presentation": "<id>"})``; a hit in another session (a ``scope``)
carries ``"session"`` in its recall call. No hit says so and points at ``recall({"turn": N})``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from vak_context.bm25 import terms
from vak_context.context.request.messages import ToolSpec

if TYPE_CHECKING:
    from vak_context.storage.search import Hit
    from vak_context.storage.sessionsearch import Found

SESSION_SEARCH_NAME = "session_search"

SESSION_SEARCH = ToolSpec(
    name=SESSION_SEARCH_NAME,
    description=(
        "Search all this session saw, also what is no longer shown. Up to 5 hits, each with its turn, evidence "
        "lines, a snippet and the recall call that returns its text."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "words to find"},
            "scope": {"type": "string", "description": 'Optional: "ledger" (every session) or session names, comma-separated'},
        },
        "required": ["query"],
        "additionalProperties": False,
    },
)

_USAGE = 'session_search: pass {"query": "words to look for"} and optionally "scope": "ledger" or session names'


def parse_search_args(args: Mapping[str, Any]) -> tuple[str, str | None] | str:
    """(query, scope) of a call, or the error text that says how to call it. A scope given as a list of
    names (JSON Schema says string, a model may send a list) is taken as those names."""
    if not isinstance(args, Mapping):
        return _USAGE
    unknown = sorted(str(k) for k in args if k not in ("query", "scope"))
    if unknown:
        return f"session_search does not take {', '.join(map(repr, unknown))}. {_USAGE}"
    query = args.get("query")
    if not isinstance(query, str) or not query.strip():
        return _USAGE
    scope = args.get("scope")
    if isinstance(scope, list | tuple) and all(isinstance(s, str) for s in scope):
        scope = ",".join(scope)
    if scope is not None and not isinstance(scope, str):
        return f"scope must be a string, got {json.dumps(scope, default=repr)}. {_USAGE}"
    return query.strip(), scope.strip() if isinstance(scope, str) and scope.strip() else None


def hit_recall(hit: Hit, session: str) -> str:
    """The recall call that returns a hit's text, from the session ``session`` searches from."""
    if hit.session == session:
        return hit.recall
    args = json.loads(hit.recall[len("recall("):-1])
    return f"recall({json.dumps({'session': hit.session, **args}, ensure_ascii=False)})"


def _where(hit: Hit) -> str:
    if hit.kind == "evidence":
        return f"lines {hit.start}-{hit.end} of evidence {hit.ref[:12]}" + (f" ({hit.tool})" if hit.tool else "")
    return f"{hit.kind} {hit.ref[:12]}"


def render_found(found: Found) -> str:
    """What the model reads: one block per hit, best first, or the no-match sentence."""
    where = "this session" if found.searched == (found.session,) else (
        f"{len(found.searched)} session(s): " + ", ".join(found.searched))
    lines: list[str] = []
    if not found.hits:
        why = "" if terms(found.query) else " (the query has no searchable words: stop words are ignored)"
        turns = f" (turns 1-{found.turns})" if found.turns > 1 else ""
        lines.append(f"session_search {found.query!r}: no match in {where}{turns}{why}. "
                     'recall({"turn": N}) returns the whole record of turn N.')
    else:
        lines.append(f"session_search {found.query!r}: {len(found.hits)} hit(s) in {where}, best first.")
        for i, hit in enumerate(found.hits, 1):
            session = f"session {hit.session!r}, " if hit.session != found.session else ""
            lines.append(f"{i}. {session}turn {hit.turn}, {_where(hit)}: {hit.snippet}")
            lines.append(f"   {hit_recall(hit, found.session)}")
    lines += [f"note: {n}" for n in found.notes]
    return "\n".join(lines)


def recall_calls(text: str) -> Sequence[dict[str, Any]]:
    """The recall calls a ``session_search`` result names, in order, as arguments (for tests and tools
    that follow a hit)."""
    out = []
    for line in text.split("\n"):
        line = line.strip()
        if line.startswith("recall({") and line.endswith("})"):
            out.append(json.loads(line[len("recall("):-1]))
    return out
