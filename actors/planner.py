"""PlannerActor: plans a session's next request and records the plan (spec §4), as a plain class.

``vak_context.actors.factory.planner_actor`` wraps it with ``ray.remote``. Thin: it keeps each session's
``SessionView`` current from the entries appended since it last looked, calls the pure planner,
and appends a ``plan`` entry holding the plan, its inputs and both digests. ``explain(plan_id)``
rebuilds the view as of the recorded chain head and plans again from the recorded inputs, so
any request can be explained after the fact: equal digests mean the same plan.

Each model's planner state (the current-turn reserve) is read back from its last recorded plan, so
a restarted actor carries on where the old one stopped. It writes through a LedgerActor handle when
given one (the folder's one writer), else through its own LedgerStore.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

from vak_context.actors.ledger_client import LedgerClient
from vak_context.actors.session_fold import FoldedSessions
from vak_context.agent.request import plan_record
from vak_context.context.capacity.profile import CapacityProfile, from_record
from vak_context.context.capacity.tokens import PRIOR_TOKENS_PER_CHAR
from vak_context.context.planner.plan import PlannerState
from vak_context.context.planner.view import SessionView
from vak_context.errors import InvalidInput
from vak_context.events.envelope import Mapper
from vak_context.events.payloads import CapacityProfileRecord, PlanRecord
from vak_context.storage.ledger import LedgerStore


def as_profile(profile: CapacityProfile | CapacityProfileRecord | Mapping[str, Any]) -> CapacityProfile:
    """A CapacityProfile from itself, its ledger record, or the record's JSON."""
    if isinstance(profile, CapacityProfile):
        return profile
    if isinstance(profile, CapacityProfileRecord):
        return from_record(profile)
    if isinstance(profile, Mapping):
        return from_record(CapacityProfileRecord.model_validate({"kind": "capacity_profile", **profile}))
    raise InvalidInput(f"not a capacity profile: {type(profile).__name__}; pass a CapacityProfile or its record")


class PlannerActor:
    """``ledger``: the folder's LedgerActor handle, or a LedgerStore this process holds as its writer."""

    def __init__(self, root: str, ledger: LedgerStore | Any, tokens_per_char: float = PRIOR_TOKENS_PER_CHAR) -> None:
        self.root = root
        self.ledger = LedgerClient(root, ledger)
        self.tokens_per_char = tokens_per_char
        self.mapper = Mapper()
        self._lock = threading.RLock()
        self._views = FoldedSessions(self.ledger, lambda chain: SessionView.build(chain, self.tokens_per_char),
                                     SessionView.add_all, self._lock)

    def view(self, session: str) -> SessionView:
        """The session's view, brought up to date with what was appended since last time."""
        return self._views.get(session)

    def plan(
        self,
        session: str,
        profile: CapacityProfile | CapacityProfileRecord | Mapping[str, Any],
        directive: str = "",
        *,
        prefix_tokens: int,
        tail_tokens: int,
        reading_terms: Sequence[str] = (),
        current: int | None = None,
        record: bool = True,
    ) -> dict[str, Any]:
        """Plan the session's next request for ``profile``; record it unless ``record`` is False.

        Returns ``{"plan", "digest", "inputs_digest", "entry_id"}`` (``entry_id`` of the plan entry).
        """
        with self._lock:
            view = self.view(session)
            p = view.plan(
                as_profile(profile),
                directive,
                prefix_tokens=prefix_tokens,
                tail_tokens=tail_tokens,
                reading_terms=tuple(reading_terms),
                current=current,
            )
            entry_id = self.ledger.append(session, [plan_record(p, view.index.head)])[0] if record else None
        return {"plan": p.to_json(), "digest": p.digest, "inputs_digest": p.inputs_digest, "entry_id": entry_id}

    def explain(self, plan_id: str) -> dict[str, Any]:
        """Plan again from a recorded plan's inputs, on the chain as it was; say whether it is the same."""
        entry = self.ledger.get(plan_id)
        record = self.mapper.payload_of(entry)
        if not isinstance(record, PlanRecord):
            raise InvalidInput(f"{plan_id} is a {entry.kind} entry, not a plan")
        inputs = record.inputs
        chain = self.ledger.chain_to_root(record.head) if record.head else []
        view = SessionView.build(chain, self.tokens_per_char)
        p = view.plan(
            as_profile(inputs["profile"]),
            inputs["directive"] if inputs.get("current") is None else "",
            prefix_tokens=int(inputs["prefix_tokens"]),
            tail_tokens=int(inputs["tail_tokens"]),
            state=PlannerState.from_json(inputs.get("state")),
            reading_terms=tuple(inputs.get("reading_terms", ())),
            current=inputs.get("current"),
        )
        return {
            "recorded": record.digest,
            "recomputed": p.digest,
            "matches": p.digest == record.digest and p.inputs_digest == record.inputs_digest,
            "plan": p.to_json(),
        }

    def state(self, session: str, model: str) -> dict[str, Any] | None:
        """The planner state the model's last recorded plan returned (None before its first plan)."""
        st = self.view(session).states.get(model)
        return None if st is None else {"current_turn_reserve": st.current_turn_reserve, "samples": st.samples,
                                        "observed_through": st.observed_through}
