"""What the turn loop asks its assembler for (``StepRequest``) and gets back (``Assembled``).

Plain data shared by the loop (``vak_context.agent.loop``) and the AssemblerActor (``vak_context.actors.assembler``), which
builds one from the other; here, below both, so the loop never imports an actor module. ``layout`` is how the
assembler hands back only what the driver does not hold of a request; ``Assembled.whole`` puts it together again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from vak_context.agent.endpoint import EndpointSpec
from vak_context.context.request.messages import ChatRequest, Message, ToolSpec
from vak_context.events.envelope import StoredEntry


@dataclass(frozen=True)
class StepRequest:
    """What the loop asks the assembler for: one step's request of the open turn."""

    model: str  # the model name the request carries
    system: str
    tools: tuple[ToolSpec, ...]
    tail: str
    max_tokens: int = 512
    temperature: float | None = None
    session_key: str | None = None
    # The bound model's server, for an assembler that has no counter or summariser of its own (on Ray):
    # it builds them from this, once per endpoint (vak_context.agent.endpoint).
    endpoint: EndpointSpec | None = None
    deferred: tuple[ToolSpec, ...] = ()  # the admitted deferred tools (ChatRequest.deferred_tools)


@dataclass
class Assembled:
    """One step's request and how it was made."""

    request: ChatRequest
    plan_digest: str
    plan_id: str | None  # the plan entry, written when the step planned (None when the plan was kept)
    replanned: bool  # True at a turn's first step, and when the turn outgrew the frozen plan
    fidelity: dict[str, int]  # turns shown full / card / packet / behind a reset
    prefix_digest: str
    estimated_tokens: int
    budget_tokens: int
    written: list[str] = field(default_factory=list)  # packet or reset entries written on the way
    # How many of the session's entries the assembler's view holds after this step (None: not known): where
    # the driver's next append asks the ledger to hand entries back from (RayServices).
    seen: int | None = None
    # The session's head after this step's pass, as (entry id, next seq), where the assembler wrote it and so
    # knows it is the head (None: not known): the driver chains the step's own entries on it
    # (``vak_context.events.envelope.At``), knowing their ids without a call (RayServices).
    tip: tuple[str | None, int] | None = None
    # The stable prefix's tokens as the assembler sized it for ``prefix_digest`` (None: the chars estimate), where
    # ``prefix_sized`` says it has (a counter not asked yet: False): what a plan made ahead at the turn's close
    # is handed, so the driver asks the PlannerActor itself, not through the assembler (RayServices).
    prefix_tokens: int | None = None
    prefix_sized: bool = False
    # On Ray, where the driver asked for a delta (RayServices): ``request`` holds only the messages after the
    # first ``kept`` of the request the assembler handed it last (``sent`` names that one; the driver keeps
    # it): the history a turn does not change crosses once, not at every step.
    kept: int = 0
    sent: int | None = None
    # After the ``kept`` prefix, where the rest of the messages come from (empty: all from ``request``, in order):
    # each entry an index into the messages of the request ``sent`` last named (one the plan regrouped around
    # stays the driver's object: its encoding and sizes are kept by identity there), or ``FRESH``: the next
    # of ``request.messages``. ``whole`` puts them together.
    reused: tuple[int, ...] = ()
    # What this pass's commit appended besides the caller's own ``written`` entries (the planner's chained entries,
    # the plan entry), in order (None: not known, something was appended apart): with them the driver on Ray
    # knows the session's entries to its head, and hands them on at the turn's close (RayServices).
    appended: tuple[StoredEntry, ...] | None = ()
    # A held turn's pass on Ray (``behind``): what it chained and did not commit (the planner's entries, the plan
    # entry), ending at ``tip``: the driver commits them first with the next pass, or at the close (RayServices).
    unwritten: tuple[StoredEntry, ...] = ()

    def whole(self, held: Sequence[Message]) -> Assembled:
        """This answer with its request whole again, ``held`` being the messages of the request it was made
        against (the one ``have`` named): the ``kept`` prefix and the ``reused`` messages from ``held``."""
        if not self.kept and not self.reused:
            return self
        fresh = iter(self.request.messages)
        rest = (tuple(next(fresh) if i == FRESH else held[i] for i in self.reused) if self.reused
                else tuple(fresh))
        messages = (*held[:self.kept], *rest)
        return replace(self, request=self.request.model_copy(update={"messages": messages}), kept=0, reused=())


FRESH = -1  # in ``Assembled.reused``: the next message the answer carries itself


def layout(before: Sequence[Message], messages: Sequence[Message]) -> tuple[int, tuple[int, ...], tuple[Message, ...]]:
    """How ``messages`` are made from ``before`` (the request the driver holds): the prefix the two share, then
    per later message its index in ``before`` (the same object, or equal to the one at its own place) or
    ``FRESH``, and the fresh messages themselves. A plan regrouped at a turn's first step moves most messages
    without changing them: they do not cross again (``Assembled.reused``)."""
    most = min(len(before), len(messages))
    kept = 0
    while kept < most and (before[kept] is messages[kept] or before[kept] == messages[kept]):
        kept += 1
    where = {id(m): i for i, m in enumerate(before)}
    reused: list[int] = []
    fresh: list[Message] = []
    for i in range(kept, len(messages)):
        m = messages[i]
        at = where.get(id(m))
        if at is None and i < len(before) and before[i] == m:
            at = i
        reused.append(FRESH if at is None else at)
        if at is None:
            fresh.append(m)
    if len(fresh) == len(messages) - kept:  # nothing reused after the prefix: the plain form
        return kept, (), tuple(fresh)
    return kept, tuple(reused), tuple(fresh)


def interned(step: StepRequest, last: StepRequest | None) -> StepRequest:
    """``step`` holding ``last``'s system prompt and tool specs where they are equal. On Ray each call unpickles
    new objects, and what is computed once per prompt and spec (the prefix digest, a spec's chars and JSON) is
    kept by their identity: the same objects from call to call keep it."""
    if last is None or last.tools is step.tools or last.system != step.system or last.tools != step.tools:
        return step
    return replace(step, system=last.system, tools=last.tools)
