"""A turn resumed from the client's history: results of calls the session holds no open turn for.

A request that ends with the client's calls leaves its turn open in the server's memory; a restart (a
clean stop closes it ``cancelled``) or a failed upstream call loses it, and the client then resends its
history with the calls' results. (A kill leaves the turn open in the ledger, and a resend with the results
of exactly its last step's calls takes it up again: ``Conversation._reopen``, ``Session.reopen``; this
module is for every other case.) Those results are the turn's
exchange, whatever their size: the new turn records each reply's calls as an earlier step
(``Turn.earlier_step``) and stores each result as evidence, projected windowed or digested like any other,
never quoted whole into the directive (a 50 KB result quoted into a directive cannot fit an 8,192-token
window, and nothing would ever be sent).

A retry appends nothing twice: a result the session already stores (the same call id and the same
bytes: an earlier try whose upstream call failed, or a server killed after storing it) is referred to by
its evidence id, and the earlier steps that made these calls are withdrawn from the projection (a
``history.withdrawn`` activity naming them), so the request carries each call once, with its result.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from vak_context.events.envelope import Mapper
from vak_context.serve.protocol import ClientCall, ClientRequest, Item


@dataclass(frozen=True)
class Earlier:
    """One reply's calls with their results from the client's history (the calls it answered, in the
    reply's order)."""

    calls: tuple[ClientCall, ...]
    results: dict[str, tuple[str, bool]]


def pending_exchanges(request: ClientRequest, new: Sequence[Item]) -> tuple[list[Item], list[Earlier]]:
    """``new`` split into what comes before its pending exchanges and those exchanges: the run of results
    (with the replies with calls among them) that ends ``new``, each result under the reply that made its
    call (in ``new``, or the last reply the session holds). A run that does not read so (a result no reply
    before it made, a reply with calls the client did not answer) is left as it was: ``(new, [])``."""
    start = len(new)
    while start > 0 and (new[start - 1].role == "tool" or (new[start - 1].role == "assistant" and new[start - 1].calls)):
        start -= 1
    run = new[start:]
    if not any(i.role == "tool" for i in run):
        return list(new), []
    before = request.items[:len(request.items) - len(new)]
    groups: list[tuple[Item, list[Item]]] = []
    for item in run:
        if item.role == "assistant":
            groups.append((item, []))
            continue
        if not groups:  # results of the reply the session holds (the client sent it before)
            maker = next((i for i in reversed(before) if i.role == "assistant"
                          and any(c.id == item.call_id for c in i.calls)), None)
            if maker is None:
                return list(new), []
            groups.append((maker, []))
        reply, results = groups[-1]
        if not any(c.id == item.call_id for c in reply.calls) or any(r.call_id == item.call_id for r in results):
            return list(new), []
        results.append(item)
    if any(not results for _, results in groups):
        return list(new), []
    earlier = []
    for reply, results in groups:
        answered = {r.call_id: (r.text, r.is_error) for r in results}
        earlier.append(Earlier(tuple(c for c in reply.calls if c.id in answered), answered))
    return list(new[:start]), earlier


def stored_before(ledger: Any, name: str, earlier: Sequence[Earlier]) -> tuple[list[str], dict[str, str]]:
    """What the session already holds of these exchanges: the assistant steps that made their calls and
    got no result, or a result of the same bytes (the lost turn's step, an earlier try's; each withdrawn
    before the exchange is recorded again; a finished step that reused a call id for another call stays),
    and, by call id, the evidence of a result stored with the same bytes. Read from the session's entries
    (a resumed turn is rare: a restart, or a retry after a failed upstream call)."""
    bodies = {i: text.encode("utf-8") for e in earlier for i, (text, _) in e.results.items()}
    stored: dict[str, str] = {}
    if not bodies or name not in ledger.sessions():
        return [], stored
    mapper = Mapper()
    made: dict[str, list[str]] = {}  # step id: the calls of ours it made
    answered: dict[tuple[str, str], str | None] = {}  # (step id, call id): its result's evidence id
    same: set[str] = set()  # evidence with the same bytes as the result of its call
    for entry in ledger.entries(name):
        if entry.kind == "assistant_step":
            ours = [b.id for b in mapper.payload_of(entry).tool_uses if b.id in bodies]
            if ours:
                made[entry.id] = ours
        elif entry.kind == "tool_result":
            result = mapper.payload_of(entry)
            maker = next((s for s in reversed(made) if result.tool_use_id in made[s]), None)
            if maker is not None:
                answered[(maker, result.tool_use_id)] = result.evidence_id
        elif entry.kind == "evidence_body":
            call_id = mapper.payload_of(entry).tool_use_id
            if call_id in bodies and entry.blob == bodies[call_id]:
                stored.setdefault(call_id, entry.id)
                same.add(entry.id)
    steps = [s for s, calls in made.items()
             if all((s, c) not in answered or answered[(s, c)] in same for c in calls)]
    return steps, stored
