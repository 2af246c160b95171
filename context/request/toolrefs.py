"""What a ``find_tools`` result loads, read back from its text (pure, no imports from the engine).

``vak_context.context.request.surface.find_tools_result`` writes the result: a first line with ``LOADED_MARK``, then one JSON
object per loaded tool. The projection (``vak_context.context.history.render``) reads the names back so an adapter with native
deferred loading can send the result as tool references (Anthropic ``tool_reference`` blocks) instead of
the schemas' text. Kept apart from ``vak_context.context.request.surface`` because the projection cannot import the surface
(the surface's BM25 sits above the projection).
"""

from __future__ import annotations

import json

FIND_TOOLS_NAME = "find_tools"
LOADED_MARK = "loaded for the rest of this turn"


def tools_loaded_by(content: str) -> tuple[str, ...]:
    """The tool names a ``find_tools`` result loaded, in its order; () for any other text (no match, an
    error, a digest of a long result)."""
    lines = content.split("\n")
    if len(lines) < 2 or LOADED_MARK not in lines[0]:
        return ()
    names: list[str] = []
    for line in lines[1:]:
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            return ()
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            return ()
        names.append(entry["name"])
    return tuple(names)
