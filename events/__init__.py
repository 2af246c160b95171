"""The ledger entry model: payload kinds (``payloads``), the stored envelope and mapper
(``envelope``), and the canonical JSON the ids are hashed over (``canonical``)."""

from vak_context.events.envelope import CURRENT_VERSION, LedgerLimits, Mapper, StoredEntry
from vak_context.events.payloads import (
    CONTROL_KINDS,
    KINDS,
    PAYLOAD_ADAPTER,
    Activity,
    Answer,
    AssistantStep,
    CapacityProfileRecord,
    Compaction,
    CoveredEvidence,
    Directive,
    EvidenceBody,
    EwmaRecord,
    HorizonRecord,
    ImageBlock,
    IntentNote,
    Nudge,
    Presentation,
    PresentationFeedback,
    PresentationRef,
    PresentationSelection,
    PresentationSource,
    ReadingKey,
    Receipt,
    ResetWithHandoff,
    TextBlock,
    ThinkingBlock,
    Thread,
    ToolResult,
    ToolUseBlock,
    TraceLine,
    TurnCard,
    TurnTail,
    Usage,
    WorkContract,
)

__all__ = [
    "CONTROL_KINDS", "CURRENT_VERSION", "KINDS", "PAYLOAD_ADAPTER", "Activity", "Answer", "AssistantStep",
    "CapacityProfileRecord", "Compaction", "CoveredEvidence", "Directive", "EvidenceBody", "EwmaRecord",
    "HorizonRecord", "ImageBlock", "IntentNote", "LedgerLimits", "Mapper", "Nudge", "Presentation",
    "PresentationFeedback", "PresentationRef", "PresentationSelection", "PresentationSource", "ReadingKey",
    "Receipt", "ResetWithHandoff", "StoredEntry", "TextBlock", "ThinkingBlock", "Thread", "ToolResult",
    "ToolUseBlock", "TraceLine", "TurnCard", "TurnTail", "Usage", "WorkContract",
]
