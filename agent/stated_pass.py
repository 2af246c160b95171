"""The model pass at turn close (docs/STATE.md "The model pass"): the side call that reads a closed turn's
directive for stated items the deterministic pass did not find, and the entries it writes.

Made where the packet summariser is held (``PlannerActor.plan_ahead``, in its actor on Ray), through the
same :class:`~vak_context.agent.summarise.Summariser` (its model, its timeout), when a turn closes and
before the next request is planned ahead: never on a request's path. Only where the session asked for it
(``stated_pass="model"``: ``Summariser.stated_pass``) and the profile allows it
(:func:`~vak_context.context.stated.model_pass.not_allowed`). What it writes: a ``stated.extract``
activity (the model, the call's usage and latency, what was kept and what was rejected and why; never
model-visible), the record of its cost as ``packet.summarise`` is a summary's, then one ``work_contract``
entry per item kept (``via: "model"``, the turn and its directive as where it was stated), keyed and
superseding as the deterministic pass's items do; in force from the next turn.

A model that raises, times out or answers junk writes the activity with ``failed`` and no item: the turn's
answer stands, and the deterministic pass's items are what was extracted.
"""

from __future__ import annotations

from typing import Any, Literal, cast

from vak_context.agent.summarise import Summariser
from vak_context.context.capacity.profile import CapacityProfile
from vak_context.context.planner.view import SessionView
from vak_context.context.stated.model_pass import (
    MAX_DIRECTIVE_CHARS,
    PROMPT_OVERHEAD,
    STATED_SYSTEM,
    Reading,
    answer_tokens,
    not_allowed,
    read_answer,
    readable,
    stated_prompt,
)
from vak_context.events.payloads import Activity, WorkContract
from vak_context.storage.contract import Ledger

ACTIVITY = "stated.extract"
Category = Literal["rule", "constraint", "goal", "fact", "preference"]


async def extract_with_model(ledger: Ledger, session: str, view: SessionView, profile: CapacityProfile, *,
                             directive_id: str, directive: str, summariser: Summariser) -> list[str]:
    """The model pass over the closed turn's ``directive`` (its entry ``directive_id``); the entry ids written
    (the activity, then the items), none where the pass is off or the directive has nothing to read."""
    if not summariser.stated_pass:
        return []
    text = readable(directive)
    if len(text.split()) < 2 or len(text) > MAX_DIRECTIVE_CHARS:
        return []  # no statement in it ("ok"), or a pasted document: the deterministic pass's reading stands
    stated = view.index.stated
    found = [it for it in stated.items if it.turn_id == directive_id and it.via == "directive"]
    current = stated.current()
    prompt = stated_prompt(text, [it.text for it in found])
    max_tokens = answer_tokens(text, summariser.tokens_per_char)
    need = summariser.tokens(STATED_SYSTEM) + summariser.tokens(prompt) + max_tokens + PROMPT_OVERHEAD
    detail: dict[str, Any] = {"model": summariser.model, "turn_id": directive_id, "found": len(found), "calls": []}
    why = not_allowed(profile, need, window_tokens=summariser.window_tokens,
                      on_bound_model=summariser.model == profile.key.model)
    reading = Reading()
    if why is not None:
        detail["skipped"] = why
    else:
        try:
            result = await summariser.summarise(prompt, max_tokens, system=STATED_SYSTEM)  # its timeout_s applies
        except TimeoutError:
            detail["failed"] = f"timed out after {summariser.timeout_s} s"
        except Exception as e:  # a provider's error of any kind: nothing is recorded, the turn's answer stands
            detail["failed"] = f"{type(e).__name__}: {e}"[:300]
        else:
            detail["calls"].append({"prompt_chars": len(prompt), "max_tokens": max_tokens,
                                    "usage": result.usage.model_dump(mode="json"),
                                    "latency_ms": round(result.latency_ms, 1), "stop_reason": result.stop_reason})
            reading = read_answer(result.text, directive, found, current)
            if reading.malformed:
                detail["failed"] = f"a malformed answer: {reading.malformed}"
            detail["kept"] = len(reading.drafts)
            if reading.rejected:
                detail["rejected"] = reading.rejected
    items = [WorkContract(text=d.text, category=cast(Category, d.category), key=d.key, turn_id=directive_id,
                          entry_id=directive_id, via="model") for d in reading.drafts]
    ids = ledger.append(session, [Activity(activity=ACTIVITY, detail=detail), *items])
    for entry_id in ids:
        view.add(ledger.get(entry_id))
    return ids
