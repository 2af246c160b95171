"""The card-definition library, the ``emit_*_card`` tools generated from it, and presentation records.

Pure apart from reading the library's own JSON files (static package data, read once, like an
import). Spec §10 "Presentations": a card call that validates becomes a ``Presentation`` ledger
entry; its tool result is a short ack, never an echo of the payload.

Definitions live in ``context/history/card_defs/<semantic_type>.json``: a JSON Schema (draft 2020-12) of
the payload plus an ``x-vak-card`` block::

    {"semantic_type": "chart", "schema_version": 1, "title_field": "title",
     "identity": ["title", "series[].name", "series[].points#", "accessible_summary"]}

Tool names: ``emit_<the semantic type up to its first dot>_card``, so ``research.synthesis`` is
``emit_research_card``; two types that would share a name are refused when the library loads.

Identity paths (what a TurnCard shows of a card, spec §10 "Presentation digest is schema-driven"):
``*`` every field · ``a`` field ``a`` · ``a#`` the length of array ``a`` · ``a[0]`` its first item ·
``a[].b`` field ``b`` of every item · ``a[].{b,c}`` fields ``b`` and ``c`` of every item ·
``a[].b#`` the length of ``b`` in every item.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

import blake3
import jsonschema
import pydantic

from vak_context.context.request.messages import ToolSpec
from vak_context.errors import InvalidCardDefinition, InvalidPayload, UnknownCardType
from vak_context.events import canonical
from vak_context.events.payloads import Presentation, PresentationSource, ToolUseBlock

LIBRARY_ID = "vak.cards"
CARD_KEYWORD = "x-vak-card"
_PATH = re.compile(
    r"^[A-Za-z_][\w]*(?:\[\](?:\.(?:[A-Za-z_]\w*|\{[A-Za-z_]\w*(?:,[A-Za-z_]\w*)*\}))?|\[0\])?#?$"
)
_NOT_FOR_TOOLS = ("$schema", "$id", CARD_KEYWORD)


def card_tool_name(semantic_type: str) -> str:
    """``research.synthesis`` → ``emit_research_card``; ``metric`` → ``emit_metric_card``."""
    return f"emit_{semantic_type.split('.', 1)[0]}_card"


@dataclass(frozen=True)
class CardDef:
    """One card type: its payload schema and what identifies a card of it."""

    semantic_type: str
    schema_version: int
    title_field: str
    identity: tuple[str, ...]
    schema: Mapping[str, Any]
    validator: Any = field(repr=False, compare=False)

    @property
    def tool_name(self) -> str:
        return card_tool_name(self.semantic_type)

    def tool_spec(self) -> ToolSpec:
        """The ``emit_<type>_card`` tool: the payload schema is the tool's input schema."""
        schema = {k: v for k, v in self.schema.items() if k not in _NOT_FOR_TOOLS}
        description = str(schema.pop("description", "")).strip()
        schema.pop("title", None)
        return ToolSpec(
            name=self.tool_name,
            description=(
                f"{description} Show the answer to the user as a {self.semantic_type} card: the arguments are "
                'the card. The result is a short acknowledgement {"presentation": "<id>", "ok": true}.'
            ).strip(),
            input_schema=schema,
        )

    def problems(self, payload: Any) -> tuple[str, ...]:
        """Every way ``payload`` fails the schema, one readable line each; empty when it validates."""
        errors = sorted(self.validator.iter_errors(payload), key=lambda e: (list(e.absolute_path), e.message))
        return tuple(f"at {_json_path(e.absolute_path)}: {e.message}" for e in errors)


class CardLibrary:
    """The card types by semantic type and by tool name."""

    def __init__(self, definitions: Iterable[CardDef]) -> None:
        self.defs: dict[str, CardDef] = {}
        self.by_tool: dict[str, CardDef] = {}
        for card in definitions:
            if card.semantic_type in self.defs:
                raise InvalidCardDefinition(f"card type {card.semantic_type!r} is defined twice; keep one")
            if card.tool_name in self.by_tool:
                raise InvalidCardDefinition(
                    f"card types {self.by_tool[card.tool_name].semantic_type!r} and {card.semantic_type!r} "
                    f"would both be {card.tool_name}; rename one so their first dotted parts differ"
                )
            self.defs[card.semantic_type] = card
            self.by_tool[card.tool_name] = card
        self.version = blake3.blake3(
            canonical.encode(
                [dict(c.schema) for c in sorted(self.defs.values(), key=lambda c: c.semantic_type)]
            )
        ).hexdigest()[:16]

    @classmethod
    def from_schemas(cls, schemas: Iterable[Mapping[str, Any]], *, check: bool = True) -> CardLibrary:
        """``check`` False: the schemas are not checked against JSON Schema's own metaschema (the shipped
        library's are checked by its tests)."""
        return cls(_card_def(schema, check=check) for schema in schemas)

    def get(self, name: str) -> CardDef:
        """A card type by semantic type or by tool name."""
        card = self.defs.get(name) or self.by_tool.get(name)
        if card is None:
            raise UnknownCardType(name, sorted(self.defs) + sorted(self.by_tool))
        return card

    def is_card_tool(self, tool_name: str) -> bool:
        return tool_name in self.by_tool

    def tool_specs(self) -> tuple[ToolSpec, ...]:
        """The generated ``emit_*_card`` tools, in a stable order (sorted by name)."""
        return tuple(self.by_tool[name].tool_spec() for name in sorted(self.by_tool))


def _card_def(schema: Mapping[str, Any], *, check: bool = True) -> CardDef:
    meta = schema.get(CARD_KEYWORD)
    where = schema.get("$id", "a card definition")
    if not isinstance(meta, dict):
        raise InvalidCardDefinition(
            f"{where} has no {CARD_KEYWORD!r} object; add one with semantic_type and identity"
        )
    semantic_type = meta.get("semantic_type")
    if not isinstance(semantic_type, str) or not re.fullmatch(
        r"[a-z][a-z0-9_]*(?:\.[a-z][a-z0-9_]*)*", semantic_type
    ):
        raise InvalidCardDefinition(
            f"{where}: semantic_type must be dotted lower-case words, got {semantic_type!r}"
        )
    identity = meta.get("identity")
    if not isinstance(identity, list) or not identity or not all(isinstance(p, str) for p in identity):
        raise InvalidCardDefinition(f"{where}: identity must be a non-empty list of paths")
    for path in identity:
        if path != "*" and not _PATH.match(path):
            raise InvalidCardDefinition(
                f"{where}: identity path {path!r} is not understood; see context/history/cards.py for the path forms"
            )
    try:
        if check:
            jsonschema.Draft202012Validator.check_schema(dict(schema))
    except jsonschema.SchemaError as exc:
        raise InvalidCardDefinition(f"{where}: not a valid JSON Schema: {exc.message}") from exc
    return CardDef(
        semantic_type=semantic_type,
        schema_version=int(meta.get("schema_version", 1)),
        title_field=str(meta.get("title_field", "title")),
        identity=tuple(identity),
        schema=schema,
        validator=jsonschema.Draft202012Validator(dict(schema)),
    )


def load_library(*, check: bool = True) -> CardLibrary:
    """Read every ``context/history/card_defs/*.json`` (package data) into a library; ``check``: each
    schema checked against JSON Schema's metaschema too."""
    folder = resources.files("vak_context.context.history.card_defs")
    schemas = []
    for item in sorted(folder.iterdir(), key=lambda p: p.name):
        if item.name.endswith(".json"):
            try:
                schemas.append(json.loads(item.read_text(encoding="utf-8")))
            except ValueError as exc:
                raise InvalidCardDefinition(f"card definition {item.name} is not JSON: {exc}") from exc
    return CardLibrary.from_schemas(schemas, check=check)


@lru_cache(maxsize=1)
def default_library() -> CardLibrary:
    """The shipped library, loaded once. Its schemas are not checked against the metaschema here: that
    check took about 0.11 s (jsonschema's 2020-12 metaschema, of $refs and $dynamicRefs), held the event
    loop of a restarted ``vak serve`` at its first reply, and the shipped files change only with the code
    (tests/unit/test_cards.py checks each, and ``load_library()`` still does)."""
    return load_library(check=False)


def card_tools(library: CardLibrary | None = None) -> tuple[ToolSpec, ...]:
    return (library or default_library()).tool_specs()


# ------------------------------------------------------------------ payloads


def validate_payload(name: str, payload: Any, library: CardLibrary | None = None) -> dict[str, Any]:
    """The canonical (validated, key-sorted) payload, or ``InvalidPayload`` listing every problem.

    ``name`` is a semantic type or a tool name. The error message is meant to be the tool result the
    model reads, so it names the fields to fix.
    """
    card = (library or default_library()).get(name)
    problems = card.problems(payload)
    if problems:
        raise InvalidPayload(
            f"{card.tool_name} payload is not a valid {card.semantic_type} card: "
            + "; ".join(problems)
            + f". Fix these fields and call {card.tool_name} again."
        )
    value = canonical.decode(canonical.encode(payload))
    assert isinstance(value, dict)  # the schema requires an object
    return value


def payload_digest(payload: Any) -> str:
    """blake3 (hex) of the payload's canonical JSON."""
    return blake3.blake3(canonical.encode(payload)).hexdigest()


def card_title(name: str, payload: Mapping[str, Any], library: CardLibrary | None = None) -> str:
    card = (library or default_library()).get(name)
    title = payload.get(card.title_field, payload.get("title", ""))
    return title if isinstance(title, str) else json.dumps(title, ensure_ascii=False)


def identity_digest(
    semantic_type: str, payload: Mapping[str, Any], library: CardLibrary | None = None
) -> str:
    """What identifies the card, from its schema's identity paths (spec §10): one line a value,
    lists as ``- item`` lines. Deterministic for equal payloads."""
    card = (library or default_library()).get(semantic_type)
    lines: list[str] = []
    for path in card.identity:
        if path == "*":
            lines += [f"{key}: {_show(value)}" for key, value in sorted(payload.items())]
            continue
        value = _resolve(payload, path)
        if isinstance(value, list) and not path.endswith("[0]"):  # a row stays on one line
            lines.append(f"{path}:")
            lines += [f"- {_show_item(item)}" for item in value]
        else:
            lines.append(f"{path}: {_show(value)}")
    return "\n".join(lines)


def _resolve(payload: Mapping[str, Any], path: str) -> Any:
    count = path.endswith("#")
    path = path.removesuffix("#")
    name, _, rest = path.partition("[")
    value = payload.get(name)
    if rest == "0]":
        value = value[0] if isinstance(value, list) and value else None
    elif rest.startswith("]"):
        items = value if isinstance(value, list) else []
        sub = rest[2:] if rest.startswith("].") else ""
        if sub.startswith("{"):
            names = sub.strip("{}").split(",")
            value = [[item.get(n) for n in names] if isinstance(item, dict) else None for item in items]
        elif sub:
            value = [item.get(sub) if isinstance(item, dict) else None for item in items]
            if count:
                return [len(v) if isinstance(v, list) else 0 for v in value]
        else:
            value = items
    if count:
        return len(value) if isinstance(value, list) else 0
    return value


def _show(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)


def _show_item(item: Any) -> str:
    if isinstance(item, list):
        return " — ".join(_show(part) for part in item)
    return _show(item)


def _json_path(parts: Iterable[Any]) -> str:
    out = "$"
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


# ------------------------------------------------------------------ in the turn


def card_ack(presentation_id: str) -> str:
    """The emit call's tool result: ``{"presentation": "<id>", "ok": true}``."""
    return json.dumps({"presentation": presentation_id, "ok": True})


def is_duplicate(digest: str, seen_in_turn: Collection[str]) -> bool:
    """A second card with the same payload digest in the same turn is not written (spec §10)."""
    return digest in seen_in_turn


def presentation_record(
    turn_id: str,
    tool_use: ToolUseBlock,  # the stored call
    derived_from: Sequence[str],
    *,
    library: CardLibrary | None = None,
) -> Presentation:
    """The ledger payload for an ``emit_*_card`` call that validates.

    ``derived_from`` is the evidence ids present in the turn before the emit (order kept, repeats
    dropped). Raises ``UnknownCardType`` for a tool that is not a card tool and ``InvalidPayload``
    for arguments that fail the schema (its message is the tool error for the model).
    """
    source = PresentationSource(type="tool_call", tool_use_id=tool_use.id)
    return _record(turn_id, tool_use.name, tool_use.input, derived_from, source, library or default_library())


def fence_presentation_record(
    turn_id: str,
    message_entry_id: str,
    semantic_type: str,
    payload: Mapping[str, Any],
    derived_from: Sequence[str],
    *,
    library: CardLibrary | None = None,
) -> Presentation:
    """The same record for an inline ```vak fence that parses and validates (models without tools)."""
    source = PresentationSource(type="fence", message_entry_id=message_entry_id)
    return _record(turn_id, semantic_type, payload, derived_from, source, library or default_library())


def _record(
    turn_id: str,
    name: str,
    arguments: Any,
    derived_from: Sequence[str],
    source: PresentationSource,
    library: CardLibrary,
) -> Presentation:
    card = library.get(name)
    payload = validate_payload(card.semantic_type, arguments, library)
    try:
        return Presentation(
            turn_id=turn_id,
            source=source,
            semantic_type=card.semantic_type,
            skill_id=LIBRARY_ID,
            skill_version=library.version,
            schema_version=card.schema_version,
            payload=payload,
            payload_digest=payload_digest(payload),
            derived_from=tuple(dict.fromkeys(derived_from)),
            title=card_title(card.semantic_type, payload, library),
            identity_digest=identity_digest(card.semantic_type, payload, library),
        )
    except pydantic.ValidationError as exc:
        raise InvalidPayload(
            f"presentation record for {card.tool_name} is invalid: {exc.errors()[0]['msg']} "
            f"at {'.'.join(str(p) for p in exc.errors()[0]['loc'])}. turn_id and derived_from are 64-hex entry ids."
        ) from exc


def presentation_recall_text(presentation_id: str, record: Presentation) -> str:
    """What ``recall({"presentation": id})`` returns: one header line, then the full payload."""
    derived = f"; derived from evidence {', '.join(record.derived_from)}" if record.derived_from else ""
    header = f"{record.semantic_type} card {json.dumps(record.title, ensure_ascii=False)} (presentation {presentation_id}){derived}"
    return header + "\n" + json.dumps(record.payload, ensure_ascii=False, indent=2, sort_keys=True)
