"""``commitments``: the spec's always-loaded tool (§5) over the stated state (docs/STATE.md).

The model reads what the user stated that binds the session (rules, limits, facts, goals, preferences in
force, each with its id and where it was stated), and adds what the user stated that the engine's own pass
did not recognise, in the user's words; it can never remove or weaken one: an added item supersedes only
an item of the same key, and only from the next turn. Answered by the engine (``agent/tools/engine.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from vak_context.context.request.messages import ToolSpec
from vak_context.context.stated.extract import classify
from vak_context.context.stated.items import CATEGORIES, StatedItem, norm_key
from vak_context.context.stated.render import listing
from vak_context.events.payloads import WorkContract

COMMITMENTS_NAME = "commitments"

COMMITMENTS = ToolSpec(
    name=COMMITMENTS_NAME,
    description=(
        "What the user stated that binds this session (rules, limits, facts, goals, preferences). No arguments: "
        "list them. With text: record one the user stated, in their words (from the next turn)."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "text": {"type": "string", "description": "the user's statement"},
            "category": {"type": "string", "enum": list(CATEGORIES)},
            "key": {"type": "string", "description": "what it is about; a later one of this key replaces it"},
        },
        "additionalProperties": False,
    },
)

_USAGE = ('commitments: call it with no arguments to list what the user stated, or {"text": "the user\'s words", '
          f'"category": one of {", ".join(CATEGORIES)}, "key": "optional subject"}} to record one')


def parse_commitment(args: Mapping[str, Any], current: tuple[StatedItem, ...]) -> WorkContract | str | None:
    """None for a read; the item to record for an add (keyed like the engine's own pass when no key is
    given); or the error text that says how to call it."""
    if not isinstance(args, Mapping):
        return _USAGE
    unknown = sorted(str(k) for k in args if k not in ("text", "category", "key"))
    if unknown:
        return f"commitments does not take {', '.join(map(repr, unknown))}. {_USAGE}"
    text, category, key = args.get("text"), args.get("category"), args.get("key")
    if text is None or (isinstance(text, str) and not text.strip() and category is None and key is None):
        return None
    if not isinstance(text, str) or not text.strip():
        return f"text must be the user's statement. {_USAGE}"
    if category is not None and category not in CATEGORIES:
        return f"category must be one of {', '.join(CATEGORIES)}, not {category!r}. {_USAGE}"
    if key is not None and (not isinstance(key, str) or not norm_key(key)):
        return f"key must name what the statement is about. {_USAGE}"
    draft = classify(text.strip(), category or _guess(text), current)
    assert draft is not None  # a labelled statement is always an item
    return WorkContract(text=text.strip(), category=cast(Any, draft.category),
                        key=norm_key(key) if isinstance(key, str) else draft.key, via="tool")


def _guess(text: str) -> str:
    draft = classify(text.strip())
    return draft.category if draft is not None else "fact"


def answer_listing(current: tuple[StatedItem, ...]) -> str:
    return listing(current)
