"""The ledger's entry payloads: one frozen pydantic model per kind, in one discriminated union.

Every kind the spec names (docs: spec §1, §2, §3, §10) is here. A payload is what an entry
*says*; where it sits (id, parent, session, seq, time) is the envelope's business
(``vak_context.events.envelope``). Payload models never hold raw bytes: an evidence body's bytes travel
in the entry's blob, hashed separately.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import (
    BaseModel,
    Field,
    PlainSerializer,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    model_serializer,
)

from vak_context.events.blocks import (
    Frozen,
    ImageBlock,
    JsonValue,
    StepBlock,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
    text_of,
    tool_uses_of,
)

EntryId = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


def _stored_image(image: ImageBlock) -> dict[str, str]:
    # A directive's images were stored before blocks had one model, as {ref, media_type} with no tag: the
    # field says what they are. Writing the tag now would change every such entry's id.
    return {"ref": image.ref, "media_type": image.media_type}


StoredImage = Annotated[ImageBlock, PlainSerializer(_stored_image)]


# ------------------------------------------------------------------ the turn itself


class Directive(Frozen):
    """A user directive: the start of a turn."""

    kind: Literal["directive"] = "directive"
    text: str
    images: tuple[StoredImage, ...] = ()


class AssistantStep(Frozen):
    """One assistant response: text, thinking blocks and tool_use calls, in order."""

    kind: Literal["assistant_step"] = "assistant_step"
    blocks: tuple[StepBlock, ...]
    model: str = ""
    provider: str = ""
    stop_reason: str | None = None

    @property
    def tool_uses(self) -> tuple[ToolUseBlock, ...]:
        return tool_uses_of(self.blocks)

    @property
    def text(self) -> str:
        return text_of(self.blocks)


class ToolResult(Frozen):
    """What the request carried for one tool_use: verbatim, or a window of the evidence body."""

    kind: Literal["tool_result"] = "tool_result"
    tool_use_id: str
    tool_name: str
    content: str
    is_error: bool = False
    evidence_id: EntryId | None = None  # the EvidenceBody entry holding the whole result
    windowed: bool = False


class EvidenceBody(Frozen):
    """The whole result of a tool call. The bytes are the entry's blob; this is their description."""

    kind: Literal["evidence_body"] = "evidence_body"
    tool_use_id: str
    tool_name: str
    media_type: str = "text/plain"
    encoding: Literal["utf-8", "binary"] = "utf-8"
    chars: int = Field(ge=0)  # Unicode characters when utf-8, else bytes
    bytes: int = Field(ge=0)
    is_error: bool = False


class Usage(Frozen):
    """Token usage with every cache tier the providers report."""

    input_tokens: int = 0  # uncached prompt tokens billed at the full rate
    cache_read_tokens: int = 0  # Anthropic cache_read_input_tokens, OpenAI cached_tokens, ...
    cache_write_tokens: int = 0  # Anthropic cache_creation_input_tokens
    output_tokens: int = 0
    reasoning_tokens: int = 0

    @property
    def prompt_tokens(self) -> int:
        """Every prompt token billed, cache tiers included (spec §1 Feedback)."""
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens


class Receipt(Frozen):
    """What one model call cost and how it was served."""

    kind: Literal["receipt"] = "receipt"
    provider: str
    model: str
    usage: Usage
    latency_ms: float = Field(ge=0)
    first_token_ms: float | None = None
    prefix_digest: str = ""
    request_chars: int = 0
    step_id: EntryId | None = None


class PresentationSource(Frozen):
    type: Literal["tool_call", "fence"]
    tool_use_id: str | None = None
    message_entry_id: EntryId | None = None


class Presentation(Frozen):
    """A card the user saw, written when its emit_*_card call validated (spec §10)."""

    kind: Literal["presentation"] = "presentation"
    turn_id: EntryId
    source: PresentationSource
    semantic_type: str
    skill_id: str = ""
    skill_version: str = ""
    schema_version: int = 1
    payload: dict[str, JsonValue]
    payload_digest: str
    derived_from: tuple[EntryId, ...] = ()
    title: str = ""
    identity_digest: str = ""


class TraceLine(Frozen):
    tool: str
    args_digest: str
    evidence_id: EntryId | None = None
    shape: str = ""


class PresentationRef(Frozen):
    id: EntryId
    semantic_type: str
    title: str
    digest: str
    derived_from: tuple[EntryId, ...] = ()


class Answer(Frozen):
    presentations: tuple[PresentationRef, ...] = ()
    narration: str = ""


class ReadingKey(Frozen):
    act: str = ""
    domains: tuple[str, ...] = ()
    entities: tuple[str, ...] = ()
    modalities: tuple[str, ...] = ()


class TurnCard(Frozen):
    """The deterministic record of a closed turn (spec §10)."""

    kind: Literal["turn_card"] = "turn_card"
    turn_id: EntryId
    asked: str
    did: tuple[TraceLine, ...] = ()
    answered: Answer = Answer()
    outcome: Literal["completed", "degraded", "cancelled", "failed"] = "completed"
    reading: ReadingKey = ReadingKey()
    tokens_full: int = 0
    tokens_card: int = 0


class CoveredEvidence(Frozen):
    id: EntryId
    description: str


class Compaction(Frozen):
    """A compaction packet, keyed by the inclusive turn range it summarises (spec §4)."""

    kind: Literal["compaction"] = "compaction"
    first_turn_id: EntryId
    last_turn_id: EntryId
    summary: str
    # The evidence bodies the range holds, listed; or null (``None``): the range's bodies as the chain holds them
    # at this entry, which every reader derives (``TurnIndex``) and the engine writes so: a listed packet names
    # every body of its range again each time it grows (at 1,000 turns ~1,700 bodies, ~190 KB an entry every 8
    # turns), a null one stays a few hundred bytes. Code from before null reads it as invalid, never as empty.
    covered_evidence: tuple[CoveredEvidence, ...] | None = ()
    model: str  # the model whose plan asked for this packet, "provider:model"
    seeded_from: EntryId | None = None  # the shorter packet this one grew from
    # Who wrote ``summary``: the summariser model, or the engine's deterministic extract of the turns'
    # directives, outcomes and evidence ids (the summariser failed, answered nothing or is turned off).
    source: Literal["summariser", "extract"] = "summariser"
    # Written for a brief packet (the evidence counted, not listed): always rendered so, the range's one form.
    brief: bool = False

    @model_serializer(mode="wrap")
    def _without_defaults(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """``source`` and ``brief`` only where they differ from their defaults: a packet written as before
        them is stored byte for byte as before (its entry id, and every id after it, unchanged)."""
        data: dict[str, Any] = handler(self)
        if data.get("source") == "summariser":
            del data["source"]
        if data.get("brief") is False:
            del data["brief"]
        return data


class Activity(Frozen):
    """Something the runtime did that no model sees: probes, repairs, cache breaks."""

    kind: Literal["activity"] = "activity"
    activity: str
    detail: dict[str, JsonValue] = Field(default_factory=dict)


class HorizonRecord(Frozen):
    tokens: int = Field(ge=0)
    confidence: float = Field(ge=0.0, le=1.0)
    last_confirmed: float  # unix seconds


class EwmaRecord(Frozen):
    value: float
    samples: int = 0


class CapacityProfileRecord(Frozen):
    """A measured CapacityProfile (spec §1), keyed by (provider, model, quantisation)."""

    kind: Literal["capacity_profile"] = "capacity_profile"
    provider: str
    model: str
    quantisation: str = ""
    declared_window: int
    verified_window: int | None = None
    instruction_horizon: HorizonRecord
    tokens_per_char: EwmaRecord
    prefill_tps: EwmaRecord | None = None
    cache: Literal["none", "prefix_stable", "provider_reported"] = "none"
    output_reserve: int
    provenance: dict[str, JsonValue] = Field(default_factory=dict)


class ResetWithHandoff(Frozen):
    """The one true boundary: turns before it are never planned again (spec §4)."""

    kind: Literal["reset_handoff"] = "reset_handoff"
    handoff: str
    last_turn_id: EntryId | None = None
    carried_evidence: tuple[EntryId, ...] = ()
    reason: str = ""
    model: str | None = None  # the model whose rescue wrote it (only its plans start after it); None: every model


class PlanRecord(Frozen):
    """A working-set plan (spec §4) with its inputs and digest, so any request can be explained later."""

    kind: Literal["plan"] = "plan"
    model: str  # the profile key the plan was made for, "provider:model"
    head: EntryId | None = None  # the chain head it was planned against
    inputs: dict[str, JsonValue] = Field(default_factory=dict)
    inputs_digest: str
    plan: dict[str, JsonValue] = Field(default_factory=dict)
    digest: str
    # The one plan field its JSON lacks (``Plan.rows.history_start``), so the plan decodes back from the
    # entry with its digest (``vak_context.context.planner.policy.plan_of_entry``). None in entries written before.
    history_start: int | None = None
    # The actor that made the plan ("PlannerActor"), so the pipeline is checkable from the ledger; outside
    # both digests (``explain`` matches either way). None in entries written before, and by the pure tools.
    producer: str | None = None
    # Ledger format 2 (v2 entries): the plan's rows (``Plan.rows``) as what changed since ``base``, the same
    # model's plan entry before it in the session, or whole when ``base`` is None
    # (``vak_context.context.planner.delta``); ``plan["turns"]`` is then None, so the entry does not grow with
    # the session. None in v1 entries, whose ``plan["turns"]`` holds the rows as JSON.
    base: EntryId | None = None
    rows: dict[str, JsonValue] | None = None


# ------------------------------------------------------------------ control messages (not turns)


class Nudge(Frozen):
    kind: Literal["nudge"] = "nudge"
    tag: str  # e.g. "empty-step", "freshness-check", "steering-drift", "rule-echo", "directive-echo"
    text: str


class TurnTail(Frozen):
    """The tail block a turn's directive was sent with (``vak_context.context.request.assemble.render_tail``), written once
    before the turn's first step. A closed turn's record shows it again before the directive, so the
    request the next turn sends starts with the bytes the last one sent (the prefix cache holds)."""

    kind: Literal["turn_tail"] = "turn_tail"
    text: str


class IntentNote(Frozen):
    kind: Literal["intent_note"] = "intent_note"
    text: str


class Thread(Frozen):
    kind: Literal["thread"] = "thread"
    items: tuple[str, ...] = ()


class WorkContract(Frozen):
    """What binds later turns (docs/STATE.md). With a ``category`` it is one stated item: a rule or
    prohibition, a hard constraint or limit, a goal or its progress, a fact, a preference, keyed so that a
    later item of the same ``key`` supersedes it (``active`` False: the key is no longer stated). Without
    one (entries written before, the session generator's) it is a contract text the projection leaves out."""

    kind: Literal["work_contract"] = "work_contract"
    text: str
    active: bool = True
    category: Literal["", "rule", "constraint", "goal", "fact", "preference"] = ""
    key: str = ""
    turn_id: EntryId | None = None  # the directive of the turn it was stated in (None: stated outside a turn)
    entry_id: EntryId | None = None  # the entry it was stated in: the directive, or the step that called the tool
    via: Literal["", "directive", "model", "api", "serve", "tool"] = ""  # how it came in

    @model_serializer(mode="wrap")
    def _without_defaults(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """The stated item's fields only where they differ from their defaults: a contract text written as
        before them is stored byte for byte as before (its entry id, and every id after it, unchanged)."""
        data: dict[str, Any] = handler(self)
        for name in ("category", "key", "turn_id", "entry_id", "via"):
            if data.get(name) in ("", None):
                data.pop(name, None)
        return data


class PresentationFeedback(Frozen):
    kind: Literal["presentation_feedback"] = "presentation_feedback"
    presentation_id: EntryId
    action: Literal["dismissed", "pinned", "helpful", "not_helpful", "corrected"]
    note: str = ""


class PresentationSelection(Frozen):
    kind: Literal["presentation_selection"] = "presentation_selection"
    presentation_ids: tuple[EntryId, ...]
    turn_id: EntryId | None = None


EntryPayload = Annotated[
    Directive
    | AssistantStep
    | ToolResult
    | EvidenceBody
    | Receipt
    | Presentation
    | TurnCard
    | Compaction
    | Activity
    | CapacityProfileRecord
    | ResetWithHandoff
    | PlanRecord
    | Nudge
    | TurnTail
    | IntentNote
    | Thread
    | WorkContract
    | PresentationFeedback
    | PresentationSelection,
    Field(discriminator="kind"),
]

PAYLOAD_ADAPTER: TypeAdapter[Any] = TypeAdapter(EntryPayload)

# Every kind, read off the union itself (Annotated's first argument), so a new payload is added in one place.
PAYLOAD_TYPES: dict[str, type[BaseModel]] = {
    cls.model_fields["kind"].default: cls for cls in get_args(get_args(EntryPayload)[0])
}
KINDS: tuple[str, ...] = tuple(sorted(PAYLOAD_TYPES))
CONTROL_KINDS = frozenset({"nudge", "intent_note", "thread", "work_contract"})

__all__ = [
    "CONTROL_KINDS", "KINDS", "PAYLOAD_ADAPTER", "PAYLOAD_TYPES", "Activity", "Answer", "AssistantStep",
    "CapacityProfileRecord", "Compaction", "CoveredEvidence", "Directive", "EntryId", "EntryPayload",
    "EvidenceBody", "EwmaRecord", "HorizonRecord", "ImageBlock", "IntentNote", "JsonValue", "Nudge",
    "PlanRecord", "Presentation", "PresentationFeedback", "PresentationRef", "PresentationSelection",
    "PresentationSource", "ReadingKey", "Receipt", "ResetWithHandoff", "StepBlock", "StoredImage", "TextBlock",
    "ThinkingBlock", "Thread", "ToolResult", "ToolUseBlock", "TraceLine", "TurnCard", "TurnTail", "Usage",
    "WorkContract",
]
