"""The TurnIndex (spec §2): a session's chain of entries grouped into turns.

A turn is one user directive plus every assistant step and tool exchange until the final answer. Control
messages (nudge, intent_note, thread, work_contract) are not turns: they are tail material the assembler owns,
so the index only notes where they fell. A compaction packet becomes a ``Summary`` over the inclusive range of
turns it names (and their evidence); a ``reset_handoff`` marks every turn before it ``behind_reset`` (never
planned again, still reachable by ``recall({turn})``). A ``history.withdrawn`` activity takes the assistant
steps it names out of their turns (a client of ``vak serve`` dropped the replies they gave: the projection
follows the client's history); the entries stay in the chain, and a withdrawn final answer leaves its turn's
card without the narration.

Pure: entries go in, the index comes out. No I/O, no clock. Build it once from
``LedgerStore.chain_to_root(head)`` with ``TurnIndex.build``, then keep it current with ``index.add(entry)``
for each appended entry; ``dump()`` is a canonical, JSON-ready picture of the whole index, so an incrementally
kept index can be checked against a rebuild.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from types import SimpleNamespace
from typing import Any

from vak_context.context.capacity.tokens import PRIOR_TOKENS_PER_CHAR, estimate_tokens
from vak_context.context.history.records import (
    Control,
    EvidenceMeta,
    Exchange,
    ResetMark,
    Step,
    Summary,
    Turn,
    behind,
    dump_turn,
)
from vak_context.context.history.records import (
    step_chars as chars_of_step,
)
from vak_context.context.stated.items import StatedState, item_of
from vak_context.errors import InvalidInput
from vak_context.events import canonical
from vak_context.events.envelope import Mapper, StoredEntry
from vak_context.events.payloads import (
    CONTROL_KINDS,
    Activity,
    Answer,
    AssistantStep,
    Compaction,
    Directive,
    EvidenceBody,
    Presentation,
    Receipt,
    ResetWithHandoff,
    ToolResult,
    ToolUseBlock,
    TurnCard,
    TurnTail,
    WorkContract,
)

__all__ = [
    "FAILURE_ACTIVITIES",
    "WITHDRAWN",
    "Control",
    "EntryLike",
    "EvidenceMeta",
    "Exchange",
    "ResetMark",
    "Step",
    "Summary",
    "Turn",
    "TurnIndex",
    "failure_reason",
]

# The activities a turn closed ``failed`` records why in (agent/turn.py): an exception while it was open,
# a request that could not fit the budget, a request the model rejected as over its window twice.
FAILURE_ACTIVITIES = frozenset({"turn.failed", "turn.request_too_large", "turn.over_window"})


def failure_reason(activity: Activity) -> str:
    """Why the turn failed, as the public ``Card.reason`` says it: the error's type and message, or the why."""
    why = str(activity.detail.get("why") or "")
    error = activity.detail.get("error")
    return f"{error}: {why}" if error and why else str(error or why)

# What an index accepts: a stored entry (decoded here), or an (entry, payload) / (id, payload) pair
# when the caller already holds the decoded payload (the importer and the EvidenceActor do).
EntryLike = StoredEntry | tuple[StoredEntry, Any] | tuple[str, Any]

# The activity naming assistant steps whose replies the client withdrew (``detail["steps"]``: entry ids).
# Append-only: nothing the ledger holds is rewritten, and nothing but steps is ever taken out.
WITHDRAWN = "history.withdrawn"


def states(payload: object) -> bool:
    """Whether an entry made from ``payload`` may change the stated items in force (a ``work_contract``, or a
    withdrawal of turns): what a holder of those items asks again after (docs/STATE.md)."""
    return isinstance(payload, WorkContract) or (isinstance(payload, Activity) and payload.activity == WITHDRAWN)


def _withdrawn_steps(activity: Activity) -> set[str]:
    steps = activity.detail.get("steps")
    return {str(i) for i in steps} if isinstance(steps, list) else set()


class TurnIndex:
    """Turns of one chain, kept current entry by entry."""

    def __init__(
        self, tokens_per_char: float = PRIOR_TOKENS_PER_CHAR, *, mapper: Mapper | None = None
    ) -> None:
        if not (tokens_per_char > 0 and math.isfinite(tokens_per_char)):
            raise InvalidInput(
                f"tokens_per_char must be a positive number, not {tokens_per_char!r}; "
                "pass the bound model's CapacityProfile tokens_per_char"
            )
        self.tokens_per_char = float(tokens_per_char)
        self._mapper = mapper or Mapper()
        self.turns: list[Turn] = []
        self.summaries: list[Summary] = []
        self.controls: list[Control] = []
        self.resets: list[str] = []
        self.reset_marks: list[ResetMark] = []
        self.evidence: dict[str, EvidenceMeta] = {}
        self.stated = StatedState()  # the stated items (work_contract entries with a category), in order
        self.preamble: list[str] = []  # entries before the first directive
        self.problems: list[str] = []  # odd but readable things in the chain, named for the caller
        self.head: str | None = None
        self.count = 0
        # Bumped whenever what a request renders of a turn before the last one, or around them, may change (a
        # card, a presentation, a withdrawn step, a summary, a reset): every other entry adds to the last turn
        # only, so what is rendered of the turns before it is reused while this stands (``request.assemble``).
        self.revision = 0
        self._turn_by_id: dict[str, Turn] = {}
        self._turn_of_entry: dict[str, int] = {}
        self._pending_cards: dict[str, tuple[str, TurnCard]] = {}

    # ------------------------------------------------------------------ building

    @classmethod
    def build(cls, entries: Iterable[EntryLike], tokens_per_char: float = PRIOR_TOKENS_PER_CHAR, *,
              mapper: Mapper | None = None) -> TurnIndex:
        index = cls(tokens_per_char, mapper=mapper)
        for entry in entries:
            index.add(entry)
        return index

    def add(self, entry: EntryLike) -> None:
        """Fold the next entry of the chain into the index."""
        entry_id, parent, payload = self._unpack(entry)
        if entry_id in self._turn_of_entry or entry_id in self.preamble:
            raise InvalidInput(f"entry {entry_id} is already in the index; add each entry once")
        if parent is not _NO_PARENT and parent != self.head:
            raise InvalidInput(
                f"entry {entry_id} has parent {parent}, but the index head is {self.head}: it is not the next "
                "entry of this chain. Rebuild the index from chain_to_root(head)."
            )
        self.head = entry_id
        self.count += 1
        kind = getattr(payload, "kind", None)
        if isinstance(payload, Directive):
            self._start_turn(entry_id, payload)
            return
        turn = self.turns[-1] if self.turns else None
        if turn is None:
            self.preamble.append(entry_id)
        else:
            turn.entry_ids.append(entry_id)
            self._turn_of_entry[entry_id] = turn.ordinal
        if isinstance(payload, AssistantStep):
            self._add_step(turn, entry_id, payload)
        elif isinstance(payload, ToolResult):
            self._add_result(turn, entry_id, payload)
        elif isinstance(payload, EvidenceBody):
            self._add_evidence(turn, entry_id, payload)
        elif isinstance(payload, Receipt):
            self._add_receipt(turn, entry_id, payload)
        elif isinstance(payload, Presentation):
            self._add_presentation(entry_id, payload)
        elif isinstance(payload, TurnCard):
            self._add_card(entry_id, payload)
        elif isinstance(payload, Compaction):
            self._add_summary(entry_id, payload)
        elif isinstance(payload, ResetWithHandoff):
            self._add_reset(entry_id, payload)
        elif isinstance(payload, TurnTail):
            self._add_tail(turn, entry_id, payload)
        elif isinstance(payload, Activity) and payload.activity == WITHDRAWN:
            self._withdraw(entry_id, payload)
        elif kind in CONTROL_KINDS:
            if isinstance(payload, WorkContract):
                self._add_stated(turn, entry_id, payload)
            tag = getattr(payload, "tag", "")
            self.controls.append(Control(entry_id, str(kind), turn.ordinal if turn else None, tag))
            if turn is not None:
                turn.controls.append(entry_id)
                if kind == "nudge":  # model-visible: rendered as a user message after the steps before it
                    turn.nudges.append((len(turn.steps), str(getattr(payload, "text", ""))))
        elif isinstance(payload, Activity) and turn is not None and payload.activity in FAILURE_ACTIVITIES:
            turn.failure = failure_reason(payload)
        # activity, capacity_profile and presentation feedback/selection are not part of any turn's
        # content (a failure's reason is kept for the public Card); they stay in entry_ids so the turn's
        # span is complete.

    def _unpack(self, entry: EntryLike) -> tuple[str, Any, Any]:
        if isinstance(entry, StoredEntry):
            if entry.kind in UNREAD_KINDS:  # ``add`` looks at nothing but their kind: not decoded
                return entry.id, entry.parent, SimpleNamespace(kind=entry.kind)
            return entry.id, entry.parent, self._mapper.payload_of(entry)
        if isinstance(entry, tuple) and len(entry) == 2:
            first, payload = entry
            if isinstance(first, StoredEntry):
                return first.id, first.parent, payload
            if isinstance(first, str):
                return first, _NO_PARENT, payload
        raise InvalidInput(
            f"a TurnIndex takes StoredEntry objects or (entry, payload) / (id, payload) pairs, "
            f"not {type(entry).__name__}"
        )

    def _start_turn(self, entry_id: str, directive: Directive) -> None:
        if self.turns:
            self.turns[-1].closed = True
        turn = Turn(ordinal=len(self.turns) + 1, id=entry_id, directive=directive, entry_ids=[entry_id])
        self.turns.append(turn)
        self._turn_by_id[entry_id] = turn
        self._turn_of_entry[entry_id] = turn.ordinal
        pending = self._pending_cards.pop(entry_id, None)
        if pending is not None:  # a card can only follow its turn; kept for odd chains
            self._attach_card(turn, *pending)
        self._retokenize(turn)

    def _add_tail(self, turn: Turn | None, entry_id: str, tail: TurnTail) -> None:
        """The tail is the directive's: only one, before the turn's first step, is part of its record."""
        if turn is None or turn.steps or turn.tail:
            where = "before any directive" if turn is None else f"in turn {turn.ordinal} after its first step or tail"
            self.problems.append(f"turn tail {entry_id} comes {where}; it is not rendered")
            return
        turn.tail = tail.text
        self._retokenize(turn)

    def _add_stated(self, turn: Turn | None, entry_id: str, payload: WorkContract) -> None:
        """A stated item: said in the turn its ``turn_id`` names, in force from the turn after the one it
        was appended in (docs/STATE.md)."""
        said = self._turn_by_id.get(payload.turn_id) if payload.turn_id else None
        item = item_of(entry_id, payload, said.ordinal if said else None, turn.ordinal if turn else 0)
        if item is not None:
            self.stated.add(item)

    def _add_step(self, turn: Turn | None, entry_id: str, step: AssistantStep) -> None:
        if turn is None:
            self.problems.append(f"assistant step {entry_id} comes before any directive")
            return
        exchanges = [
            Exchange(b.id, b.name, dict(b.input)) for b in step.blocks if isinstance(b, ToolUseBlock)
        ]
        turn.steps.append(Step(entry_id, step, exchanges))
        self._retokenize(turn)

    def withdrawn_turns(self, activity: Activity) -> list[Turn]:
        """The turns a ``history.withdrawn`` activity changes (their sizes and cards change with it)."""
        ordinals = {self._turn_of_entry.get(i) for i in _withdrawn_steps(activity)}
        return [self.turns[o - 1] for o in sorted(o for o in ordinals if o is not None)]

    def _withdraw(self, entry_id: str, activity: Activity) -> None:
        self.revision += 1
        for turn in self.withdrawn_turns(activity):
            ids = _withdrawn_steps(activity)
            for k in reversed([k for k, s in enumerate(turn.steps) if s.id in ids]):
                answer = turn.final_answer is turn.steps[k]
                turn.withdrawn.append(turn.steps.pop(k).id)
                # A nudge right after the step answered it: it goes with it; later ones move up one step.
                turn.nudges = [(after - (after > k + 1), text) for after, text in turn.nudges if after != k + 1]
                if answer and turn.card is not None:
                    turn.card = turn.card.model_copy(update={"answered": Answer(
                        presentations=turn.card.answered.presentations)})
            self._retokenize(turn)

    def _add_result(self, turn: Turn | None, entry_id: str, result: ToolResult) -> None:
        if turn is None:
            self.problems.append(f"tool result {entry_id} comes before any directive")
            return
        eid = result.evidence_id
        if eid is not None and eid in self.evidence and eid not in turn.evidence:
            # A result stored by an earlier try of this exchange, referred to rather than stored again
            # (``vak serve`` resuming a turn after a restart): this turn digests and cards it as its own.
            turn.evidence.append(eid)
        for step in reversed(turn.steps):
            for ex in step.exchanges:
                if ex.tool_use_id == result.tool_use_id and ex.result is None:
                    ex.result_id, ex.result = entry_id, result
                    self._retokenize(turn)
                    return
        turn.orphan_results.append(entry_id)
        self.problems.append(
            f"tool result {entry_id} answers {result.tool_use_id!r}, which no open call made"
        )
        self._retokenize(turn)

    def _add_evidence(self, turn: Turn | None, entry_id: str, body: EvidenceBody) -> None:
        self.evidence[entry_id] = EvidenceMeta(
            body.tool_use_id,
            body.tool_name,
            body.chars,
            body.bytes,
            body.is_error,
            body.media_type,
            body.encoding,
            turn.ordinal if turn else None,
        )
        if turn is not None:
            turn.evidence.append(entry_id)

    def _add_receipt(self, turn: Turn | None, entry_id: str, receipt: Receipt) -> None:
        if turn is None or not turn.steps:
            return
        target = turn.steps[-1]
        if receipt.step_id is not None:
            target = next((s for s in turn.steps if s.id == receipt.step_id), target)
        target.receipt_id, target.usage = entry_id, receipt.usage
        self._retokenize(turn)

    def _add_presentation(self, entry_id: str, pres: Presentation) -> None:
        turn = self._turn_by_id.get(pres.turn_id)
        if turn is None:
            self.problems.append(
                f"presentation {entry_id} names turn {pres.turn_id}, which is not in this chain"
            )
            return
        self._touched(turn)
        turn.presentations.append(entry_id)
        turn.presentation_payloads[entry_id] = pres

    def _add_card(self, entry_id: str, card: TurnCard) -> None:
        turn = self._turn_by_id.get(card.turn_id)
        if turn is None:  # attached when its turn starts, the last one then
            self._pending_cards[card.turn_id] = (entry_id, card)
            self.problems.append(
                f"turn card {entry_id} names turn {card.turn_id}, which is not in this chain"
            )
            return
        self._touched(turn)
        self._attach_card(turn, entry_id, card)

    def _touched(self, turn: Turn) -> None:
        """``turn`` changes: ``revision`` moves unless it is the last turn (a turn's card and presentations
        come at its close, while it is still the last)."""
        if turn is not self.turns[-1]:
            self.revision += 1

    @staticmethod
    def _attach_card(turn: Turn, entry_id: str, card: TurnCard) -> None:
        if turn.card_id is None:  # written once and never rewritten: the first card stands
            turn.card_id, turn.card = entry_id, card
        turn.closed = True

    def _add_summary(self, entry_id: str, packet: Compaction) -> None:
        self.revision += 1
        first = self._turn_by_id.get(packet.first_turn_id)
        last = self._turn_by_id.get(packet.last_turn_id)
        if first is None or last is None:
            self.problems.append(f"compaction {entry_id} names a turn range that is not in this chain")
        # Named by its range (null): the range's evidence ids as the chain holds them here, those a listed one names.
        covered = (tuple(c.id for c in packet.covered_evidence) if packet.covered_evidence is not None else ()
                   if first is None or last is None else tuple(itertools.chain.from_iterable(
                       t.evidence for t in self.turns[first.ordinal - 1 : last.ordinal])))
        self.summaries.append(
            Summary(
                id=entry_id,
                first_turn_id=packet.first_turn_id,
                last_turn_id=packet.last_turn_id,
                first_ordinal=first.ordinal if first else None,
                last_ordinal=last.ordinal if last else None,
                summary=packet.summary,
                covered_evidence=covered,
                model=packet.model,
                source=packet.source,
                brief=packet.brief,
                through_step=len(last.steps) if last is not None and last is self.current and not last.closed else None,
            )
        )

    def _add_reset(self, entry_id: str, reset: ResetWithHandoff) -> None:
        self.revision += 1
        self.resets.append(entry_id)
        last = self._turn_by_id.get(reset.last_turn_id) if reset.last_turn_id else None
        if reset.model is not None:  # one model's rescue: only that model's plans start after it (the planner)
            turns = last.ordinal if last is not None else len(self.turns)
            self.reset_marks.append(ResetMark(entry_id, reset.model, turns, reset.handoff))
            return
        self.reset_marks.append(ResetMark(entry_id, None, len(self.turns), reset.handoff))
        for turn in self.turns:
            turn.behind_reset = True
        self.summaries = [behind(s) for s in self.summaries]

    # ------------------------------------------------------------------ tokens

    def _retokenize(self, turn: Turn) -> None:
        """Turn size: exact from receipts where every step has one, else chars × tokens_per_char.

        With receipts, what the turn added to the request is measured: the last step's prompt plus
        its output, less the first step's prompt (which already held the directive). Only the
        directive (and results after the last step) are estimated. A prompt that shrank inside the
        turn (a compaction mid-turn) makes the deltas meaningless, so that turn falls back to chars.
        """
        directive_chars = len(turn.directive.text) + len(turn.tail)
        step_chars = sum(chars_of_step(s) for s in turn.steps)
        result_chars = sum(len(ex.result.content) for ex in turn.exchanges if ex.result is not None)
        turn.chars = directive_chars + step_chars + result_chars
        usages = [s.usage for s in turn.steps]
        if usages and all(u is not None for u in usages):
            prompts = [u.prompt_tokens for u in usages if u is not None]
            if all(b >= a for a, b in itertools.pairwise(prompts)):
                first, last = usages[0], usages[-1]
                assert first is not None and last is not None
                tail = sum(len(ex.result.content) for ex in turn.steps[-1].exchanges if ex.result is not None)
                turn.tokens = (
                    self._estimate(directive_chars + tail)
                    + last.prompt_tokens
                    + last.output_tokens
                    - first.prompt_tokens
                )
                turn.tokens_source = "receipt"
                return
        turn.tokens = self._estimate(turn.chars)
        turn.tokens_source = "estimate"

    def _estimate(self, chars: int) -> int:
        return estimate_tokens(chars, self.tokens_per_char)

    # ------------------------------------------------------------------ reading

    def turn(self, ordinal: int) -> Turn:
        if not isinstance(ordinal, int) or isinstance(ordinal, bool) or not 1 <= ordinal <= len(self.turns):
            raise InvalidInput(
                f"no turn {ordinal!r}: this session has {len(self.turns)} turn(s), numbered from 1"
            )
        return self.turns[ordinal - 1]

    def by_id(self, turn_id: str) -> Turn:
        turn = self._turn_by_id.get(turn_id)
        if turn is None:
            raise InvalidInput(f"{turn_id!r} is not the directive id of a turn in this chain")
        return turn

    def turn_of(self, entry_id: str) -> int | None:
        """The ordinal of the turn an entry fell in (None when before the first directive or unknown)."""
        return self._turn_of_entry.get(entry_id)

    @property
    def current(self) -> Turn | None:
        return self.turns[-1] if self.turns else None

    def planned_turns(self) -> list[Turn]:
        """Turns the planner may place: everything not behind a reset."""
        return [t for t in self.turns if not t.behind_reset]

    # ------------------------------------------------------------------ comparing

    def dump(self) -> dict[str, Any]:
        """A canonical, JSON-ready picture of the index; equal dumps mean equal indexes."""
        return {
            "tokens_per_char": self.tokens_per_char,
            "head": self.head,
            "count": self.count,
            "preamble": list(self.preamble),
            "turns": [dump_turn(t) for t in self.turns],
            "summaries": [vars(s) | {"covered_evidence": list(s.covered_evidence)} for s in self.summaries],
            "controls": [vars(c) for c in self.controls],
            "resets": list(self.resets),
            "reset_marks": [vars(r) for r in self.reset_marks],
            "evidence": {k: vars(v) for k, v in sorted(self.evidence.items())},
            "problems": list(self.problems),
        }

    def canonical_bytes(self) -> bytes:
        return canonical.encode(self.dump())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TurnIndex):
            return NotImplemented
        return self.canonical_bytes() == other.canonical_bytes()

    __hash__ = None  # type: ignore[assignment]


_NO_PARENT: Any = object()  # an (id, payload) pair carries no parent to check

# Kinds whose payload ``TurnIndex.add`` never reads (in a turn's span, not its content): a StoredEntry of one is
# folded undecoded. The EvidenceActor's fold meets every plan entry, which nobody else decodes (~3 KB a step, a
# whole plan of ~80 KB every 256th: the planner folds its own from the model it wrote), and a profile a call.
UNREAD_KINDS = frozenset({"plan", "capacity_profile"})

